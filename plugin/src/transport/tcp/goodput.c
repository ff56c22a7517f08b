/* The TCP transport's lossy judge (goodput.h). */
#include "transport/tcp/goodput.h"

static uint64_t minus(uint64_t b, uint64_t a) { return b > a ? b - a : 0; }

struct lg_tcp_counters lg_gp_delta(const struct lg_tcp_counters *b,
                                   const struct lg_tcp_counters *a)
{
    return (struct lg_tcp_counters){.sent = minus(b->sent, a->sent),
                                    .retrans = minus(b->retrans, a->retrans),
                                    .acked = minus(b->acked, a->acked),
                                    .segs_retrans = minus(b->segs_retrans, a->segs_retrans)};
}

enum lg_gp_verdict lg_gp_judge(const struct lg_tcp_counters *d, uint64_t min_bytes,
                               int retrans_pct, unsigned *permille)
{
    *permille = d->sent ? (unsigned)(d->retrans > d->sent ? 1000 : d->retrans * 1000 / d->sent)
                        : 0;
    if (d->sent < min_bytes || d->sent == 0 || retrans_pct <= 0)
        return LG_GP_UNKNOWN;
    /* retrans / sent >= pct / 100, without division */
    return d->retrans * 100 >= (uint64_t)retrans_pct * d->sent ? LG_GP_LOSSY : LG_GP_HEALTHY;
}
