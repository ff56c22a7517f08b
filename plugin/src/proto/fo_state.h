/* The failover state of one connection: what the monitor thread keeps per connection
 * (failover.c) and the mailbox the control handlers fill for it. Types only, so that the
 * connection object (conn.h) can hold them without depending on the protocol's code. */
#ifndef LG_FO_STATE_H
#define LG_FO_STATE_H

#include <stdint.h>

#include "proto/upcall.h" /* struct lg_gray_found */
#include "session/dial.h"
#include "session/wire.h"

struct lg_path;

/* ---- per-connection state, owned by the monitor thread (failover.c) ---------------------- */

/* A path being rebuilt (reconnect.c). */
struct lg_rejoin {
    struct lg_path *path; /* sender: connecting / waiting for READY; receiver: assembling */
    uint32_t gen;
    uint64_t t0;
    int nfds;             /* receiver: sockets filed so far */
    uint64_t sess;        /* receiver: the control session and channel its hellos name */
    uint32_t chan;
    struct lg_dial dial;  /* sender: the path's sockets being connected */
};

struct lg_fo_slot {
    struct lg_rejoin rj;
    uint64_t next_try_ns;  /* sender: no rebuild attempt before this */
    uint64_t delay_ns;     /* current rebuild backoff */
    uint64_t up_since_ns;  /* when the current path came up (flap damping) */
    uint32_t next_gen;
    int noted;             /* its failure was handled (logged, fenced) */
    int respread;          /* sender: closed to re-spread it (spread.h): rebuilt at once */
    uint32_t local_state;  /* our daemon's state of our NIC (enum lg_nic_state) */
    int nic_idx;           /* index in the daemon's table, -1 if absent */
    /* sender: a path held off after a goodput judge's verdict (gray.h; each transport keeps
     * its judge's own windows: tcp_conn.h, inner_conn.h) */
    uint64_t gray_until;      /* held off (not taken back) until then */
    uint64_t gray_hold_ns;    /* the current hold; doubles on a repeat */
    uint64_t gray_last_ns;    /* when it was last found lossy */
    const struct lg_path *probe_path; /* the standby (and generation) probe_retrans is of */
    uint32_t probe_gen;
    uint64_t probe_retrans;   /* its control channel's retransmitted segments, while held */
    struct lg_gray_found gray_found; /* the verdict's numbers, for the switch's log line */
};

struct lg_fo {
    struct lg_fo_slot slot[LG_NPATHS];
    uint64_t health_gen;   /* daemon table generation last evaluated */
    int daemon;            /* a live daemon was seen at the last evaluation */
    uint32_t respread_gen; /* sender: the device's re-spread generation last acted on */
    uint8_t hb_flags;      /* what our last heartbeat said */
    uint64_t hb_force;     /* send a heartbeat on every path at the next run */
    uint32_t hb_epoch;     /* the epoch and generations the last heartbeat said */
    uint64_t hb_gens;
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
    uint64_t wd_base, wd_placed, wd_since, wd_commit_ns; /* (a transport's watchdog keeps
                                                         * the rest of its own state) */
    int late, late_runs;
};
#define LG_SW_NONE 0
#define LG_SW_QUIESCE 1 /* graceful: waiting for in-flight messages to be placed */
#define LG_SW_WAIT 2    /* SWITCH sent, waiting for the RESYNC */

/* Frames from the peer, stored by control handlers (any thread) for the monitor. */
struct lg_mailbox {
    uint32_t switch_epoch; /* receiver: newest SWITCH */
    int switch_target;
    uint32_t switch_gen;   /* generation of the path it came on */
    uint64_t switch_rx_ns;
    uint32_t resync_epoch; /* sender: newest RESYNC */
    int resync_target;
    uint64_t resync_n;
    uint32_t resync_gen;
    uint64_t resync_rx_ns;
    uint8_t hb_flags;      /* newest heartbeat */
    uint32_t hb_epoch;
    uint64_t hb_gens;
    int hb_valid;
};

#endif
