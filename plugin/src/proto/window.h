/* The message window of a connection (conn.h: requests in LG_WINDOW slots by seq), from the
 * side of the transports that fill it and of NCCL's test(): placement and acks on the
 * receiver, acks taken on the sender, completion. The transports report here through the
 * upcall API (upcall.h); the rest is the protocol's own. */
#ifndef LG_WINDOW_H
#define LG_WINDOW_H

#include <stdint.h>

#include "nccl_net_abi.h"
#include "proto/upcall.h"

struct lg_conn;
struct lg_path;
struct lg_req;
struct lg_inner_mr;

/* Sender, isend under mu: the slot may take the next message (free, or a kept send acked and
 * written out). */
int lg_send_slot_free(struct lg_conn *c, const struct lg_req *r);
/* Sender, isend under mu, slot r filled but for its data (mr: NCCL's registration of it, or
 * NULL): copies a small message into the slot's buffer (LINKGUARD_SEND_COPY), so that its
 * send completes before its ack (transport.h, sends_copies); else leaves it to complete on
 * its ack. */
void lg_send_keep(struct lg_conn *c, struct lg_req *r, const void *data, size_t size,
                  const struct lg_inner_mr *mr);
/* Sender, any thread: while kept sends wait for their acks (their receiver batches them),
 * asks it to ack every message posted so far (lg_send_ask_ack_upto). */
void lg_send_ask_ack(struct lg_conn *c);
/* Sender, close: waits until the kept sends are acked (the monitor may fail over meanwhile
 * and replay them from their copies), the connection failed, or the peer closed. */
void lg_send_settle(struct lg_conn *c);
/* Sender: the receiver placed every message below n (an ACK, or the count a closing
 * receiver's BYE carries): completes them, or fails the connection if no honest peer could
 * say so. 0 or -1. */
int lg_conn_take_ack(struct lg_conn *c, uint64_t n);
/* Both: test() of a request; the transport progresses it once if it is not complete. */
ncclResult_t lg_req_test(struct lg_req *r, int *done, int *sizes);

#endif
