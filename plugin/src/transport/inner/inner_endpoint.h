/* The inner transport (wrap mode; transport.h): the paths of a connection carry data through
 * the inner plugin's comms (inner.h, loaded process-wide by inner_dev.h) while linkguard keeps
 * the control channel, sequence numbers, failover, fencing and replay (conn.h). Its ops table
 * is inner_transport.c's; inner_endpoint.c has the rest. One inner send/recv comm per path:
 *
 *  - Handshake (monitor thread, lg_inner_ep_step). Once a path's control channel is up (at connect
 *    or after a rebuild) the receiver calls the inner listen on that NIC's inner device and
 *    sends the handle in LG_INNER_PARTS INNER frames on the path's control channel; the
 *    sender assembles it in a buffer that stays put across its non-blocking connect attempts;
 *    the receiver drives the inner accept. Every registered buffer of the connection is then
 *    registered with the new comm, and the path carries. A rebuilt path is announced READY by
 *    the receiver only once its comm is accepted, and the sender takes it into the connection
 *    only once its own comm is connected too.
 *  - Data (NCCL's thread, lg_inner_ep_pump from isend/irecv/test). Messages go whole, one inner
 *    isend/irecv each, on the committed path only, in sequence order; the receiver posts
 *    receives in order and acknowledges placed messages on the control channel as in native
 *    mode. A send completes when the ack covers it AND its inner send completed (the inner no
 *    longer reads the buffer), on its inner completion alone when it is kept in a copy (small,
 *    host memory: a replay sends the copy), or with LINKGUARD_INNER_PLACED on the inner completion alone
 *    (conn.h: what each transport guarantees); the optional-receive-completion marker is never
 *    passed on, so every receive completes only once its data is placed. A flush goes to the
 *    comm of the NIC that placed the receive.
 *  - Contexts. Each NCCL communicator's context (ctx.h) has its own inner context, in which
 *    every listen and connect of its connections is made. connect/accept hand NCCL a
 *    connection only once its inner comms are up, so regMr registers with them at once.
 *  - Switch. The receiver, before its RESYNC, closes the inner comm of the path it leaves
 *    (fence: the inner guarantees that no write lands after close) and forgets the inner
 *    receives posted on it; the sender, at its commit, forgets the inner sends of the old path
 *    and posts everything from the receiver's count again on the new one. Any path left by a
 *    switch (the backup at reintegration too) is fenced and rebuilt: receives posted on a
 *    standby comm could otherwise match a later replay into stale buffers.
 * State: all of it is the transport's own (inner_conn.h): the connection's endpoint (c->ep:
 * its locks, registrations, inner request of each window slot, goodput counters) and each
 * path object's inner comm (p->tp), made by inner_transport.c's open/path_open ops.
 * Locks (the endpoint's): ep->wmu serialises the inner data calls of NCCL's thread with the
 * monitor's commits and fences (NCCL's thread only try-locks it); ep->mr_mu guards the
 * connection's list of registrations and each path's comm/ready pair. Order: wmu, then the
 * protocol's c->mu; mr_mu alone. */
#ifndef LG_INNER_ENDPOINT_H
#define LG_INNER_ENDPOINT_H

#include <stdint.h>

#include "transport/inner/inner_dev.h"
#include "transport/inner/inner_mr.h"
#include "transport/inner/inner_conn.h"
#include "transport/transport.h"

struct lg_conn;
struct lg_path;
struct lg_ctrl;

/* A path carries data: its inner comm is there and not fenced (any thread). */
int lg_inner_ep_carries(const struct lg_path *p);
/* Sender: its sends complete on the inner completion alone (LINKGUARD_INNER_PLACED, and its
 * receiver posts no groups: wire.h, GROUPED). */
static inline int lg_inner_ep_placed(const struct lg_inner_conn *e)
{
    return lg_inner_devs->placed &&
           __atomic_load_n(&e->grouped, __ATOMIC_SEQ_CST) == LG_GROUPED_NONE;
}
/* NCCL's thread: post and complete inner sends/receives on the committed path. */
void lg_inner_ep_pump(struct lg_conn *c);
/* Receiver, a POSTED(n): a sender that keeps sends (KEEPS) asks for the acks up to n, of
 * messages whose acks would otherwise wait for a batch. */
void lg_inner_ep_ack_asked(struct lg_path *p, uint64_t n);
/* Handlers: an INNER frame on the sender's side; 1 taken, -1 the path failed. */
int lg_inner_ep_on_frame(struct lg_path *p, const struct lg_ctrl *f);
/* Monitor: drives the handshakes; 1 while one is in progress (run again soon). */
int lg_inner_ep_step(struct lg_conn *c, uint64_t now);
/* Closes a path's inner comm (after its registrations) and handshake leftovers; idempotent.
 * Not under wmu or mr_mu. */
void lg_inner_ep_fence(struct lg_path *p);
/* Monitor: fences a path that stays up (the backup left at a reintegration) and starts the
 * handshake of its next inner comm on the same control channel. */
void lg_inner_ep_rearm(struct lg_path *p);
/* Monitor, at a commit to another path, under ep->wmu held across the change of the committed
 * path (and the sender's rewind): forget the inner requests posted on the path left, which
 * the caller then fences (the receiver before its RESYNC goes out). */
void lg_inner_ep_rx_forget(struct lg_conn *c);
void lg_inner_ep_tx_forget(struct lg_conn *c);
/* Exact resync when completion does not wait for our ack (LINKGUARD_INNER_PLACED): the
 * sender, as it proposes a switch, stops completing inner sends and tells the receiver on
 * the target path how many completed (DELIVERED, before the SWITCH); the receiver, as it
 * commits under wmu, completes its inner receives on the path it leaves until it holds that
 * many, so that its RESYNC covers every send NCCL may have reused. */
void lg_inner_ep_tx_switching(struct lg_conn *c, struct lg_path *target);
void lg_inner_ep_rx_hold(struct lg_conn *c, struct lg_path *old, uint64_t delivered);
/* Receiver: a closing sender's BYE says `delivered` of its sends completed; completes those
 * receives first (transport.h, drain_delivered). */
void lg_inner_ep_drain_delivered(struct lg_conn *c, uint64_t delivered);

/* connect/accept hand a connection to NCCL only once its inner comms are there, so that
 * regMr registers with them for real (or fails) at once: 1 ready (the active path carries,
 * and every other live path carries too or LINKGUARD_BACKUP_GRACE_MS passed since the first
 * call), 0 not yet (NCCL calls again), -1 never (the connection failed). */
int lg_inner_ep_conn_usable(struct lg_conn *c, uint64_t now);

/* Registrations of a connection: on every path that carries now, and on each path's comm as
 * it comes (rebuilds). */
ncclResult_t lg_inner_ep_reg_mr(struct lg_conn *c, void *data, size_t size, int type,
                            uint64_t offset, int fd, struct lg_inner_mr **out);
ncclResult_t lg_inner_ep_dereg_mr(struct lg_conn *c, struct lg_inner_mr *mr);
/* iflush on the comm of the NIC that placed the data (the path now in the slot whose comm
 * completed the receive, which may be a rebuilt one on that NIC): a linkguard flush
 * request, or NULL when that NIC has no comm now (its fenced comm took the writes with it). */
ncclResult_t lg_inner_ep_iflush(struct lg_conn *c, int n, void **data, int *sizes,
                            struct lg_inner_mr **mrs, void **request);
/* test() of a flush request; 0 if `request` is not one. */
int lg_inner_ep_flush_test(void *request, int *done, ncclResult_t *rc);

#endif
