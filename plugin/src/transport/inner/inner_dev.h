/* Wrap mode's process-wide half (inner_dev.c): the inner plugin (inner.h), opened and
 * started once per process, and the inner devices every linkguard device is made of. The
 * inner transport (inner_endpoint.h) carries the data over it. */
#ifndef LG_INNER_DEV_H
#define LG_INNER_DEV_H

#include <stdint.h>

#include "daemon/devices.h"
#include "transport/inner/inner.h"

/* Process-wide: the inner plugin and what each linkguard device is made of. */
struct lg_inner_devs {
    struct lg_inner *in;
    struct lg_inner_ctx *ctx;
    int inner_dev[LG_MAX_DEVS][2]; /* inner device of the primary / backup NIC (-1: none) */
    int set_dev[LG_MAX_DEVS][LG_MAX_BACKUP_SET]; /* ... of each member of the backup set */
    char name[LG_MAX_DEVS][2 * 64 + 2];
    ncclNetProperties_v12_t props[LG_MAX_DEVS];
    int placed; /* an inner send completion means placed (inner_completion.h) */
};
/* NULL in native mode; set once by lg_inner_devs_start and never freed (the inner's threads may
 * outlive us). */
extern struct lg_inner_devs *lg_inner_devs;

/* Init of the linkguard flavor with LINKGUARD_INNER set, in two steps around device
 * discovery. lg_inner_devs_open: opens and starts the inner plugin, and rewrites inner device names
 * in LINKGUARD_PAIRS as the netdevs of their NICs. lg_inner_devs_start: maps every device's NICs
 * to inner devices and merges their properties; wrap mode is on from then. Both WARN and
 * fail on any problem; without LINKGUARD_INNER both do nothing. */
ncclResult_t lg_inner_devs_open(ncclDebugLogger_t logger);
ncclResult_t lg_inner_devs_start(struct lg_device_table *t);
ncclResult_t lg_inner_devs_properties(int dev, ncclNetProperties_v12_t *props);
/* The inner device that carries a path of linkguard device `dev` on NIC `nic` (its primary,
 * or any member of its backup set: a spread backup, proto/spread.h), -1 when none does. */
int lg_inner_devs_find(int dev, const char *nic);

/* Contexts (ctx.h): the inner plugin's init for one NCCL communicator, with its
 * commId and trafficClass, and the finalize once the last comm made with it is closed. */
ncclResult_t lg_inner_devs_ctx_open(uint64_t comm_id, int traffic_class, struct lg_inner_ctx **out);
void lg_inner_devs_ctx_close(struct lg_inner_ctx *ctx);

#endif
