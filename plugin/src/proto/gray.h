/* Gray paths: what both transports do with their goodput judge's verdict (a lossy path:
 * transport/tcp/goodput.h; a slow one: transport/inner/rate.h). The path is held off
 * (struct lg_fo_slot.gray_until), which the
 * sender's switch decision reads like a DEGRADED NIC (fo_policy.c, LG_WHY_GRAY): a graceful
 * switch, and only to a healthy path. The hold is hysteresis: LINKGUARD_GRAY_HOLD_MS, doubling
 * (up to LG_GRAY_HOLD_MAX times) on a repeat within LG_GRAY_REPEAT_NS, and restarted while the
 * held-off path, as standby, still retransmits heartbeats; a path clean again is taken back
 * (reintegration) once the hold ends. Monitor thread only. */
#ifndef LG_GRAY_H
#define LG_GRAY_H

#include <stddef.h>
#include <stdint.h>

#include "proto/fo_state.h"
#include "proto/upcall.h" /* the judges' verdicts, which the transports report */

struct lg_conn;

#define LG_GRAY_REPEAT_NS (600ull * 1000000000ull) /* 10 minutes */
#define LG_GRAY_HOLD_MAX 32


/* "lossy (2.4 % of 41.2 MB retransmitted)" or "slow (84.0 MB/s, 9 % of its 950.0 MB/s
 * baseline)": the verdict in the switch's reason (failover.c). Returns the length. */
size_t lg_gray_describe(const struct lg_gray_found *f, char *out, size_t len);

#endif
