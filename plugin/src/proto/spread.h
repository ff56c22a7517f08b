/* Spreading a device's backup paths over its backup set (issue 28; docs/failover.md "Backup
 * sets"). Each connection still has one standing backup path; the connector puts it on the
 * member of the device's set (daemon/devices.h) that carries the fewest backup paths of this
 * device now, then of this process, among those the daemon calls usable (every member without
 * a daemon), the nearest first on a tie. So when the primary dies, its connections land on
 * every healthy NIC of the set, not on one. A pair (a set of one) is never spread: its
 * connections behave as before. The count of a NIC follows the connection from its connect to
 * its close.
 *
 * Why the device's count first: every device of a host has a set, and the sets overlap (with
 * `all`, rail1 is in the set of rail0, rail2 and rail3). With one process-wide count, device
 * 0's choice is skewed by the backups devices 1..3 put there: a device with fewer connections
 * than the others can get all its backups on the one member the others left emptiest, and its
 * primary's death then moves it onto one NIC. Counting per device first makes each device's
 * own backups even over its set (what the bandwidth after a cut depends on); the process-wide
 * count breaks the ties, so the members' total load stays as even as that allows.
 *
 * Re-spreading (after a return). Failures leave standbys where the failures put them: the
 * backups of a second failure's member are rebuilt on those left, and when everything returns
 * they stay piled there. When a NIC of a device (its primary or a member of its set) returns
 * to usable, the device's re-spread generation moves (lg_spread_watch); each spread connection
 * of the device then looks once, at a run where its standby is idle (the data on the primary,
 * the standby up, no switch, no rebuild: lg_spread_may_move), whether its standby's member
 * carries at least 2 more of the device's backups than the least-loaded usable member; if so
 * the standby is closed and rebuilt there (lossless: it carries nothing; the primary carries
 * on). At most LINKGUARD_RESPREAD_MOVES standbys of the process move per heartbeat period, so
 * a return never starts a storm of rebuilds; a connection refused by that budget looks again
 * at its next run. A connection whose standby is not idle (it carries the data, a rebuild is
 * in flight) keeps its look for later. */
#ifndef LG_SPREAD_H
#define LG_SPREAD_H

#include <stdint.h>

#include "daemon/devices.h"

struct lg_conn;
struct lg_handle;

/* The member of d's (device `dev`'s) set that takes the next backup path (index into d->set),
 * -1 when none is usable. Takes one count on it; lg_spread_put gives it back. */
int lg_spread_take(int dev, const struct lg_device *d);
void lg_spread_put(int dev, const char *nic);
/* Connector, monitor: the backup of a spread connection whose NIC is unusable moves to the
 * least-loaded usable member of its set, and to the listener's NIC on that rail (the next
 * rebuild of the slot goes there); 1 if it moved, 0 if no other member is usable. */
int lg_spread_move(struct lg_conn *c);
/* Receiver: member of c's device's set whose address is `local_ip` (a rebuilt backup may come
 * to any), or NULL. */
const struct lg_nic *lg_spread_member(const struct lg_conn *c, uint32_t local_ip);
/* Backup paths of this process on NIC `nic` now; of device `dev` alone (the counts the choice
 * compares, the device's first). */
int lg_spread_load(const char *nic);
int lg_spread_dev_load(int dev, const char *nic);
/* Pure: of n members, the usable one with the smallest dload, then the smallest pload (may be
 * NULL: no tie-break), the first on a tie; -1 if none. */
int lg_spread_choose(const int *dload, const int *pload, const int *usable, int n);

/* ---- re-spreading after a return ---------------------------------------------------------- */

/* Pure: where the standby on member `cur` of n should move to re-spread the device's backups
 * (counts as for lg_spread_choose, cur's own included), or -1 when it stays: a set of one, cur
 * not a member, no other usable member, or cur's device count not at least 2 above the
 * target's (a move then only swaps which member has one more). */
int lg_spread_respread_target(const int *dload, const int *pload, const int *usable, int n,
                              int cur);
/* What a sender's run knows of its standby (failover.c fills it). */
struct lg_spread_standby {
    int spread;        /* a spread connection (holds a count on its backup's member) */
    int active;        /* the slot carrying the data (0: the primary) */
    int committed;     /* the active path is the one committed (no switch half done) */
    int primary_works; /* the primary is up, heard, not declared failed */
    int standby_up;    /* the backup path is up */
    int switching;     /* a switch is proposed or waits for its RESYNC */
    int rebuilding;    /* a rebuild of either slot is in flight */
    int held;          /* sends are held (a switch's quiesce) */
};
/* Pure: the standby may move now: it carries nothing and nothing is changing the paths. */
int lg_spread_may_move(const struct lg_spread_standby *s);
/* Monitor thread, every pass: notes the NICs of each device that returned to usable since the
 * last pass (only when the daemon's table changed) and moves their devices' generation. */
void lg_spread_watch(uint64_t now);
/* The re-spread generation of device `dev` (0 before any return). */
uint32_t lg_spread_gen(int dev);
#define LG_SPREAD_LATER (-2)
/* Monitor, sender: re-spreads c's idle standby. The index of the member it moves to (c's
 * backup slot now names it: nic, addresses, the listener's NIC on that rail; the counts
 * follow), -1 when it stays, LG_SPREAD_LATER when this period's budget is spent. */
int lg_spread_respread(struct lg_conn *c, uint64_t now);
/* Tests: forget every count, generation and budget. */
void lg_spread_reset(void);

/* The listener's address on the rail of our member `local` (its `j`-th): the one of the
 * handle's backup set in local's subnet, else the j-th (when both ends list their sets in the
 * same order). 0 with ip and port set, -1 when the handle names none. */
int lg_spread_peer(const struct lg_nic *local, int j, const struct lg_handle *h, uint32_t *ip,
                   uint16_t *port);

#endif
