/* Spreading a device's backup paths over its backup set (issue 28; docs/failover.md "Backup
 * sets"). Each connection still has one standing backup path; the connector puts it on the
 * member of the device's set (daemon/devices.h) that carries the fewest backup paths of this
 * process now, among those the daemon calls usable (every member without a daemon), the
 * nearest first on a tie. So when the primary dies, its connections land on every healthy
 * NIC of the set, not on one. A pair (a set of one) is never spread: its connections behave
 * as before. The count of a NIC follows the connection from its connect to its close. */
#ifndef LG_SPREAD_H
#define LG_SPREAD_H

#include <stdint.h>

#include "daemon/devices.h"

struct lg_conn;
struct lg_handle;

/* The member of d's set that takes the next backup path (index into d->set), -1 when none
 * is usable. Takes one count on it; lg_spread_put gives it back. */
int lg_spread_take(const struct lg_device *d);
void lg_spread_put(const char *nic);
/* Connector, monitor: the backup of a spread connection whose NIC is unusable moves to the
 * least-loaded usable member of its set, and to the listener's NIC on that rail (the next
 * rebuild of the slot goes there); 1 if it moved, 0 if no other member is usable. */
int lg_spread_move(struct lg_conn *c);
/* Receiver: member of c's device's set whose address is `local_ip` (a rebuilt backup may come
 * to any), or NULL. */
const struct lg_nic *lg_spread_member(const struct lg_conn *c, uint32_t local_ip);
/* Backup paths of this process on NIC `nic` now (the count the choice compares). */
int lg_spread_load(const char *nic);
/* Pure: of n members, the usable one with the smallest load, the first on a tie; -1 if none. */
int lg_spread_choose(const int *load, const int *usable, int n);
/* The listener's address on the rail of our member `local` (its `j`-th): the one of the
 * handle's backup set in local's subnet, else the j-th (when both ends list their sets in the
 * same order). 0 with ip and port set, -1 when the handle names none. */
int lg_spread_peer(const struct lg_nic *local, int j, const struct lg_handle *h, uint32_t *ip,
                   uint16_t *port);

#endif
