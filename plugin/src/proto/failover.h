/* Failover: the state machine the monitor thread runs for each connection (failover.c),
 * over the pure parts (resync.h, fo_policy.h) and the per-connection state (fo_state.h). The
 * protocol is described in conn.h. */
#ifndef LG_FAILOVER_H
#define LG_FAILOVER_H

#include <stdint.h>

#include "proto/fo_policy.h"
#include "proto/fo_state.h"
#include "proto/resync.h"
#include "session/wire.h"

struct lg_conn;
struct lg_path;
struct lg_ctrl;

/* failover.c: the monitor's work on one connection; returns the next time it wants to run. */
uint64_t lg_fo_run(struct lg_conn *c, uint64_t now);
void lg_fo_init(struct lg_conn *c);

#endif
