/* The daemon's view of NIC health, as the plugin sees it: one process-wide reader of the
 * shared-memory control channel (include/linkguard_shm.h) plus the "no daemon" rule.
 *
 * Hot path (every isend/irecv/test): lg_health_poll() is one acquire load of the table's
 * generation compared with the last one seen; only when it moved does one caller take a
 * snapshot and refresh the per-NIC cache. Slow path (at most every LG_HEALTH_RECHECK_NS, from
 * lg_health_tick): the heartbeat check, and re-opening the file when the daemon is absent,
 * stale or was restarted. Without a live daemon every NIC reads LG_NIC_UNKNOWN and the
 * plugin relies on its own detection (said once in NCCL's log).
 *
 * Thread-safe: NCCL may poll from several proxy threads; cached states are atomics and one
 * mutex (taken with trylock on the hot path) serialises refreshes. */
#ifndef LG_HEALTH_H
#define LG_HEALTH_H

#include <stdint.h>

#include "linkguard_shm.h"

#define LG_HEALTH_RECHECK_NS 100000000ull       /* 100 ms between heartbeat checks */
#define LG_HEALTH_STALE_NS 1000000000ull        /* heartbeat older than 1 s: no daemon */

/* Opens the channel ($LINKGUARD_SHM or the default path) if it is there; never fails. */
void lg_health_init(void);
void lg_health_fini(void);

/* Hot path: refreshes the cache if the daemon changed the table. Returns the current table
 * generation as cached (changes whenever any NIC's entry changed; 0 without a daemon). */
uint64_t lg_health_poll(void);
/* Hot path (isend/irecv/test): lg_health_poll, and a wake-up of the monitor for every
 * connection when the generation moved (wake.h). */
void lg_monitor_health_poll(void);

/* Slow path, rate-limited inside: heartbeat check and re-open. `now_ns` is CLOCK_MONOTONIC. */
void lg_health_tick(uint64_t now_ns);

/* 1 when a live daemon's table is cached. */
int lg_health_alive(void);

/* Index of netdev `name` in the cached table, or -1. Slow (a scan): call at connect time and
 * again when lg_health_poll's generation changed. */
int lg_health_find(const char *name);

/* State (enum lg_nic_state) and epoch of the cached entry `index`; LG_NIC_UNKNOWN without a
 * daemon or for a bad index. Lock-free. */
uint32_t lg_health_state(int index, uint64_t *epoch);

/* A copy of the cached table (for device discovery); LG_SHM_OK or why there is none. */
int lg_health_snapshot(struct lg_shm_snapshot *out);

/* Traffic may use a NIC in this state (UP carries; DEGRADED should be left; UNKNOWN: no
 * daemon opinion, trust the transport). */
static inline int lg_health_usable(uint32_t state)
{
    return state == LG_NIC_UP || state == LG_NIC_UNKNOWN;
}

#endif
