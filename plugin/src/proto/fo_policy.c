/* The sender's switch decision: a pure function of what each slot's path looks like
 * (tests/test_failover.c drives it from tables). */
#include "proto/fo_policy.h"

/* 3: healthy; 2: carries, but a daemon wants traffic off it or it loses data; 1: a daemon says
 * DOWN while the transport still looks alive; 0: does not carry. */
static int score(const struct lg_fo_slot_view *s)
{
    if (!s->up || s->silent || s->peer_failed)
        return 0;
    if (s->down)
        return 1;
    return s->leave || s->gray ? 2 : 3;
}

static enum lg_fo_why why_not(const struct lg_fo_slot_view *s)
{
    if (!s->up)
        return LG_WHY_FAILED;
    if (s->silent)
        return LG_WHY_SILENT;
    if (s->peer_failed)
        return LG_WHY_PEER_FAILED;
    if (s->down)
        return LG_WHY_DOWN;
    if (s->leave)
        return LG_WHY_LEAVE;
    if (s->gray)
        return LG_WHY_GRAY;
    return LG_WHY_NEW_PATH;
}

struct lg_fo_decision lg_fo_decide(const struct lg_fo_view *v)
{
    int a = v->active, o = 1 - a;
    const struct lg_fo_slot_view *A = &v->slot[a], *O = &v->slot[o];
    struct lg_fo_decision d = {LG_FO_NONE, a, LG_WHY_NONE};
    int cur = score(A);
    if (!A->committed || !cur || v->peer_ahead) {
        /* Data cannot go on as it is: enter the best working path with a new epoch (the
         * active slot's own path too, if it was rebuilt or the peer is ahead). */
        int best = -1, bs = 0;
        for (int i = 0; i < LG_NPATHS; i++) {
            int sc = score(&v->slot[i]);
            if (sc > bs || (sc == bs && sc > 0 && i == a)) {
                best = i;
                bs = sc;
            }
        }
        if (best < 0) {
            d.action = LG_FO_STALL;
            d.why = why_not(A);
            return d;
        }
        d.action = LG_FO_URGENT;
        d.target = best;
        d.why = A->committed && cur ? LG_WHY_RESYNC : why_not(A);
        return d;
    }
    switch (cur) {
    case 3:
        if (a != 0 && v->reintegrate && score(&v->slot[0]) == 3) {
            d.action = LG_FO_GRACEFUL;
            d.target = 0;
            d.why = LG_WHY_REINTEGRATE;
        }
        return d;
    case 2:
        if (score(O) == 3) {
            d.action = LG_FO_GRACEFUL;
            d.target = o;
            d.why = A->leave ? LG_WHY_LEAVE : LG_WHY_GRAY;
        }
        return d;
    default: /* 1: a daemon says the NIC is down; only the transport has not noticed yet */
        if (score(O) >= 2) {
            d.action = LG_FO_URGENT;
            d.target = o;
            d.why = LG_WHY_DOWN;
        }
        return d;
    }
}

const char *lg_fo_why_str(enum lg_fo_why why)
{
    switch (why) {
    case LG_WHY_FAILED: return "path failed";
    case LG_WHY_SILENT: return "path silent";
    case LG_WHY_PEER_FAILED: return "peer declared the path failed";
    case LG_WHY_DOWN: return "NIC DOWN";
    case LG_WHY_LEAVE: return "NIC to be left";
    case LG_WHY_RESYNC: return "peer at a newer epoch";
    case LG_WHY_NEW_PATH: return "path rebuilt";
    case LG_WHY_REINTEGRATE: return "primary healthy again";
    case LG_WHY_GRAY: return "path lossy or slow";
    default: return "none";
    }
}
