/* The protocol's upcall API: what a transport (transport/tcp, transport/inner, transport/fake)
 * may call in the protocol, and the one protocol header made for them. A transport reports
 * here what it saw (a receive placed, a path broken or stalled or gray, a peer's lie) and
 * applies the protocol's epoch rule to what it reads; the protocol decides what follows.
 * Declarations of functions of conn.c, handoff.c, window.c, resync.c and gray.c, and the
 * inline reads of a transport's own pointers: no protocol object is defined here. (TCP's
 * receiving streams, tcp_recv.c, and the inner endpoint, inner_endpoint.c, still read the
 * protocol's objects through conn.h: issue 27. The fake transport and the rest of TCP and of
 * the inner one need nothing else.) */
#ifndef LG_UPCALL_H
#define LG_UPCALL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/census.h"
#include "nccl_net_abi.h"

struct lg_conn;
struct lg_path;
struct lg_req;
struct lg_task;
struct lg_ctrl;
struct lg_endpoint; /* transport.h */
struct lg_ep_path;

/* ---- a transport's own state: its objects' first word (conn.h asserts it) --------------- */

/* The transport's endpoint of a connection (tr->open's), read inline on every post without
 * the protocol's objects in sight: a pointer to a struct, converted, points to its first
 * member (C11 6.7.2.1p15). */
static inline struct lg_endpoint *lg_conn_ep(const struct lg_conn *c)
{
    return *(struct lg_endpoint *const *)(const void *)c;
}
/* The transport's state of a path object (tr->path_open's), the same way. */
static inline struct lg_ep_path *lg_path_tp(const struct lg_path *p)
{
    return *(struct lg_ep_path *const *)(const void *)p;
}

/* ---- a connection and its paths, as a transport names them (handoff.c) ------------------ */

/* Which wire a path is: its connection's nonce (both ends know it), its slot and its build. */
struct lg_path_id {
    uint64_t nonce;
    uint32_t gen;
    int slot;
};
struct lg_path_id lg_path_id(const struct lg_path *p);
struct lg_conn *lg_path_conn(const struct lg_path *p);
int lg_path_is_up(const struct lg_path *p); /* (conn.h's lg_path_up, out of line) */
int lg_conn_is_send(const struct lg_conn *c);
/* The path in a slot (0 primary, 1 backup), NULL when none; any thread. */
struct lg_path *lg_conn_path(struct lg_conn *c, int slot);
/* The path the committed epoch uses, NULL while a rebuild of its slot clears it. */
struct lg_path *lg_conn_committed(struct lg_conn *c);
/* What a connection is, fixed when it is made: what an endpoint copies at open. */
struct lg_conn_facts {
    int send;       /* a send connection (else a receive one) */
    int dev;        /* its linkguard device */
    int nstreams;   /* data streams per path */
    uint32_t blob;  /* the transport's word, from the connector's hello (wire.h) */
    uint64_t nonce; /* both ends' name for it (logs) */
};
struct lg_conn_facts lg_conn_facts(const struct lg_conn *c);
/* A slot's name in logs. */
static inline const char *lg_slot_name(int slot) { return slot ? "backup" : "primary"; }
/* The NIC a path is on (logs). */
const char *lg_path_nic(const struct lg_path *p);
/* Data stream k (0..nstreams-1) of path p: its socket's task (progress.h). */
struct lg_task *lg_path_stream(struct lg_path *p, int k);
/* Something (a heartbeat at least) was read for p within a few heartbeat periods. */
int lg_path_heard(const struct lg_path *p, uint64_t now);
/* A control frame out on p's channel (any thread). */
void lg_path_ctrl_out(struct lg_path *p, const struct lg_ctrl *f);
/* A control frame out on c's active path, if that path is up (any thread but under none of
 * c's locks). */
void lg_conn_ctrl_out(struct lg_conn *c, const struct lg_ctrl *f);
/* Any thread: the monitor looks at c soon (a transport's state changed for its next run). */
void lg_conn_wake(struct lg_conn *c);
/* How many messages NCCL posted; and, sender, how many the receiver acknowledged. */
uint64_t lg_conn_posted(struct lg_conn *c);
uint64_t lg_conn_acked(struct lg_conn *c);
/* NCCL polled c since the last call (it tests its requests), reset by this call; and
 * NCCL's thread, a transport that sees it poll: it did. */
int lg_conn_take_polled(struct lg_conn *c);
void lg_conn_note_polled(struct lg_conn *c);
/* Receiver: how many messages are placed, in order. */
uint64_t lg_conn_placed(struct lg_conn *c);
/* Sender: where the cursor is (the next message to hand out), under the connection's lock. */
uint64_t lg_send_cursor(struct lg_conn *c);
/* Sender: a kept send (done for NCCL) is not acknowledged yet. */
int lg_send_kept_unacked(struct lg_conn *c);
/* Sender: no hold and no switch under way: data flows as the transport sends it. */
int lg_send_steady(struct lg_conn *c);
/* A posted request as a transport sees it: its first message, the bytes of a send, and how
 * many messages it is (1, or a grouped receive's). */
struct lg_req_info {
    uint64_t seq;
    size_t size;
    int nmsgs;
};
struct lg_req_info lg_req_info(const struct lg_req *r);
/* Sender: no transport reads request r's buffer any more (its writers are done). */
int lg_req_written(const struct lg_req *r);
/* The path and index (1..nstreams) of the data stream whose socket's task is t. */
struct lg_path *lg_stream_path(struct lg_task *t, int *index);
/* Runs fn(arg) under c's lock: a transport's state that the ops called under it read
 * (send_queued, mid_message, to_boundary) changes under it too. */
void lg_conn_locked(struct lg_conn *c, void (*fn)(void *arg), void *arg);
/* NCCL's thread: the path that carries the committed epoch's data, NULL if none, usable
 * until lg_conn_leave_active(c, ph) (the monitor frees no path such a section may hold). */
struct lg_path *lg_conn_enter_active(struct lg_conn *c, uint32_t *ph);
void lg_conn_leave_active(struct lg_conn *c, uint32_t ph);
/* The handler of a data socket that carries nothing (a transport without data streams). */
void lg_stream_idle_handler(struct lg_task *t, uint32_t events);

/* ---- messages handed out and placed (handoff.c) ------------------------------------------ */

/* Sender: a message the cursor hands out. `data` stays readable until it is acknowledged. */
struct lg_out_msg {
    uint64_t seq;
    uint32_t epoch;
    const void *data;
    size_t size;
};
typedef int (*lg_send_put_fn)(void *arg, const struct lg_out_msg *m); /* 0: taken */
/* Sender: hands each message posted and not handed out yet, in order, to put, and moves the
 * cursor past each one it takes; stops at the first it refuses, or at a hold (a switch).
 * Nothing unless p is up and the committed path. Takes the connection's lock, put runs under
 * it. Returns how many were taken. */
int lg_send_unsent(struct lg_conn *c, struct lg_path *p, lg_send_put_fn put, void *arg);
/* Sender, a transport that cuts messages in chunks (tr->chunks): the message at the
 * cursor, for a data stream to cut its next chunk from. */
struct lg_out_cut {
    struct lg_req *req; /* a chunk cut holds it: lg_req_writer_done once the chunk is written */
    uint64_t seq;
    uint32_t epoch;
    const char *data;
    size_t size;
    uint32_t tag;
    int kept; /* kept in a copy (LG_CHUNK_F_KEPT) */
};
enum {
    LG_CUT_PEEK = -1, /* looked only: nothing cut */
    LG_CUT_MORE = 0,  /* cut a chunk; more of the message remain */
    LG_CUT_LAST = 1,  /* cut its last chunk: the cursor moves past it */
};
typedef int (*lg_send_cut_fn)(void *arg, const struct lg_out_cut *m);
/* Sender, under the connection's lock: if path p may carry the next chunk (it is up and the
 * committed path, a message waits at the cursor, and no hold keeps it back: a BOUNDARY hold
 * lets the message the cursor is inside finish), cut(arg, m) with that message, which says
 * what it did (LG_CUT_*); else cut(arg, NULL), still under the lock (a stream parks there, so
 * no wake-up is lost to a post). Returns 1 if there was a message. */
int lg_send_cut(struct lg_conn *c, struct lg_path *p, lg_send_cut_fn cut, void *arg);
/* A chunk of r is written: its writer's hold ends (r completes only once none is left). */
void lg_req_writer_done(struct lg_req *r);
enum lg_place {
    LG_PLACE_INTO = 0, /* into *r's buffer (*buf, *cap), then lg_recv_complete */
    LG_PLACE_STALE = 1, /* another epoch's, or placed already: drop it */
    LG_PLACE_LATER = 2, /* its receive is not posted yet: keep it */
};
/* Receiver: where whole message `seq`, sent in `epoch`, goes. */
enum lg_place lg_recv_target(struct lg_conn *c, uint64_t seq, uint32_t epoch, struct lg_req **r,
                             void **buf, size_t *cap);

/* ---- a path's failure, and the peer's lies (conn.c) ------------------------------------- */

/* A path broke: error (errno `err`, 0 for a protocol error) or EOF. Records why, decides
 * nothing but the obvious (a BYE'd close, an unprotected connection) and wakes the monitor,
 * which fails over. Any thread. */
void lg_conn_path_failed(struct lg_path *p, int err, const char *why);
void lg_conn_path_eof(struct lg_path *p, const char *why);
/* The peer sent something no honest peer sends (an ack, RESYNC or epoch outside what the
 * connection's state allows): WARN with the details and fail the connection (any thread). A
 * lying peer must never get a completion or a replay out of us. */
void lg_conn_peer_lied(struct lg_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets the connection's error once, and why it failed (census.h); 1 if this call set it. */
int lg_conn_fail(struct lg_conn *c, enum lg_fail_reason why, ncclResult_t code, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
/* A progress watchdog's clock (monitor): `busy` (work waits on the path and the peer is
 * heard) with its progress marker (base, placed) unchanged since it began. Returns when the
 * stall counts from (its start, or the last commit if later: a replay has only begun) once
 * that is LINKGUARD_STALL_MS ago, and starts the clock again; else 0. */
uint64_t lg_conn_stalled_since(struct lg_conn *c, int busy, uint64_t base, uint64_t placed,
                               uint64_t now);
/* A progress watchdog's verdict on path p: logged, reported to the daemon (verdict.h), and the
 * path fails like a dead one (the sender fails over, an unprotected connection reports it). */
void lg_path_stalled(struct lg_path *p, const char *why, uint32_t for_ms);
/* NCCL's thread: reads the active path's control channel now (acks, when it polls). */
void lg_conn_poll_ctrl(struct lg_conn *c);

/* ---- a receive placed, acks (window.c) -------------------------------------------------- */

/* Receiver: a receive is complete (`size` bytes placed, on path p; `kept`: its chunks said
 * LG_CHUNK_F_KEPT): marks it, advances the placed count, acks when due. -1 on a protocol
 * error (the path failed). */
int lg_recv_complete(struct lg_path *p, struct lg_req *r, uint64_t size, int kept);
/* Receiver: the oldest message not placed yet (*base, the window's base) and how many of its
 * bytes are (*placed); 1 if it is posted and data around it arrived (a later message is
 * complete, or part of it is placed): the data it lacks is late, not unsent. */
int lg_recv_oldest(struct lg_conn *c, uint64_t *base, uint64_t *placed);
/* Receiver: acks what is placed and not yet acknowledged, on path p. */
void lg_recv_flush_ack(struct lg_path *p);
/* Receiver, a stream about to sleep: acks if the sender waits for one (a message it did not
 * keep) or a batch of kept ones is due. */
void lg_recv_flush_due(struct lg_path *p);
/* Receiver: the sender asks (POSTED(n)) for the acks of its first n messages, as they are
 * placed (it closes, switches gracefully, or its window is full of kept sends). */
void lg_recv_ack_asked(struct lg_path *p, uint64_t n);
/* Sender, any thread: asks the receiver to ack the messages below n (POSTED), unless a
 * request reached that far already. */
void lg_send_ask_ack_upto(struct lg_conn *c, uint64_t n);

/* ---- the epoch rule for what a transport reads (resync.c) ------------------------------- */

/* Chunk headers carry the low 16 bits. */
static inline int lg_epoch_matches(uint16_t hdr_epoch, uint32_t epoch)
{
    return hdr_epoch == (uint16_t)epoch;
}
enum lg_chunk_verdict {
    LG_CHUNK_PLACE = 0,   /* into its posted receive */
    LG_CHUNK_STALE = 1,   /* sent in another epoch: read and drop */
    LG_CHUNK_DUP = 2,     /* its message is already complete (a replay): read and drop */
    LG_CHUNK_BAD = 3,     /* a protocol error: the path fails */
};
/* What the receiver does with a chunk of message `seq` sent in `hdr_epoch`, given its epoch
 * and the slot the message maps to (`slot_seq`, `slot_state`: the request's seq and LG_REQ_*
 * state, loaded state first). The message is known to be posted (seq < posted). */
enum lg_chunk_verdict lg_resync_chunk_verdict(uint16_t hdr_epoch, uint32_t epoch, uint64_t seq,
                                              uint64_t slot_seq, uint32_t slot_state);

/* ---- a gray path: lossy or slow (gray.c) ------------------------------------------------ */

/* What a transport's goodput judge found: a lossy path (TCP retransmissions,
 * transport/tcp/goodput.h) or a slow one (completion rate against its baseline,
 * transport/inner/rate.h). */
struct lg_gray_found {
    uint8_t kind;          /* LG_VERDICT_LOSSY or LG_VERDICT_SLOW (verdict.h) */
    unsigned permille;     /* lossy: share of the bytes sent that were retransmitted, 0.1 % */
    uint64_t sent;         /* lossy: bytes sent in the window */
    uint64_t rate_Bps;     /* goodput in the window: acknowledged (lossy), completed (slow) */
    uint64_t expected_Bps; /* slow: the baseline it was held to */
};
/* The active path in slot `i` was found lossy or slow (`f`; the judges' windows were
 * LINKGUARD_GRAY_WINDOW_MS): logged with its numbers, reported to the daemon (verdict.h),
 * held off (gray.h). Monitor thread. */
void lg_gray_hold(struct lg_conn *c, int i, uint64_t now, const struct lg_gray_found *f);
/* The standby path in slot `i`, held off: every segment its control channel retransmits
 * restarts the hold (a link that still drops frames keeps itself out). Monitor thread. */
void lg_gray_probe_standby(struct lg_conn *c, int i, uint64_t now);

#endif
