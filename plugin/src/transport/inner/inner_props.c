/* Wrap mode: inner properties in the v12 layout, and the intersection of a pair. */
#include "transport/inner/inner_props.h"

#include <stdio.h>
#include <string.h>

#include "runtime/props_layout.h"
#include "runtime/util.h"

static void defaults(ncclNetProperties_v12_t *out)
{
    memset(out, 0, sizeof(*out));
    out->maxMultiRequestSize = 1;
    out->railId = NCCL_NET_ID_UNDEF;
    out->planeId = NCCL_NET_ID_UNDEF;
}

void lg_inner_props_from_v8(const ncclNetProperties_v8_t *in, int dev,
                            ncclNetProperties_v12_t *out)
{
    defaults(out);
    LG_PROPS_COPY_COMMON(out, in);
    out->vProps.ndevs = 1;
    out->vProps.devs[0] = dev;
    out->maxP2pBytes = LG_INNER_V8_MAX_P2P_BYTES;
    out->maxCollBytes = LG_INNER_V8_MAX_COLL_BYTES;
}

void lg_inner_props_from_v9(const ncclNetProperties_v9_t *in, ncclNetProperties_v12_t *out)
{
    defaults(out);
    LG_PROPS_COPY_V9(out, in);
}

void lg_inner_props_from_v11(const ncclNetProperties_v11_t *in, ncclNetProperties_v12_t *out)
{
    defaults(out);
    LG_PROPS_COPY_V9(out, in);
    out->maxMultiRequestSize = in->maxMultiRequestSize;
}

void lg_inner_props_sanitize(ncclNetProperties_v12_t *p)
{
    if (!p->name)
        p->name = (char *)"";
}

static int bad_size(size_t v) { return v == 0 || v > NCCL_MAX_NET_SIZE_BYTES; }

/* Reasons one member cannot be part of a linkguard device. */
static int member_ok(const ncclNetProperties_v12_t *p, const char *role, char *err,
                     size_t errlen)
{
    const char *n = p->name ? p->name : "?";
    if (p->netDeviceType != NCCL_NET_DEVICE_HOST) {
        snprintf(err, errlen, "%s inner device '%s' uses device offload (netDeviceType %d): "
                 "the GPU would drive that NIC directly, which linkguard cannot fail over",
                 role, n, (int)p->netDeviceType);
        return -1;
    }
    if (bad_size(p->maxP2pBytes)) {
        snprintf(err, errlen, "%s inner device '%s' reports maxP2pBytes %zu (NCCL needs 1 .. "
                 "1TB)", role, n, p->maxP2pBytes);
        return -1;
    }
    if (p->maxRecvs < 1 || p->maxComms < 1) {
        snprintf(err, errlen, "%s inner device '%s' reports maxRecvs %d, maxComms %d",
                 role, n, p->maxRecvs, p->maxComms);
        return -1;
    }
    return 0;
}

static size_t min_size(size_t a, size_t b)
{
    /* maxCollBytes 0 means "no collNet" in some plugins: keep the other. */
    if (!a || !b)
        return a ? a : b;
    return LG_MIN(a, b);
}

int lg_inner_props_merge(const ncclNetProperties_v12_t *primary,
                         const ncclNetProperties_v12_t *backup, int dev, const char *name,
                         ncclNetProperties_v12_t *out, char *err, size_t errlen)
{
    if (member_ok(primary, "primary", err, errlen) != 0 ||
        (backup && member_ok(backup, "backup", err, errlen) != 0))
        return -1;
    const ncclNetProperties_v12_t *b = backup ? backup : primary;
    *out = *primary; /* placement: pciPath, guid, speed, port, latency, railId, planeId */
    out->name = (char *)name;
    out->ptrSupport = primary->ptrSupport & b->ptrSupport;
    out->regIsGlobal = primary->regIsGlobal && b->regIsGlobal;
    out->forceFlush = primary->forceFlush || b->forceFlush;
    out->maxComms = LG_MIN(primary->maxComms, b->maxComms);
    out->maxRecvs = LG_MIN(primary->maxRecvs, b->maxRecvs);
    out->maxP2pBytes = LG_MIN(primary->maxP2pBytes, b->maxP2pBytes);
    out->maxCollBytes = min_size(primary->maxCollBytes, b->maxCollBytes);
    out->maxMultiRequestSize =
        LG_MAX(1, LG_MIN(primary->maxMultiRequestSize, b->maxMultiRequestSize));
    out->netDeviceType = NCCL_NET_DEVICE_HOST;
    out->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    memset(&out->vProps, 0, sizeof(out->vProps));
    out->vProps.ndevs = 1;
    out->vProps.devs[0] = dev;
    if (!(out->ptrSupport & NCCL_PTR_HOST)) {
        snprintf(err, errlen, "inner devices '%s' and '%s' share no pointer type NCCL can use "
                 "(ptrSupport 0x%x and 0x%x)", primary->name ? primary->name : "?",
                 b->name ? b->name : "?", primary->ptrSupport, b->ptrSupport);
        return -1;
    }
    return 0;
}

int lg_inner_vdev_name(char *out, size_t len, const char *primary, const char *backup)
{
    int n = snprintf(out, len, "%s+%s", primary, backup ? backup : "none");
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int lg_inner_names_check(const char *const *names, int n, const char *const *inner_names,
                         int ninner, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++)
            if (!strcmp(names[i], names[k])) {
                snprintf(err, errlen, "devices %d and %d are both named '%s'", k, i, names[i]);
                return -1;
            }
        for (int k = 0; k < ninner; k++)
            if (inner_names[k] && !strcmp(names[i], inner_names[k])) {
                snprintf(err, errlen, "device %d's name '%s' is also an inner device's", i,
                         names[i]);
                return -1;
            }
    }
    return 0;
}
