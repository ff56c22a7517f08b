/* The round-trip statistics of lg_nccl_driver --pingpong and lg_tcp_pingpong
 * (tools/driver_rtt.h): nearest-rank percentiles of shuffled samples, the JSON they print,
 * one sample, none, and the cap on how many are kept. */
#include <string.h>

#include "../tools/driver_rtt.h"
#include "lg_test.h"

static struct rtt_series series;

/* Samples 1..n µs in a scrambled order (a stride coprime with n). */
static void fill(uint64_t n)
{
    memset(&series, 0, sizeof(series));
    for (uint64_t i = 0; i < n; i++)
        rtt_add(&series, (double)((i * 7919) % n + 1) * 1e-6);
}

int main(void)
{
    char out[512];

    /* Nearest rank: the smallest sample with at least pct % at or below it. */
    CHECK_EQ(rtt_rank(100, 50), 49);
    CHECK_EQ(rtt_rank(100, 99), 98);
    CHECK_EQ(rtt_rank(1000, 99), 989);
    CHECK_EQ(rtt_rank(3, 50), 1);
    CHECK_EQ(rtt_rank(1, 99), 0);
    CHECK_EQ(rtt_rank(0, 50), 0);

    fill(100);
    series.warmup = 7;
    rtt_json(&series, out, sizeof(out));
    CHECK(!strcmp(out, "{\"n\": 100, \"warmup\": 7, \"min\": 1.00, \"p50\": 50.00, "
                       "\"p99\": 99.00, \"mean\": 50.50, \"max\": 100.00}"));

    fill(1000); /* p99 of 1000 is the 990th smallest */
    rtt_json(&series, out, sizeof(out));
    CHECK(strstr(out, "\"p50\": 500.00, \"p99\": 990.00") != NULL);

    fill(1);
    rtt_json(&series, out, sizeof(out));
    CHECK(strstr(out, "\"min\": 1.00, \"p50\": 1.00, \"p99\": 1.00, \"mean\": 1.00, "
                      "\"max\": 1.00") != NULL);

    fill(0);
    rtt_json(&series, out, sizeof(out));
    CHECK(!strcmp(out, "null"));

    /* Past the cap, samples are dropped, never written beyond the array. */
    memset(&series, 0, sizeof(series));
    for (uint64_t i = 0; i < RTT_MAX_SAMPLES + 10; i++)
        rtt_add(&series, 1e-6);
    CHECK_EQ(series.n, RTT_MAX_SAMPLES);
    LG_TEST_DONE();
}
