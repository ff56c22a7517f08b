/* Wrap mode: inner device properties (pure functions, tests/test_inner_props.c).
 * The version-neutral form is the newest layout, ncclNetProperties_v12_t (as in core.h). */
#ifndef LG_INNER_PROPS_H
#define LG_INNER_PROPS_H

#include <stddef.h>

#include "nccl_net_abi.h"

/* What NCCL's own shims assume for fields an older version lacks (reference §1.4). */
#define LG_INNER_V8_MAX_P2P_BYTES (1ull << 30)
#define LG_INNER_V8_MAX_COLL_BYTES (512ull << 20)

/* Older layouts into the v12 one; `dev` gives the physical vProps {1, {dev}} for v8. */
void lg_inner_props_from_v8(const ncclNetProperties_v8_t *in, int dev,
                            ncclNetProperties_v12_t *out);
void lg_inner_props_from_v9(const ncclNetProperties_v9_t *in, ncclNetProperties_v12_t *out);
void lg_inner_props_from_v11(const ncclNetProperties_v11_t *in, ncclNetProperties_v12_t *out);
/* A NULL name becomes "" so that nothing downstream dereferences NULL. */
void lg_inner_props_sanitize(ncclNetProperties_v12_t *p);

/* A linkguard device over (primary, backup) inner devices (backup NULL: unprotected):
 * only what both support (ptrSupport, regIsGlobal: AND; maxRecvs, maxComms, maxP2pBytes,
 * maxCollBytes, maxMultiRequestSize: min; forceFlush: OR); placement and speed from the
 * primary; vProps {1, {dev}}; `name` is the caller's (stays referenced). Refuses device
 * offload (netDeviceType != HOST: the GPU would talk to one NIC directly, which cannot fail
 * over) and sizes NCCL rejects. 0, or -1 with the reason in err. */
int lg_inner_props_merge(const ncclNetProperties_v12_t *primary,
                         const ncclNetProperties_v12_t *backup, int dev, const char *name,
                         ncclNetProperties_v12_t *out, char *err, size_t errlen);

/* "primary+backup", or "primary+none" without a backup. -1 if it does not fit. */
int lg_inner_vdev_name(char *out, size_t len, const char *primary, const char *backup);
/* NCCL looks devices up by name (§3.5): linkguard names must be unique and differ from
 * every inner device's. 0, or -1 naming the clash. */
int lg_inner_names_check(const char *const *names, int n, const char *const *inner_names,
                         int ninner, char *err, size_t errlen);

#endif
