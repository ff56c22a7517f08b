/* linkguard's TCP transport (transport.h): each path is `nstreams` data sockets beside the
 * protocol's control channel; the sender cuts messages into chunks (struct lg_chunk_hdr) that
 * whichever stream of the active path has room takes from the connection's cursor
 * (tcp_send.c); the receiver places each chunk straight into the posted buffer (tcp_recv.c);
 * the monitor watches the streams for stalls and loss (tcp_watch.c). */
#ifndef LG_TCP_H
#define LG_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

extern const struct lg_transport lg_tcp_transport;

/* tcp_send.c */
void lg_tcp_send_handler(struct lg_task *t, uint32_t events);
void lg_tcp_send_posted(struct lg_conn *c, size_t size, uint32_t wake);
void lg_tcp_send_detached(struct lg_path *p);
uint32_t lg_tcp_send_queued(struct lg_conn *c, uint64_t seq, size_t size);
int lg_tcp_send_mid_message(const struct lg_conn *c);
int lg_tcp_send_to_boundary(struct lg_conn *c);
void lg_tcp_send_resume(struct lg_conn *c);
/* tcp_recv.c */
void lg_tcp_recv_handler(struct lg_task *t, uint32_t events);
int lg_tcp_recv_prepare(struct lg_conn *c, struct lg_req *r, size_t maxcap);
void lg_tcp_recv_posted(struct lg_conn *c);
void lg_tcp_recv_progress(struct lg_conn *c, const struct lg_req *r);
void lg_tcp_recv_commit_end(struct lg_conn *c);
/* tcp_watch.c (monitor) */
void lg_tcp_watch(struct lg_conn *c, uint64_t now);
void lg_tcp_goodput(struct lg_conn *c, uint64_t now);
/* Its own control frame: STALLED (sender side, tcp_watch.c). 1 taken, 0 not its, -1 a lie. */
int lg_tcp_on_frame(struct lg_path *p, const struct lg_ctrl *f);

#endif
