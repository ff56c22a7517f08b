/* Wrap mode: one adapter table per ncclNet ABI version (v8..v12) behind struct lg_inner_ops.
 * A member with the same position and type in every version (reference §1.4-1.8) has one
 * adapter, called through the v8 view of the table. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/inner/inner_check.h"
#include "transport/inner/inner_ops.h"
#include "transport/inner/inner_props.h"

#define T8(in) ((const ncclNet_v8_t *)(in)->table)
#define T9(in) ((const ncclNet_v9_t *)(in)->table)
#define T10(in) ((const ncclNet_v10_t *)(in)->table)
#define T11(in) ((const ncclNet_v11_t *)(in)->table)
#define T12(in) ((const ncclNet_v12_t *)(in)->table)

#define LG_RECV_MARKER ((void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION)

static ncclResult_t ret(struct lg_inner *in, const char *call, ncclResult_t rc)
{
    return rc == ncclSuccess ? rc : lg_inner_failed(in, call, rc);
}

static ncclResult_t ret_dev(struct lg_inner *in, const char *call, int dev, ncclResult_t rc)
{
    char what[48];
    if (rc == ncclSuccess)
        return rc;
    snprintf(what, sizeof(what), "%s(dev %d)", call, dev);
    return lg_inner_failed(in, what, rc);
}

static struct lg_inner_ctx *ctx_alloc(uint64_t comm_id, int traffic_class)
{
    struct lg_inner_ctx *c = calloc(1, sizeof(*c));
    if (c) {
        c->comm_id = comm_id;
        c->traffic_class = traffic_class;
    }
    return c;
}

/* Under in->mu, after an init succeeded: the members we call must be set by now. */
static ncclResult_t after_init(struct lg_inner *in)
{
    in->inited = 1;
    if (!in->checked && lg_inner_table_ok(in))
        in->checked = 1;
    return in->checked ? ncclSuccess : ncclInvalidUsage;
}

/* ---- init / finalize ------------------------------------------------------------------ */

/* v8..v10: one init per process, shared by every context (NCCL's shims do the same). */
static ncclResult_t init_shared(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                                struct lg_inner_ctx **ctx)
{
    struct lg_inner_ctx *c = ctx_alloc(comm_id, traffic_class);
    ncclResult_t rc = ncclSuccess;
    if (!c)
        return ncclSystemError;
    pthread_mutex_lock(&in->mu);
    if (!in->inited) {
        rc = in->version == 10 ? T10(in)->init(in->logger, in->prof) : T8(in)->init(in->logger);
        rc = ret(in, "init", rc);
    }
    if (rc == ncclSuccess)
        rc = after_init(in);
    if (rc == ncclSuccess)
        in->shared_refs++;
    pthread_mutex_unlock(&in->mu);
    if (rc != ncclSuccess) {
        free(c);
        c = NULL;
    }
    *ctx = c;
    return rc;
}

static ncclResult_t finalize_shared(struct lg_inner *in, struct lg_inner_ctx *ctx)
{
    if (!ctx)
        return ncclSuccess;
    pthread_mutex_lock(&in->mu);
    if (in->shared_refs > 0)
        in->shared_refs--; /* no finalize before v11: the inner stays initialised */
    pthread_mutex_unlock(&in->mu);
    free(ctx);
    return ncclSuccess;
}

/* v11/v12: the same init and finalize signatures; one inner context per ours. */
static ncclResult_t init_ctx(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                             struct lg_inner_ctx **ctx)
{
    struct lg_inner_ctx *c = ctx_alloc(comm_id, traffic_class);
    ncclNetCommConfig_v12_t cfg = {.trafficClass = traffic_class};
    *ctx = NULL;
    if (!c)
        return ncclSystemError;
    ncclResult_t rc = ret(in, "init", T12(in)->init(&c->inner, comm_id, &cfg, in->logger,
                                                     in->prof));
    if (rc == ncclSuccess) {
        pthread_mutex_lock(&in->mu);
        rc = after_init(in);
        pthread_mutex_unlock(&in->mu);
        if (rc != ncclSuccess && T12(in)->finalize)
            T12(in)->finalize(c->inner);
    }
    if (rc != ncclSuccess) {
        free(c);
        return rc;
    }
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t finalize_ctx(struct lg_inner *in, struct lg_inner_ctx *ctx)
{
    ncclResult_t rc = ncclSuccess;
    if (!ctx)
        return rc;
    if (T12(in)->finalize)
        rc = ret(in, "finalize", T12(in)->finalize(ctx->inner));
    free(ctx);
    return rc;
}

/* ---- members shared by every version --------------------------------------------------- */

static ncclResult_t devices_any(struct lg_inner *in, int *ndev)
{
    *ndev = 0;
    return ret(in, "devices", T8(in)->devices(ndev));
}

static ncclResult_t accept_any(struct lg_inner *in, void *lcomm, void **rcomm)
{
    ncclNetDeviceHandle_v8_t *dh = NULL; /* HOST devices only: pointer-to-NULL, as NCCL */
    return ret(in, "accept", T8(in)->accept(lcomm, rcomm, &dh));
}

static ncclResult_t reg_mr_any(struct lg_inner *in, void *comm, void *data, size_t size,
                               int type, void **mh)
{
    return ret(in, "regMr", T8(in)->regMr(comm, data, size, type, mh));
}

static ncclResult_t reg_dmabuf_any(struct lg_inner *in, void *comm, void *data, size_t size,
                                   int type, uint64_t offset, int fd, void **mh)
{
    if (!T8(in)->regMrDmaBuf)
        return lg_inner_failed(in, "regMrDmaBuf (not provided by the plugin)", ncclInternalError);
    return ret(in, "regMrDmaBuf", T8(in)->regMrDmaBuf(comm, data, size, type, offset, fd, mh));
}

static ncclResult_t dereg_mr_any(struct lg_inner *in, void *comm, void *mh)
{
    return ret(in, "deregMr", T8(in)->deregMr(comm, mh));
}

static ncclResult_t iflush_any(struct lg_inner *in, void *rcomm, int n, void **data, int *sizes,
                               void **mh, void **request)
{
    if (!T8(in)->iflush) {
        *request = NULL; /* NCCL reads NULL as "already complete" */
        return ncclSuccess;
    }
    return ret(in, "iflush", T8(in)->iflush(rcomm, n, data, sizes, mh, request));
}

static ncclResult_t test_any(struct lg_inner *in, void *request, int *done, int *sizes)
{
    return ret(in, "test", T8(in)->test(request, done, sizes));
}

static ncclResult_t close_send_any(struct lg_inner *in, void *c)
{
    return ret(in, "closeSend", T8(in)->closeSend(c));
}

static ncclResult_t close_recv_any(struct lg_inner *in, void *c)
{
    return ret(in, "closeRecv", T8(in)->closeRecv(c));
}

static ncclResult_t close_listen_any(struct lg_inner *in, void *c)
{
    return ret(in, "closeListen", T8(in)->closeListen(c));
}

/* The marker must come back replaced by a request or NULL (§3.3); if the inner left it, we
 * would later test() a bogus pointer. */
static ncclResult_t irecv_done(struct lg_inner *in, ncclResult_t rc, void **request)
{
    if (rc != ncclSuccess)
        return lg_inner_failed(in, "irecv", rc);
    if (*request == LG_RECV_MARKER) {
        *request = NULL;
        return lg_inner_failed(in, "irecv (left the optional-completion marker in *request)",
                               ncclInternalError);
    }
    return ncclSuccess;
}

/* ---- properties ------------------------------------------------------------------------ */

static ncclResult_t props_v8(struct lg_inner *in, int dev, ncclNetProperties_v12_t *p)
{
    ncclNetProperties_v8_t q = {0};
    ncclResult_t rc = ret_dev(in, "getProperties", dev, T8(in)->getProperties(dev, &q));
    lg_inner_props_from_v8(&q, dev, p);
    lg_inner_props_sanitize(p);
    return rc;
}

static ncclResult_t props_v9(struct lg_inner *in, int dev, ncclNetProperties_v12_t *p)
{
    ncclNetProperties_v9_t q = {0}; /* v10 has the same layout */
    ncclResult_t rc = ret_dev(in, "getProperties", dev, T9(in)->getProperties(dev, &q));
    lg_inner_props_from_v9(&q, p);
    lg_inner_props_sanitize(p);
    return rc;
}

static ncclResult_t props_v11(struct lg_inner *in, int dev, ncclNetProperties_v12_t *p)
{
    ncclNetProperties_v11_t q = {0};
    ncclResult_t rc = ret_dev(in, "getProperties", dev, T11(in)->getProperties(dev, &q));
    lg_inner_props_from_v11(&q, p);
    lg_inner_props_sanitize(p);
    return rc;
}

static ncclResult_t props_v12(struct lg_inner *in, int dev, ncclNetProperties_v12_t *p)
{
    memset(p, 0, sizeof(*p));
    ncclResult_t rc = ret_dev(in, "getProperties", dev, T12(in)->getProperties(dev, p));
    lg_inner_props_sanitize(p);
    return rc;
}

/* ---- listen / connect -------------------------------------------------------------------- */

static ncclResult_t listen_v8(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                              void *handle, void **lcomm)
{
    (void)ctx;
    return ret_dev(in, "listen", dev, T8(in)->listen(dev, handle, lcomm));
}

static ncclResult_t listen_ctx(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                               void *handle, void **lcomm)
{
    if (!ctx)
        return lg_inner_failed(in, "listen (no context)", ncclInternalError);
    return ret_dev(in, "listen", dev, T12(in)->listen(ctx->inner, dev, handle, lcomm));
}

static ncclResult_t connect_v8(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                               void *handle, void **scomm)
{
    ncclNetDeviceHandle_v8_t *dh = NULL;
    (void)ctx;
    return ret_dev(in, "connect", dev, T8(in)->connect(dev, handle, scomm, &dh));
}

static ncclResult_t connect_v10(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                                void *handle, void **scomm)
{
    ncclNetDeviceHandle_v10_t *dh = NULL;
    ncclNetCommConfig_v10_t cfg = {
        .trafficClass = ctx ? ctx->traffic_class : NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return ret_dev(in, "connect", dev, T10(in)->connect(dev, &cfg, handle, scomm, &dh));
}

static ncclResult_t connect_ctx(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                                void *handle, void **scomm)
{
    ncclNetDeviceHandle_v12_t *dh = NULL;
    if (!ctx)
        return lg_inner_failed(in, "connect (no context)", ncclInternalError);
    return ret_dev(in, "connect", dev, T12(in)->connect(ctx->inner, dev, handle, scomm, &dh));
}

/* ---- isend / irecv ----------------------------------------------------------------------- */

static ncclResult_t isend_v8(struct lg_inner *in, void *scomm, void *data, size_t size, int tag,
                             void *mh, void *phandle, void **request)
{
    (void)phandle;
    if (size > INT_MAX)
        return lg_inner_failed(in, "isend (size does not fit v8's int)", ncclInternalError);
    return ret(in, "isend", T8(in)->isend(scomm, data, (int)size, tag, mh, request));
}

static ncclResult_t isend_v9(struct lg_inner *in, void *scomm, void *data, size_t size, int tag,
                             void *mh, void *phandle, void **request)
{
    (void)phandle;
    return ret(in, "isend", T9(in)->isend(scomm, data, size, tag, mh, request));
}

static ncclResult_t isend_ph(struct lg_inner *in, void *scomm, void *data, size_t size, int tag,
                             void *mh, void *phandle, void **request)
{
    return ret(in, "isend", T12(in)->isend(scomm, data, size, tag, mh, phandle, request));
}

static ncclResult_t irecv_v8(struct lg_inner *in, void *rcomm, int n, void **data,
                             size_t *sizes, int *tags, void **mh, void **phandles,
                             void **request)
{
    int sz[NCCL_PROXY_MAX_SUBS];
    (void)phandles;
    if (n < 1 || n > NCCL_PROXY_MAX_SUBS)
        return lg_inner_failed(in, "irecv (bad receive count)", ncclInternalError);
    for (int i = 0; i < n; i++) {
        if (sizes[i] > INT_MAX)
            return lg_inner_failed(in, "irecv (size does not fit v8's int)", ncclInternalError);
        sz[i] = (int)sizes[i];
    }
    if (*request == LG_RECV_MARKER)
        *request = NULL; /* v8 predates the marker: NCCL's v8 shim strips it too */
    return irecv_done(in, T8(in)->irecv(rcomm, n, data, sz, tags, mh, request), request);
}

static ncclResult_t irecv_v9(struct lg_inner *in, void *rcomm, int n, void **data,
                             size_t *sizes, int *tags, void **mh, void **phandles,
                             void **request)
{
    (void)phandles;
    return irecv_done(in, T9(in)->irecv(rcomm, n, data, sizes, tags, mh, request), request);
}

static ncclResult_t irecv_ph(struct lg_inner *in, void *rcomm, int n, void **data,
                             size_t *sizes, int *tags, void **mh, void **phandles,
                             void **request)
{
    return irecv_done(in, T12(in)->irecv(rcomm, n, data, sizes, tags, mh, phandles, request),
                      request);
}

/* ---- the tables ---------------------------------------------------------------------------- */

#define LG_OPS_COMMON                        \
    .devices = devices_any,                  \
    .accept = accept_any,                    \
    .regMr = reg_mr_any,                     \
    .regMrDmaBuf = reg_dmabuf_any,           \
    .deregMr = dereg_mr_any,                 \
    .iflush = iflush_any,                    \
    .test = test_any,                        \
    .closeSend = close_send_any,             \
    .closeRecv = close_recv_any,             \
    .closeListen = close_listen_any

static const struct lg_inner_ops lg_inner_ops_v8 = {
    LG_OPS_COMMON, .init = init_shared, .finalize = finalize_shared, .getProperties = props_v8,
    .listen = listen_v8, .connect = connect_v8, .isend = isend_v8, .irecv = irecv_v8,
};

static const struct lg_inner_ops lg_inner_ops_v9 = {
    LG_OPS_COMMON, .init = init_shared, .finalize = finalize_shared, .getProperties = props_v9,
    .listen = listen_v8, .connect = connect_v8, .isend = isend_v9, .irecv = irecv_v9,
};

static const struct lg_inner_ops lg_inner_ops_v10 = {
    LG_OPS_COMMON, .init = init_shared, .finalize = finalize_shared, .getProperties = props_v9,
    .listen = listen_v8, .connect = connect_v10, .isend = isend_ph, .irecv = irecv_ph,
};

static const struct lg_inner_ops lg_inner_ops_v11 = {
    LG_OPS_COMMON, .init = init_ctx, .finalize = finalize_ctx, .getProperties = props_v11,
    .listen = listen_ctx, .connect = connect_ctx, .isend = isend_ph, .irecv = irecv_ph,
};

static const struct lg_inner_ops lg_inner_ops_v12 = {
    LG_OPS_COMMON, .init = init_ctx, .finalize = finalize_ctx, .getProperties = props_v12,
    .listen = listen_ctx, .connect = connect_ctx, .isend = isend_ph, .irecv = irecv_ph,
};

const struct lg_inner_ops *lg_inner_ops_for(int version)
{
    switch (version) {
    case 8: return &lg_inner_ops_v8;
    case 9: return &lg_inner_ops_v9;
    case 10: return &lg_inner_ops_v10;
    case 11: return &lg_inner_ops_v11;
    case 12: return &lg_inner_ops_v12;
    default: return NULL;
    }
}
