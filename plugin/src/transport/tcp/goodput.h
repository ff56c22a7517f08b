/* Goodput health of a path on the TCP transport, judged by the sender from its data sockets'
 * own TCP counters (tcp(7) TCP_INFO). A link that drops a few percent of frames (a dirty optic,
 * a marginal cable) or polices the flow keeps its carrier and rarely stalls outright, so no
 * daemon and no watchdog sees it; but TCP retransmits what the link loses, and its goodput
 * collapses long before anything times out. A path whose senders retransmit more than
 * LINKGUARD_GRAY_RETRANS_PCT of the bytes they send, over two windows in a row with real
 * traffic, is lossy: it is left like a DEGRADED NIC (graceful switch) and held off for a while
 * (tcp_watch.c, lg_tcp_goodput). The window of each slot is the TCP endpoint's (tcp_conn.h). */
#ifndef LG_GOODPUT_H
#define LG_GOODPUT_H

#include <stdint.h>

#include "runtime/tcp_counters.h"

struct lg_path;

/* The sender's window on one slot's path (in the TCP endpoint, tcp_conn.h). */
struct lg_gp_window {
    const struct lg_path *path; /* the path (and generation) the window belongs to */
    uint32_t gen;
    uint64_t t0;                /* its start; 0: none open */
    struct lg_tcp_counters at;  /* its data sockets' counters at the start */
    int strikes;                /* lossy windows in a row */
};

enum lg_gp_verdict {
    LG_GP_UNKNOWN = 0, /* too little traffic in the window to say */
    LG_GP_HEALTHY = 1,
    LG_GP_LOSSY = 2,
};

/* One window: `d` is what the counters moved by. Lossy when at least min_bytes were sent and
 * retrans_pct percent or more of them were retransmissions. *permille gets the retransmitted
 * share (tenths of a percent) for the log. Pure. */
enum lg_gp_verdict lg_gp_judge(const struct lg_tcp_counters *d, uint64_t min_bytes,
                               int retrans_pct, unsigned *permille);

/* b - a, counter by counter; a counter that went backwards (a socket replaced) gives 0. */
struct lg_tcp_counters lg_gp_delta(const struct lg_tcp_counters *b,
                                   const struct lg_tcp_counters *a);

#endif
