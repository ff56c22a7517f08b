/* Goodput health from completion rates (rate.h). */
#include "transport/inner/rate.h"

/* After the warm-up the baseline is an EWMA with gain 1/2^LG_RATE_GAIN_SHIFT = 1/8, the gain
 * TCP gives its smoothed RTT (RFC 6298): a lasting change of the link shows within a few
 * windows, one odd window moves it by an eighth. */
#define LG_RATE_GAIN_SHIFT 3

static void learn(struct lg_rate_state *st, uint64_t rate)
{
    if (st->learnt < LG_RATE_WARMUP) { /* a running mean of the first windows */
        st->base_Bps = (st->base_Bps * st->learnt + rate) / (st->learnt + 1);
        st->learnt++;
    } else if (rate >= st->base_Bps) {
        st->base_Bps += (rate - st->base_Bps) >> LG_RATE_GAIN_SHIFT;
    } else {
        st->base_Bps -= (st->base_Bps - rate) >> LG_RATE_GAIN_SHIFT;
    }
}

enum lg_rate_verdict lg_rate_judge(struct lg_rate_state *st, const struct lg_rate_window *w,
                                   const struct lg_rate_cfg *cfg, uint64_t *rate_Bps,
                                   uint64_t *expected_Bps)
{
    uint64_t busy = w->idle_ns < w->ns ? w->ns - w->idle_ns : 0;
    uint64_t rate = busy ? (uint64_t)((double)w->bytes * 1e9 / (double)busy) : 0;
    *rate_Bps = rate;
    *expected_Bps = 0;
    /* A window the application left drained for half of it or more (its pace, not the
     * path's), or one in which the path moved (nearly) nothing (a receiver that posts nothing
     * looks exactly like that; a path that moves nothing at all is the progress watchdog's),
     * says nothing: neither a strike nor a lesson. */
    if (!cfg->slow_pct || !w->ns || 2 * w->idle_ns >= w->ns || w->bytes == 0 ||
        w->bytes < cfg->min_bytes)
        return LG_RATE_UNKNOWN;
    if (st->learnt < LG_RATE_WARMUP) {
        learn(st, rate);
        return LG_RATE_UNKNOWN;
    }
    /* No link does more than its line rate: a baseline above it (bursts into buffers, a
     * virtual NIC's nominal speed) is not held against the path. */
    uint64_t expected = cfg->line_Bps && cfg->line_Bps < st->base_Bps ? cfg->line_Bps
                                                                      : st->base_Bps;
    *expected_Bps = expected;
    if (rate * 100 >= (uint64_t)cfg->slow_pct * expected) {
        st->strikes = 0;
        learn(st, rate); /* only healthy windows teach the baseline */
        return LG_RATE_HEALTHY;
    }
    if (++st->strikes < LG_RATE_STRIKES)
        return LG_RATE_SLOWER;
    st->strikes = 0;
    return LG_RATE_SLOW;
}
