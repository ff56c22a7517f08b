/* Goodput health from TCP_INFO (goodput.h). */
#include "proto/goodput.h"

#include <linux/tcp.h> /* the kernel's struct tcp_info: glibc's stops at tcpi_total_retrans */
#include <netinet/in.h>
#include <sys/socket.h>

int lg_gp_read(const int *fds, int n, struct lg_gp_counters *out)
{
    struct lg_gp_counters sum = {0};
    int got = 0;
    for (int i = 0; i < n; i++) {
        struct tcp_info ti = {0};
        socklen_t len = sizeof(ti);
        if (fds[i] < 0 || getsockopt(fds[i], IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
            continue;
        /* Older kernels return a shorter struct: the fields they lack stay 0. */
        sum.sent += ti.tcpi_bytes_sent;
        sum.retrans += ti.tcpi_bytes_retrans;
        sum.acked += ti.tcpi_bytes_acked;
        sum.segs_retrans += ti.tcpi_total_retrans;
        got++;
    }
    *out = sum;
    return got ? 0 : -1;
}

static uint64_t minus(uint64_t b, uint64_t a) { return b > a ? b - a : 0; }

struct lg_gp_counters lg_gp_delta(const struct lg_gp_counters *b, const struct lg_gp_counters *a)
{
    return (struct lg_gp_counters){.sent = minus(b->sent, a->sent),
                                   .retrans = minus(b->retrans, a->retrans),
                                   .acked = minus(b->acked, a->acked),
                                   .segs_retrans = minus(b->segs_retrans, a->segs_retrans)};
}

enum lg_gp_verdict lg_gp_judge(const struct lg_gp_counters *d, uint64_t min_bytes,
                               int retrans_pct, unsigned *permille)
{
    *permille = d->sent ? (unsigned)(d->retrans > d->sent ? 1000 : d->retrans * 1000 / d->sent)
                        : 0;
    if (d->sent < min_bytes || d->sent == 0 || retrans_pct <= 0)
        return LG_GP_UNKNOWN;
    /* retrans / sent >= pct / 100, without division */
    return d->retrans * 100 >= (uint64_t)retrans_pct * d->sent ? LG_GP_LOSSY : LG_GP_HEALTHY;
}
