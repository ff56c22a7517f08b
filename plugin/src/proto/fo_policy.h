/* The switch decision (sender): a pure function of what the monitor sees of both slots
 * (fo_policy.c, tested from tables in tests/test_failover.c). */
#ifndef LG_FO_POLICY_H
#define LG_FO_POLICY_H

#include "session/wire.h"

/* ---- the switch decision (sender) ----------------------------------------------------------- */

struct lg_fo_slot_view {
    int up;        /* the slot has a path whose transport is up (not failed) */
    int silent;    /* nothing read on it for the silent timeout */
    int peer_failed; /* the peer declared this path (this generation) failed */
    int down;      /* a daemon (ours or the peer's) says a NIC of this slot is DOWN */
    int leave;     /* a daemon says DEGRADED/DRAINED/RECOVERING: carries, but move off */
    int gray;      /* lossy or slow (gray.h), or held off since it was: carries, but move off */
    int committed; /* this path object is the one the committed epoch uses */
};
struct lg_fo_view {
    int active;       /* slot of the committed path */
    int peer_ahead;   /* the peer has committed an epoch we have not (a lost RESYNC) */
    int reintegrate;  /* LINKGUARD_REINTEGRATE */
    struct lg_fo_slot_view slot[LG_NPATHS];
};
enum lg_fo_action {
    LG_FO_NONE = 0,
    LG_FO_URGENT,   /* the active path cannot carry: switch now, replay what is unacked */
    LG_FO_GRACEFUL, /* it still carries: stop at a message boundary, drain, then switch */
    LG_FO_STALL,    /* no path works: keep trying until the dead timeout */
};
enum lg_fo_why {
    LG_WHY_NONE = 0,
    LG_WHY_FAILED,      /* transport error, EOF or fenced by the peer */
    LG_WHY_SILENT,      /* no data and no heartbeat */
    LG_WHY_PEER_FAILED, /* the peer declared it failed */
    LG_WHY_DOWN,        /* a daemon says DOWN */
    LG_WHY_LEAVE,       /* a daemon says DEGRADED/DRAINED/RECOVERING */
    LG_WHY_RESYNC,      /* the peer is at a newer epoch */
    LG_WHY_NEW_PATH,    /* the active slot's path was rebuilt: enter it with a new epoch */
    LG_WHY_REINTEGRATE, /* the primary is healthy again */
    LG_WHY_GRAY,        /* the path loses data or is slow (gray.h) */
};
struct lg_fo_decision {
    enum lg_fo_action action;
    int target;
    enum lg_fo_why why;
};
struct lg_fo_decision lg_fo_decide(const struct lg_fo_view *v);
const char *lg_fo_why_str(enum lg_fo_why why);

#endif
