/* Failover: the pure parts (epochs, resync accounting, the switch decision; resync.c and
 * fo_policy.c, tested from tables in tests/test_failover.c) and the per-connection state the
 * monitor thread keeps (failover.c). The protocol is described in conn.h. */
#ifndef LG_FAILOVER_H
#define LG_FAILOVER_H

#include <stdint.h>

#include "goodput.h"
#include "wire.h"

struct lg_conn;
struct lg_path;
struct lg_req;

/* ---- epochs ------------------------------------------------------------------------------- */

/* How far one epoch may lie above the committed one. An honest sender proposes one above the
 * newest epoch either side has used, and once more after each LINKGUARD_SWITCH_TIMEOUT_MS
 * without a RESYNC, so it stays within this step for minutes even at the shortest timeout
 * (and never proposes beyond it); below 2^16 so that the chunk headers' 16 bits cannot alias
 * an epoch within one step. An epoch from the peer beyond the step, or beyond LG_EPOCH_LIMIT
 * (no room left to move again), is a lie: without this one forged frame of 0xffffffff would
 * freeze the connection's epochs for good. */
#define LG_EPOCH_MAX_STEP (1u << 15)
#define LG_EPOCH_LIMIT (UINT32_MAX - LG_EPOCH_MAX_STEP)

/* The epoch a new SWITCH proposes: above everything either side has used, at most
 * LG_EPOCH_MAX_STEP above the committed one (`seen` and `proposed` are never below it). */
uint32_t lg_epoch_next(uint32_t committed, uint32_t seen, uint32_t proposed);
/* A SWITCH (receiver) or RESYNC (sender) carrying `got` is taken only if it is newer than
 * the committed epoch: stale and duplicate frames (a flap during a switch) are ignored. */
static inline int lg_epoch_newer(uint32_t got, uint32_t committed) { return got > committed; }
/* A newer epoch an honest peer can send: within one step of ours, below the limit. */
static inline int lg_epoch_plausible(uint32_t got, uint32_t committed)
{
    return got > committed && got - committed <= LG_EPOCH_MAX_STEP && got <= LG_EPOCH_LIMIT;
}
/* Chunk headers carry the low 16 bits. */
static inline int lg_epoch_matches(uint16_t hdr_epoch, uint32_t epoch)
{
    return hdr_epoch == (uint16_t)epoch;
}

/* ---- resync accounting ---------------------------------------------------------------------- */

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

/* Receiver, at a commit (under conn->mu, no reader placing): forgets the bytes of every
 * posted message in [base, posted) that is not complete, so that the replay fills it from
 * the start. Returns how many were reset. */
int lg_resync_rx_reset(struct lg_req *reqs, uint64_t base, uint64_t posted);

/* Sender: an ACK of `n` messages is possible only for messages wholly handed to the
 * transport (`sent`: the chunk cursor's message; in wrap mode, posted to the inner plugin). */
static inline int lg_ack_plausible(uint64_t n, uint64_t sent) { return n <= sent; }
/* Sender, before a commit (under conn->mu): a RESYNC saying the receiver holds every message
 * below `n` is possible only if n is at least what it acknowledged before (`acked`) and at most
 * what was sent. 0, or -1 (below acked: replaying would read finished buffers) or -2. */
static inline int lg_resync_check(uint64_t n, uint64_t acked, uint64_t sent)
{
    return n < acked ? -1 : n > sent ? -2 : 0;
}

/* Sender, at a commit (under conn->mu): the receiver has placed every message below `n`:
 * raise `acked` to n and rewind the chunk cursor to message n, chunk 0. Returns how many
 * messages will be sent again (partly or wholly sent before). */
uint64_t lg_resync_tx_rewind(uint64_t *cursor_seq, uint64_t *cursor_chunk, uint64_t *acked,
                             uint64_t n);

/* ---- the switch decision (sender) ----------------------------------------------------------- */

struct lg_fo_slot_view {
    int up;        /* the slot has a path whose transport is up (not failed) */
    int silent;    /* nothing read on it for the silent timeout */
    int peer_failed; /* the peer declared this path (this generation) failed */
    int down;      /* a daemon (ours or the peer's) says a NIC of this slot is DOWN */
    int leave;     /* a daemon says DEGRADED/DRAINED/RECOVERING: carries, but move off */
    int gray;      /* lossy (goodput.h), or held off since it was: carries, but move off */
    int committed; /* this path object is the one the committed epoch uses */
};
struct lg_fo_view {
    int active;       /* slot of the committed path */
    int peer_ahead;   /* the peer has committed an epoch we have not (a lost RESYNC) */
    int reintegrate;  /* LINKGUARD_REINTEGRATE */
    struct lg_fo_slot_view slot[LG_NPATHS];
};
enum lg_fo_action {
    LG_FO_NONE = 0,
    LG_FO_URGENT,   /* the active path cannot carry: switch now, replay what is unacked */
    LG_FO_GRACEFUL, /* it still carries: stop at a message boundary, drain, then switch */
    LG_FO_STALL,    /* no path works: keep trying until the dead timeout */
};
enum lg_fo_why {
    LG_WHY_NONE = 0,
    LG_WHY_FAILED,      /* transport error, EOF or fenced by the peer */
    LG_WHY_SILENT,      /* no data and no heartbeat */
    LG_WHY_PEER_FAILED, /* the peer declared it failed */
    LG_WHY_DOWN,        /* a daemon says DOWN */
    LG_WHY_LEAVE,       /* a daemon says DEGRADED/DRAINED/RECOVERING */
    LG_WHY_RESYNC,      /* the peer is at a newer epoch */
    LG_WHY_NEW_PATH,    /* the active slot's path was rebuilt: enter it with a new epoch */
    LG_WHY_REINTEGRATE, /* the primary is healthy again */
    LG_WHY_GRAY,        /* the path loses data (its TCP retransmits; goodput.h) */
};
struct lg_fo_decision {
    enum lg_fo_action action;
    int target;
    enum lg_fo_why why;
};
struct lg_fo_decision lg_fo_decide(const struct lg_fo_view *v);
const char *lg_fo_why_str(enum lg_fo_why why);

/* ---- per-connection state, owned by the monitor thread (failover.c) ---------------------- */

/* A path being rebuilt (reconnect.c). */
struct lg_rejoin {
    struct lg_path *path; /* sender: connecting / waiting for READY; receiver: assembling */
    uint32_t gen;
    uint64_t t0;
    int nfds;             /* receiver: sockets filed so far */
    int connected[LG_MAX_STREAMS + 1];
    size_t hello_sent[LG_MAX_STREAMS + 1];
};

struct lg_fo_slot {
    struct lg_rejoin rj;
    uint64_t next_try_ns;  /* sender: no rebuild attempt before this */
    uint64_t delay_ns;     /* current rebuild backoff */
    uint64_t up_since_ns;  /* when the current path came up (flap damping) */
    uint32_t next_gen;
    int noted;             /* its failure was handled (logged, fenced) */
    uint32_t local_state;  /* our daemon's state of our NIC (enum lg_nic_state) */
    int nic_idx;           /* index in the daemon's table, -1 if absent */
    /* sender: goodput health of the path in this slot (gray_watch) */
    const struct lg_path *gp_path; /* the path (and generation) the window belongs to */
    uint32_t gp_gen;
    uint64_t gp_t0;
    struct lg_gp_counters gp; /* its data sockets' counters at the window's start */
    int gp_strikes;           /* lossy windows in a row */
    uint64_t gray_until;      /* held off (not taken back) until then */
    uint64_t gray_hold_ns;    /* the current hold; doubles on a repeat */
    uint64_t gray_last_ns;    /* when it was last found lossy */
    uint64_t probe_retrans;   /* its control channel's retransmitted segments, while held */
    unsigned gray_permille;   /* the verdict's numbers, for the switch's log line */
    uint64_t gray_sent;
};

struct lg_fo {
    struct lg_fo_slot slot[LG_NPATHS];
    uint64_t health_gen;   /* daemon table generation last evaluated */
    int daemon;            /* a live daemon was seen at the last evaluation */
    uint8_t hb_flags;      /* what our last heartbeat said */
    uint64_t hb_force;     /* send a heartbeat on every path at the next run */
    uint64_t posted_told_ns; /* sender, wrap mode: when POSTED last went out */
    /* what the peer said (copied from the mailbox) */
    uint8_t peer_flags;
    uint32_t peer_epoch;
    uint32_t peer_gen[LG_NPATHS];
    /* sender: the switch in progress */
    int sw_phase;          /* LG_SW_* */
    int sw_target;
    int sw_graceful;
    uint32_t sw_epoch, sw_gen;
    uint64_t sw_t0, sw_trigger_ns, sw_sent_ns;
    char sw_reason[256];
    uint32_t proposed;     /* highest epoch we proposed */
    /* both */
    uint32_t seen;         /* highest epoch seen from the peer */
    uint64_t trigger_ns;   /* receiver: first sign of trouble before the next commit */
    uint64_t stall_since;  /* no path works since (0: one does) */
    int stall_logged;
    uint64_t next_run_ns;
    uint64_t last_run_ns;  /* a late run (the process was starved) judges no silence */
    uint64_t stalled_ns;   /* stall time counted so far (see dead_check) */
    /* receiver: the progress watchdog (rx_watchdog) */
    uint64_t wd_base, wd_placed, wd_since, wd_commit_ns;
    uint64_t wd_polled_ns; /* a monitor run that saw NCCL poll (conn->polled) */
    int late, late_runs;
};
#define LG_SW_NONE 0
#define LG_SW_QUIESCE 1 /* graceful: waiting for in-flight messages to be placed */
#define LG_SW_WAIT 2    /* SWITCH sent, waiting for the RESYNC */

/* Frames from the peer, stored by control handlers (any thread) for the monitor. */
struct lg_mailbox {
    uint32_t switch_epoch; /* receiver: newest SWITCH */
    int switch_target;
    uint64_t delivered;    /* receiver: newest DELIVERED (wrap mode): hold at least these */
    uint32_t switch_gen;   /* generation of the path it came on */
    uint64_t switch_rx_ns;
    uint32_t resync_epoch; /* sender: newest RESYNC */
    int resync_target;
    uint64_t resync_n;
    uint32_t resync_gen;
    uint64_t resync_rx_ns;
    uint64_t peer_posted;  /* receiver, wrap mode: newest POSTED (messages the sender handed
                            * to its inner plugin) */
    uint8_t hb_flags;      /* newest heartbeat */
    uint32_t hb_epoch;
    uint64_t hb_gens;
    int hb_valid;
};

/* failover.c: the monitor's work on one connection; returns the next time it wants to run. */
uint64_t lg_fo_run(struct lg_conn *c, uint64_t now);
void lg_fo_init(struct lg_conn *c);
/* Control frames for the failover protocol (control handlers, any thread). */
void lg_fo_on_frame(struct lg_path *p, const struct lg_ctrl *f);
/* Detaches, closes and marks a path retired (monitor or close; never from a handler). */
void lg_path_retire(struct lg_path *p, int say_bye);
/* Its first, cheap part: the path fails (no one uses it from now) and the peer is told. */
void lg_path_fence_start(struct lg_path *p, int say_bye);
/* Monitor, after a pass over every connection: retires the paths the pass left or found
 * failed. In a storm every connection switches first; the detaching and closing, which may
 * wait for a handler to leave, come after, batched. */
void lg_fo_retire_deferred(void);

#endif
