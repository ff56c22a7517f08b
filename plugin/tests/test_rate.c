/* Goodput health from completion rates (rate.h), from tables: the warm-up's baseline, the
 * share that is slow, two windows in a row, the rate taken over the backlogged time only,
 * what a window that says nothing does (neither a strike nor a lesson), the NIC's line rate
 * bounding the baseline; and the verdict's text in
 * a switch's reason (gray.h). */
#include <stdint.h>
#include <string.h>

#include "daemon/verdict.h"
#include "lg_test.h"
#include "proto/gray.h"
#include "transport/inner/rate.h"

#define MB 1000000ull
#define WIN_NS 400000000ull /* 400 ms */

struct row {
    uint64_t mb_per_s;  /* the window's rate over its backlogged time */
    uint64_t idle_ms;   /* drained within its 400 ms */
    enum lg_rate_verdict want;
    uint64_t base_mb;   /* the baseline after it */
    uint64_t expected_mb; /* what it was held to */
};

static void run(const char *name, const struct lg_rate_cfg *cfg, const struct row *t, int n)
{
    struct lg_rate_state st = {0};
    for (int i = 0; i < n; i++) {
        uint64_t busy_ms = 400 - t[i].idle_ms;
        struct lg_rate_window w = {.bytes = t[i].mb_per_s * MB * busy_ms / 1000, .ns = WIN_NS,
                                   .idle_ns = t[i].idle_ms * 1000000ull};
        uint64_t rate, expected;
        enum lg_rate_verdict v = lg_rate_judge(&st, &w, cfg, &rate, &expected);
        if (v != t[i].want || st.base_Bps / MB != t[i].base_mb ||
            expected / MB != t[i].expected_mb)
            fprintf(stderr, "%s row %d: verdict %d base %llu expected %llu\n", name, i, v,
                    (unsigned long long)(st.base_Bps / MB), (unsigned long long)(expected / MB));
        CHECK_EQ(v, t[i].want);
        CHECK_EQ(st.base_Bps / MB, t[i].base_mb);
        CHECK_EQ(expected / MB, t[i].expected_mb);
        CHECK_EQ(rate / MB, t[i].mb_per_s);
    }
}

#define U LG_RATE_UNKNOWN
#define H LG_RATE_HEALTHY
#define S1 LG_RATE_SLOWER
#define S LG_RATE_SLOW
#define RUN(name, cfg, t) run(name, cfg, t, (int)(sizeof(t) / sizeof((t)[0])))

static void test_judge(void)
{
    const struct lg_rate_cfg cfg = {.slow_pct = 50, .min_bytes = 4 * MB};
    const struct row policer[] = {
        /* the warm-up: a running mean, nothing judged */
        {800, 0, U, 800, 0},
        {1200, 0, U, 1000, 0},
        {1000, 0, U, 1000, 0},
        {1000, 0, U, 1000, 0},
        /* judged from here: healthy windows teach the baseline by an eighth */
        {900, 0, H, 987, 1000},
        {500, 0, H, 926, 987},    /* 50.6 %: at or above the share is healthy */
        /* 600 MB/s over the 250 ms it had work (375 over the whole window): drained moments
         * between looks are the application's, not the path's */
        {600, 150, H, 885, 926},
        /* a 100 MB/s policer: two slow windows in a row make the verdict; they teach nothing */
        {100, 0, S1, 885, 885},
        {95, 0, S, 885, 885},
        {90, 0, S1, 885, 885},    /* the verdict started a new run */
        {80, 200, U, 885, 0},     /* drained half the window: says nothing, the run goes on */
        {85, 0, S, 885, 885},
        /* the undo: healthy again, and one slow window alone is a blip */
        {1000, 0, H, 900, 885},
        {300, 0, S1, 900, 900},
        {950, 0, H, 906, 900},
        {300, 0, S1, 906, 906},
    };
    RUN("policer", &cfg, policer);

    /* Too little completed (a receiver that posts little), or nothing at all (a stall, the
     * watchdog's): neither a strike nor a lesson, backlogged or not. */
    const struct row little[] = {
        {1000, 0, U, 1000, 0}, {1000, 0, U, 1000, 0}, {1000, 0, U, 1000, 0},
        {1000, 0, U, 1000, 0},
        {200, 0, S1, 1000, 1000},
        {9, 0, U, 1000, 0},       /* 3.6 MB < 4 MB */
        {0, 0, U, 1000, 0},
        {10, 0, S, 1000, 1000},   /* 4 MB: judged, the second in a row */
    };
    RUN("little", &cfg, little);

    /* A window drained for half of it or more never teaches either (a paused application's
     * rate is the application's). */
    const struct row quiet[] = {
        {50, 200, U, 0, 0}, {50, 200, U, 0, 0}, {1000, 0, U, 1000, 0}, {1000, 0, U, 1000, 0},
        {1000, 0, U, 1000, 0}, {1000, 0, U, 1000, 0}, {10, 200, U, 1000, 0},
        {499, 0, S1, 1000, 1000},
    };
    RUN("quiet", &cfg, quiet);

    /* The NIC's line rate bounds the baseline: a virtual NIC's 10 Gbit/s (1250 MB/s) under a
     * baseline of 1400 MB/s holds the path to 1250, so 650 MB/s (46 % of 1400) is healthy. */
    const struct lg_rate_cfg line = {.slow_pct = 50, .min_bytes = 4 * MB, .line_Bps = 1250 * MB};
    const struct row capped[] = {
        {1400, 0, U, 1400, 0}, {1400, 0, U, 1400, 0}, {1400, 0, U, 1400, 0},
        {1400, 0, U, 1400, 0},
        {650, 0, H, 1306, 1250},
        {600, 0, S1, 1306, 1250},
        {600, 0, S, 1306, 1250},
    };
    RUN("capped", &line, capped);

    /* LINKGUARD_GRAY_SLOW_PCT=0: never judged, nothing learnt. */
    const struct lg_rate_cfg off = {.slow_pct = 0, .min_bytes = 4 * MB};
    const struct row disabled[] = {
        {1000, 0, U, 0, 0}, {1000, 0, U, 0, 0}, {1000, 0, U, 0, 0}, {1000, 0, U, 0, 0},
        {10, 0, U, 0, 0}, {10, 0, U, 0, 0},
    };
    RUN("disabled", &off, disabled);

    /* A path slow from its first windows is its own baseline (the known limit: nothing but
     * history says what it should do) */
    const struct row born_slow[] = {
        {100, 0, U, 100, 0}, {100, 0, U, 100, 0}, {100, 0, U, 100, 0}, {100, 0, U, 100, 0},
        {90, 0, H, 98, 100},
    };
    RUN("born slow", &cfg, born_slow);

    /* Rates of fast links and long windows do not overflow; a window of no length says
     * nothing. */
    struct lg_rate_state st = {.base_Bps = 50000 * MB, .learnt = LG_RATE_WARMUP};
    uint64_t rate, expected;
    struct lg_rate_window big = {.bytes = 3000000 * MB, .ns = 60000000000ull};
    CHECK_EQ(lg_rate_judge(&st, &big, &cfg, &rate, &expected), LG_RATE_HEALTHY);
    CHECK_EQ(rate, 50000 * MB);
    CHECK_EQ(expected, 50000 * MB);
    struct lg_rate_window none = {.bytes = 100 * MB, .ns = 0};
    CHECK_EQ(lg_rate_judge(&st, &none, &cfg, &rate, &expected), LG_RATE_UNKNOWN);
    CHECK_EQ(rate, 0);
    struct lg_rate_window odd = {.bytes = 100 * MB, .ns = WIN_NS, .idle_ns = 2 * WIN_NS};
    CHECK_EQ(lg_rate_judge(&st, &odd, &cfg, &rate, &expected), LG_RATE_UNKNOWN);
    CHECK_EQ(rate, 0); /* more idle than window (clocks of different grain): no rate */
}

static void test_describe(void)
{
    char out[128];
    struct lg_gray_found slow = {.kind = LG_VERDICT_SLOW, .rate_Bps = 84 * MB,
                                 .expected_Bps = 950 * MB};
    size_t n = lg_gray_describe(&slow, out, sizeof(out));
    CHECK(!strcmp(out, "slow (84.0 MB/s, 8 % of its 950.0 MB/s baseline)"));
    CHECK_EQ(n, strlen(out));
    CHECK(!strstr(out, "retransmitted")); /* a slow verdict never claims loss */
    struct lg_gray_found lossy = {.kind = LG_VERDICT_LOSSY, .permille = 24, .sent = 41200000};
    lg_gray_describe(&lossy, out, sizeof(out));
    CHECK(!strcmp(out, "lossy (2.4 % of 41.2 MB retransmitted)"));
    /* cut to the buffer, terminated */
    n = lg_gray_describe(&slow, out, 10);
    CHECK_EQ(n, 9);
    CHECK(!strcmp(out, "slow (84."));
    struct lg_gray_found zero = {.kind = LG_VERDICT_SLOW};
    lg_gray_describe(&zero, out, sizeof(out));
    CHECK(!strcmp(out, "slow (0.0 MB/s, 0 % of its 0.0 MB/s baseline)"));
}

int main(void)
{
    test_judge();
    test_describe();
    LG_TEST_DONE();
}
