/* Failover: the state machine the monitor thread runs for each connection (failover.c),
 * over the pure parts (resync.h, fo_policy.h) and the per-connection state (fo_state.h). The
 * protocol is described in conn.h. */
#ifndef LG_FAILOVER_H
#define LG_FAILOVER_H

#include <stdint.h>

#include "fo_policy.h"
#include "fo_state.h"
#include "resync.h"
#include "wire.h"

struct lg_conn;
struct lg_path;
struct lg_ctrl;

/* failover.c: the monitor's work on one connection; returns the next time it wants to run. */
uint64_t lg_fo_run(struct lg_conn *c, uint64_t now);
void lg_fo_init(struct lg_conn *c);
/* Control frames for the failover protocol (control handlers, any thread). */
void lg_fo_on_frame(struct lg_path *p, const struct lg_ctrl *f);
/* Monitor, after a pass over every connection: retires the paths the pass left or found
 * failed. In a storm every connection switches first; the detaching and closing, which may
 * wait for a handler to leave, come after, batched. */
void lg_fo_retire_deferred(void);

#endif
