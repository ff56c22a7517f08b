/* The ncclNet v8..v12 tables over the version-neutral core (src/abi/core.h). Included once by
 * each export layer after defining LG_EXPORT_NAME (the plugin's name) and LG_EXPORT_FLAVOR
 * (enum lg_flavor). v12 is native; older versions are thin adapters that convert argument
 * types and property layouts. Only the five ncclNetPlugin_vN symbols are exported. */
#ifndef LG_NET_TABLES_H
#define LG_NET_TABLES_H

#include "abi/connect.h"
#include "abi/core.h"
#include "abi/listen.h"
#include "nccl_net_abi.h"
#include "runtime/props_layout.h"

#define LG_EXPORT __attribute__((visibility("default")))

/* ---- shared by every version ------------------------------------------------------------ */

static ncclResult_t lg_x_devices(int *ndev) { return lg_core_devices(ndev); }

static ncclResult_t lg_x_accept(void *lcomm, void **rcomm, ncclNetDeviceHandle_v8_t **dev)
{
    /* HOST device: NULL or pointer-to-NULL device handles, both ignored. */
    (void)dev;
    return lg_core_accept(lcomm, rcomm);
}

static ncclResult_t lg_x_reg_mr(void *comm, void *data, size_t size, int type, void **mh)
{
    return lg_core_reg_mr(comm, data, size, type, mh);
}

static ncclResult_t lg_x_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mh)
{
    return lg_core_reg_mr_dmabuf(comm, data, size, type, offset, fd, mh);
}

static ncclResult_t lg_x_dereg_mr(void *comm, void *mh) { return lg_core_dereg_mr(comm, mh); }

static ncclResult_t lg_x_iflush(void *rcomm, int n, void **data, int *sizes, void **mh,
                                void **request)
{
    return lg_core_iflush(rcomm, n, data, sizes, mh, request);
}

static ncclResult_t lg_x_test(void *request, int *done, int *sizes)
{
    return lg_core_test(request, done, sizes);
}

static ncclResult_t lg_x_close_send(void *c) { return lg_core_close_send(c); }
static ncclResult_t lg_x_close_recv(void *c) { return lg_core_close_recv(c); }
static ncclResult_t lg_x_close_listen(void *c) { return lg_core_close_listen(c); }

static ncclResult_t lg_x_isend_sz(void *scomm, void *data, size_t size, int tag, void *mh,
                                  void **request)
{
    return lg_core_isend(scomm, data, size, tag, mh, request);
}

static ncclResult_t lg_x_irecv_sz(void *rcomm, int n, void **data, size_t *sizes, int *tags,
                                  void **mh, void **request)
{
    return lg_core_irecv(rcomm, n, data, sizes, tags, mh, request);
}

/* The members every version's table shares (same position and type, reference §1.4-1.8). */
#define LG_NET_TABLE_COMMON              \
    .name = LG_EXPORT_NAME,              \
    .devices = lg_x_devices,             \
    .accept = lg_x_accept,               \
    .regMr = lg_x_reg_mr,                \
    .regMrDmaBuf = lg_x_reg_mr_dmabuf,   \
    .deregMr = lg_x_dereg_mr,            \
    .iflush = lg_x_iflush,               \
    .test = lg_x_test,                   \
    .closeSend = lg_x_close_send,        \
    .closeRecv = lg_x_close_recv,        \
    .closeListen = lg_x_close_listen,    \
    .getDeviceMr = NULL,   /* device offload only */ \
    .irecvConsumed = NULL  /* device offload only */

/* getProperties of an older layout: our v12 properties, zeroed into it and copied by `COPY`
 * (runtime/props_layout.h). */
#define LG_PROPS_ADAPTER(fn, type, COPY)                    \
    static ncclResult_t fn(int dev, type *props)            \
    {                                                       \
        ncclNetProperties_v12_t p;                          \
        ncclResult_t rc = lg_core_get_properties(dev, &p);  \
        if (rc != ncclSuccess)                              \
            return rc;                                      \
        memset(props, 0, sizeof(*props));                   \
        COPY(props, &p);                                    \
        return ncclSuccess;                                 \
    }

/* ---- v12 (native) and v11 ---------------------------------------------------------------- */

static ncclResult_t lg_x_init_ctx(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                  ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof;
    ncclResult_t rc = lg_core_init(LG_EXPORT_FLAVOR, log);
    if (rc != ncclSuccess)
        return rc;
    rc = lg_core_ctx_new(comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF,
                         ctx);
    if (rc != ncclSuccess)
        lg_core_finalize();
    return rc;
}

static ncclResult_t lg_x_finalize(void *ctx)
{
    ncclResult_t rc = lg_core_ctx_free(ctx);
    lg_core_finalize();
    return rc;
}

static ncclResult_t lg_x_listen_ctx(void *ctx, int dev, void *handle, void **lcomm)
{
    return lg_core_listen_ctx(ctx, dev, handle, lcomm);
}

static ncclResult_t lg_x_connect_ctx(void *ctx, int dev, void *handle, void **scomm,
                                     ncclNetDeviceHandle_v12_t **devc)
{
    (void)devc;
    return lg_core_connect_ctx(ctx, dev, handle, scomm);
}

static ncclResult_t lg_x_isend_ph(void *scomm, void *data, size_t size, int tag, void *mh,
                                  void *phandle, void **request)
{
    (void)phandle; /* profiler handles are opaque to us */
    return lg_core_isend(scomm, data, size, tag, mh, request);
}

static ncclResult_t lg_x_irecv_ph(void *rcomm, int n, void **data, size_t *sizes, int *tags,
                                  void **mh, void **phandles, void **request)
{
    (void)phandles;
    return lg_core_irecv(rcomm, n, data, sizes, tags, mh, request);
}

static ncclResult_t lg_x_props_v12(int dev, ncclNetProperties_v12_t *props)
{
    return lg_core_get_properties(dev, props);
}

#define LG_PROPS_COPY_V11(dst, src)                                \
    do {                                                           \
        LG_PROPS_COPY_V9(dst, src);                                \
        (dst)->maxMultiRequestSize = (src)->maxMultiRequestSize;   \
    } while (0)
LG_PROPS_ADAPTER(lg_x_props_v11, ncclNetProperties_v11_t, LG_PROPS_COPY_V11)

/* v12 and v11 differ only in the properties' layout. */
#define LG_NET_TABLE_CTX(props)                                                         \
    LG_NET_TABLE_COMMON,                                                                \
    .init = lg_x_init_ctx,                                                              \
    .getProperties = props,                                                             \
    .listen = lg_x_listen_ctx,                                                          \
    .connect = lg_x_connect_ctx,                                                        \
    .isend = lg_x_isend_ph,                                                             \
    .irecv = lg_x_irecv_ph,                                                             \
    .makeVDevice = NULL, /* our devices are already NIC pairs: no NCCL fusion */        \
    .finalize = lg_x_finalize,                                                          \
    .setNetAttr = NULL

LG_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {LG_NET_TABLE_CTX(lg_x_props_v12)};
LG_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {LG_NET_TABLE_CTX(lg_x_props_v11)};

/* ---- v10, v9, v8: init once per process, no contexts ----------------------------------- */

static ncclResult_t lg_x_init_v8(ncclDebugLogger_t log)
{
    /* These versions have no finalize: the reference is held for the process lifetime. */
    return lg_core_init(LG_EXPORT_FLAVOR, log);
}

static ncclResult_t lg_x_init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof;
    return lg_core_init(LG_EXPORT_FLAVOR, log);
}

static ncclResult_t lg_x_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                     void **scomm, ncclNetDeviceHandle_v10_t **devc)
{
    (void)config, (void)devc;
    return lg_core_connect(dev, handle, scomm);
}

static ncclResult_t lg_x_connect_v8(int dev, void *handle, void **scomm,
                                    ncclNetDeviceHandle_v8_t **devc)
{
    (void)devc;
    return lg_core_connect(dev, handle, scomm);
}

LG_PROPS_ADAPTER(lg_x_props_v9, ncclNetProperties_v9_t, LG_PROPS_COPY_V9) /* v10's too */
LG_PROPS_ADAPTER(lg_x_props_v8, ncclNetProperties_v8_t, LG_PROPS_COPY_COMMON)

static ncclResult_t lg_x_isend_v8(void *scomm, void *data, int size, int tag, void *mh,
                                  void **request)
{
    if (size < 0)
        return ncclInternalError;
    return lg_core_isend(scomm, data, (size_t)size, tag, mh, request);
}

static ncclResult_t lg_x_irecv_v8(void *rcomm, int n, void **data, int *sizes, int *tags,
                                  void **mh, void **request)
{
    size_t sz[NCCL_PROXY_MAX_SUBS];
    if (n < 1 || n > NCCL_PROXY_MAX_SUBS)
        return ncclInternalError;
    for (int i = 0; i < n; i++)
        sz[i] = sizes[i] < 0 ? 0 : (size_t)sizes[i];
    return lg_core_irecv(rcomm, n, data, sz, tags, mh, request);
}

LG_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    LG_NET_TABLE_COMMON,
    .init = lg_x_init_v10,
    .getProperties = lg_x_props_v9,
    .listen = lg_core_listen,
    .connect = lg_x_connect_v10,
    .isend = lg_x_isend_ph,
    .irecv = lg_x_irecv_ph,
    .makeVDevice = NULL,
};

LG_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    LG_NET_TABLE_COMMON,
    .init = lg_x_init_v8,
    .getProperties = lg_x_props_v9,
    .listen = lg_core_listen,
    .connect = lg_x_connect_v8,
    .isend = lg_x_isend_sz,
    .irecv = lg_x_irecv_sz,
    .makeVDevice = NULL,
};

LG_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    LG_NET_TABLE_COMMON,
    .init = lg_x_init_v8,
    .getProperties = lg_x_props_v8,
    .listen = lg_core_listen,
    .connect = lg_x_connect_v8,
    .isend = lg_x_isend_v8,
    .irecv = lg_x_irecv_v8,
};

#endif
