/* Goodput health of a path on the TCP transport, judged by the sender from its data sockets'
 * own TCP counters (tcp(7) TCP_INFO). A link that drops a few percent of frames (a dirty optic,
 * a marginal cable) or polices the flow keeps its carrier and rarely stalls outright, so no
 * daemon and no watchdog sees it; but TCP retransmits what the link loses, and its goodput
 * collapses long before anything times out. A path whose senders retransmit more than
 * LINKGUARD_GRAY_RETRANS_PCT of the bytes they send, over two windows in a row with real
 * traffic, is lossy: it is left like a DEGRADED NIC (graceful switch) and held off for a while
 * (tcp_watch.c, lg_tcp_goodput). */
#ifndef LG_GOODPUT_H
#define LG_GOODPUT_H

#include <stdint.h>

/* Cumulative counters of a set of sockets (sums). */
struct lg_gp_counters {
    uint64_t sent;    /* tcpi_bytes_sent: payload bytes sent, retransmissions included */
    uint64_t retrans; /* tcpi_bytes_retrans */
    uint64_t acked;   /* tcpi_bytes_acked */
    uint64_t segs_retrans; /* tcpi_total_retrans: segments, for sockets that carry little */
};

/* Reads and sums the counters of n sockets (negative fds are skipped). 0, or -1 when none
 * could be read. */
int lg_gp_read(const int *fds, int n, struct lg_gp_counters *out);

enum lg_gp_verdict {
    LG_GP_UNKNOWN = 0, /* too little traffic in the window to say */
    LG_GP_HEALTHY = 1,
    LG_GP_LOSSY = 2,
};

/* One window: `d` is what the counters moved by. Lossy when at least min_bytes were sent and
 * retrans_pct percent or more of them were retransmissions. *permille gets the retransmitted
 * share (tenths of a percent) for the log. Pure. */
enum lg_gp_verdict lg_gp_judge(const struct lg_gp_counters *d, uint64_t min_bytes,
                               int retrans_pct, unsigned *permille);

/* b - a, counter by counter; a counter that went backwards (a socket replaced) gives 0. */
struct lg_gp_counters lg_gp_delta(const struct lg_gp_counters *b, const struct lg_gp_counters *a);

#endif
