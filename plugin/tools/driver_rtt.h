/* Round-trip samples and their summary, shared by lg_nccl_driver --pingpong and
 * lg_tcp_pingpong so that both report the same statistics in the same JSON shape:
 *   "rtt_us": {"n", "warmup", "min", "p50", "p99", "mean", "max"}   (microseconds)
 * Percentiles are nearest-rank: pX is the smallest sample with at least X % of the samples
 * at or below it (p99 of 100 samples is the 99th smallest). */
#ifndef LG_DRIVER_RTT_H
#define LG_DRIVER_RTT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RTT_MAX_SAMPLES (1u << 20)

struct rtt_series {
    double s[RTT_MAX_SAMPLES]; /* seconds */
    uint64_t n, warmup;
};

static void rtt_add(struct rtt_series *r, double seconds)
{
    if (r->n < RTT_MAX_SAMPLES)
        r->s[r->n++] = seconds;
}

static int rtt_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank of the pct-th percentile of n sorted samples (0-based index). */
static uint64_t rtt_rank(uint64_t n, unsigned pct)
{
    uint64_t r = (n * pct + 99) / 100; /* ceil(n * pct / 100) */
    return r ? r - 1 : 0;
}

/* The summary as a JSON object (null without samples). Sorts the samples. */
static void rtt_json(struct rtt_series *r, char *out, size_t len)
{
    uint64_t n = r->n;
    if (!n) {
        snprintf(out, len, "null");
        return;
    }
    qsort(r->s, n, sizeof(double), rtt_cmp);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += r->s[i];
    snprintf(out, len, "{\"n\": %llu, \"warmup\": %llu, \"min\": %.2f, \"p50\": %.2f, "
             "\"p99\": %.2f, \"mean\": %.2f, \"max\": %.2f}",
             (unsigned long long)n, (unsigned long long)r->warmup, r->s[0] * 1e6,
             r->s[rtt_rank(n, 50)] * 1e6, r->s[rtt_rank(n, 99)] * 1e6,
             sum / (double)n * 1e6, r->s[n - 1] * 1e6);
}

#endif
