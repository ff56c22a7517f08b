/* Goodput health from completion rates: the judge of a path whose data flows are not ours to
 * read (wrap mode: the inner plugin's sockets or queue pairs). A policed or lossy link keeps
 * its carrier and rarely stalls, but it completes far less than it did: once a window
 * (LINKGUARD_GRAY_WINDOW_MS) the sender counts the bytes completed on the active path while
 * it was backlogged (messages waiting or in flight, so a quiet application never looks
 * slow) and compares that rate with the path's own healthy baseline, learnt
 * only from healthy windows and never above the NIC's line rate. Below
 * LINKGUARD_GRAY_SLOW_PCT of it in two judged windows in a row, the path is slow: it is held
 * off like a lossy one (gray.h). Pure: inner_transport.c feeds it, tests drive it from tables. */
#ifndef LG_RATE_H
#define LG_RATE_H

#include <stdint.h>

/* A path's baseline and its run of slow windows (kept per slot, across rebuilds: the same
 * NICs). Zero-initialized: nothing learnt. */
struct lg_rate_state {
    uint64_t base_Bps; /* healthy completion rate, bytes/s (0: none yet) */
    unsigned learnt;   /* healthy windows learnt (counts up to LG_RATE_WARMUP) */
    unsigned strikes;  /* slow windows in a row */
};

/* One window as the sender saw it: a stretch in which every look found messages waiting or
 * in flight (the caller starts a window again at any look that does not). Between looks the
 * connection may still drain for a moment (the application posts the next message a little
 * late): that time is `idle_ns`, and the rate is taken over the rest. */
struct lg_rate_window {
    uint64_t bytes;   /* completed on the path within it */
    uint64_t ns;      /* its length */
    uint64_t idle_ns; /* time within it with nothing unacknowledged */
};

struct lg_rate_cfg {
    unsigned slow_pct;  /* LINKGUARD_GRAY_SLOW_PCT; 0: never slow */
    uint64_t min_bytes; /* LINKGUARD_GRAY_MIN_BYTES: a window with less says nothing */
    uint64_t line_Bps;  /* the NIC's line rate, bytes/s; 0: unknown */
};

/* Healthy windows averaged before the baseline judges (a running mean until then): one
 * window is one sample of a noisy machine; four are a baseline worth holding a path to. */
#define LG_RATE_WARMUP 4
/* Slow windows in a row that make a verdict: one is a blip (a GC pause, a burst of other
 * traffic), two 400 ms windows are a link. The lossy judge (goodput.h) asks the same. */
#define LG_RATE_STRIKES 2

enum lg_rate_verdict {
    LG_RATE_UNKNOWN = 0, /* not judged: mostly drained, too little completed, no baseline yet */
    LG_RATE_HEALTHY = 1, /* at or above the share of its baseline (and learnt into it) */
    LG_RATE_SLOWER = 2,  /* below it, not yet LG_RATE_STRIKES windows in a row */
    LG_RATE_SLOW = 3,    /* the verdict: below it LG_RATE_STRIKES windows in a row */
};

/* Judges window `w` against `st` and updates `st` (the baseline learns healthy windows,
 * strikes count slow ones; a verdict starts a new run). *rate_Bps gets the window's rate
 * over its backlogged time, *expected_Bps the baseline it was held to (0 when not judged
 * against one). */
enum lg_rate_verdict lg_rate_judge(struct lg_rate_state *st, const struct lg_rate_window *w,
                                   const struct lg_rate_cfg *cfg, uint64_t *rate_Bps,
                                   uint64_t *expected_Bps);

#endif
