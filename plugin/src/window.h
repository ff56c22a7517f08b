/* The message window of a connection (conn.h: requests in LG_WINDOW slots by seq), from the
 * side of the transports that fill it and of NCCL's test(): placement and acks on the
 * receiver, acks taken on the sender, completion. Below the transports: they report here. */
#ifndef LG_WINDOW_H
#define LG_WINDOW_H

#include <stdint.h>

#include "nccl_net_abi.h"

struct lg_conn;
struct lg_path;
struct lg_req;

/* Receiver: a receive is complete (`size` bytes placed, on path p): marks it, advances the
 * placed count, acks when due. -1 on a protocol error (the path failed). */
int lg_recv_complete(struct lg_path *p, struct lg_req *r, uint64_t size);
/* Receiver: acks what is placed and not yet acknowledged, on path p. */
void lg_recv_flush_ack(struct lg_path *p);
/* Sender: the receiver placed every message below n (an ACK, or the count a closing
 * receiver's BYE carries): completes them, or fails the connection if no honest peer could
 * say so. 0 or -1. */
int lg_conn_take_ack(struct lg_conn *c, uint64_t n);
/* Both: test() of a request; the transport progresses it once if it is not complete. */
ncclResult_t lg_req_test(struct lg_req *r, int *done, int *sizes);

#endif
