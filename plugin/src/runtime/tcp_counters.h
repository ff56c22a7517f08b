/* A socket's own TCP counters (tcp(7) TCP_INFO), summed over a set of sockets: what the TCP
 * transport's lossy judge reads from its data sockets (transport/tcp/goodput.h) and what the
 * protocol's gray hold reads from a held-off standby's control channel (proto/gray.h). */
#ifndef LG_TCP_COUNTERS_H
#define LG_TCP_COUNTERS_H

#include <stdint.h>

/* Cumulative counters of a set of sockets (sums). */
struct lg_tcp_counters {
    uint64_t sent;    /* tcpi_bytes_sent: payload bytes sent, retransmissions included */
    uint64_t retrans; /* tcpi_bytes_retrans */
    uint64_t acked;   /* tcpi_bytes_acked */
    uint64_t segs_retrans; /* tcpi_total_retrans: segments, for sockets that carry little */
};

/* Reads and sums the counters of n sockets (negative fds are skipped). 0, or -1 when none
 * could be read. */
int lg_tcp_counters_read(const int *fds, int n, struct lg_tcp_counters *out);

#endif
