/* A fake inner ncclNet plugin for tests/test_inner.c (built as build/tests/libfake-inner.so).
 * It exports v8, v10 and v11; v11 is "lazy" like nccl-rdma-sharp-plugins: the exported table
 * holds only {name, init} until init fills in the rest. FAKE_INNER_MODE, read at each init:
 *   ok (default) | initfail | nodev | listenfail | nullfn (test is NULL after init) |
 *   offload (device 1 is UNPACK) | keepmarker (irecv leaves the marker in *request) |
 *   flush (v11 has an iflush, counted in fake_inner_stats.flushes).
 * Data never moves: requests complete at once. fake_inner_stats records what came in. */
#include <stdlib.h>
#include <string.h>

#include "fake_inner.h"
#include "nccl_net_abi.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

FAKE_EXPORT struct fake_inner_stats fake_inner_stats;

static char mode[32] = "ok";
static int lcomm, scomm, rcomm, req;

static int is(const char *m) { return !strcmp(mode, m); }

static ncclResult_t read_mode(void)
{
    const char *m = getenv("FAKE_INNER_MODE");
    strncpy(mode, m ? m : "ok", sizeof(mode) - 1);
    fake_inner_stats.init_calls++;
    return is("initfail") ? ncclSystemError : ncclSuccess;
}

static ncclResult_t f_devices(int *n)
{
    *n = is("nodev") ? 0 : 2;
    return ncclSuccess;
}

static ncclResult_t f_props_v8(int dev, ncclNetProperties_v8_t *p)
{
    if (dev < 0 || dev > 1)
        return ncclInvalidArgument;
    memset(p, 0, sizeof(*p));
    p->name = dev ? "fake1" : "fake0";
    p->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    p->speed = 100000;
    p->maxComms = 1024;
    p->maxRecvs = 4;
    p->netDeviceType = dev == 1 && is("offload") ? NCCL_NET_DEVICE_UNPACK : NCCL_NET_DEVICE_HOST;
    return ncclSuccess;
}

static ncclResult_t f_props_v9(int dev, ncclNetProperties_v9_t *p)
{
    ncclNetProperties_v8_t q;
    ncclResult_t rc = f_props_v8(dev, &q);
    if (rc != ncclSuccess)
        return rc;
    memset(p, 0, sizeof(*p));
    p->name = q.name, p->ptrSupport = q.ptrSupport, p->speed = q.speed;
    p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs, p->netDeviceType = q.netDeviceType;
    p->forceFlush = 1;
    p->vProps.ndevs = 1, p->vProps.devs[0] = dev;
    p->maxP2pBytes = 1ull << 31;
    p->maxCollBytes = 1ull << 29;
    return ncclSuccess;
}

static ncclResult_t f_props_v11(int dev, ncclNetProperties_v11_t *p)
{
    ncclResult_t rc = f_props_v9(dev, (ncclNetProperties_v9_t *)p); /* v11 = v9 + one int */
    p->maxMultiRequestSize = 2;
    return rc;
}

static ncclResult_t f_listen(int dev, void *handle, void **l)
{
    (void)dev;
    if (is("listenfail"))
        return ncclSystemError;
    memset(handle, 0x5a, 16);
    *l = &lcomm;
    return ncclSuccess;
}

static ncclResult_t f_connect_v8(int dev, void *h, void **s, ncclNetDeviceHandle_v8_t **d)
{
    (void)dev, (void)h, (void)d;
    *s = &scomm;
    return ncclSuccess;
}

static ncclResult_t f_accept(void *l, void **r, ncclNetDeviceHandle_v8_t **d)
{
    (void)l, (void)d;
    *r = &rcomm;
    return ncclSuccess;
}

static ncclResult_t f_reg(void *c, void *d, size_t s, int t, void **mh)
{
    (void)c, (void)d, (void)s, (void)t;
    *mh = &req;
    return ncclSuccess;
}

static ncclResult_t f_dereg(void *c, void *mh) { (void)c, (void)mh; return ncclSuccess; }

static ncclResult_t f_isend(void *s, void *d, size_t size, void **r)
{
    (void)s, (void)d;
    fake_inner_stats.last_send_size = size;
    *r = &req;
    return ncclSuccess;
}

static ncclResult_t f_irecv(int n, const size_t *sz, const int *tags, void **r)
{
    fake_inner_stats.irecv_req_in = *r;
    fake_inner_stats.irecvs++;
    fake_inner_stats.recv_n = n;
    for (int i = 0; i < n && i < 8; i++) {
        fake_inner_stats.recv_sizes[i] = sz ? sz[i] : 0;
        fake_inner_stats.recv_tags[i] = tags ? tags[i] : -1;
    }
    if (!is("keepmarker"))
        *r = &req;
    return ncclSuccess;
}

static ncclResult_t f_test(void *r, int *done, int *sizes)
{
    (void)r;
    fake_inner_stats.tests++;
    *done = 1;
    if (sizes)
        sizes[0] = (int)fake_inner_stats.last_send_size;
    for (int i = 1; sizes && i < fake_inner_stats.recv_n && i < 8; i++)
        sizes[i] = (int)fake_inner_stats.recv_sizes[i] - i;
    return ncclSuccess;
}

static ncclResult_t f_close(void *c) { (void)c; return ncclSuccess; }

static ncclResult_t f_iflush(void *c, int n, void **d, int *sz, void **mh, void **r)
{
    (void)c, (void)n, (void)d, (void)sz, (void)mh;
    fake_inner_stats.flushes++;
    *r = &req;
    return ncclSuccess;
}

/* ---- v8 ---- */
static ncclResult_t f_init_v8(ncclDebugLogger_t log) { (void)log; return read_mode(); }
static ncclResult_t f_isend_v8(void *s, void *d, int size, int tag, void *mh, void **r)
{
    (void)tag, (void)mh;
    return f_isend(s, d, (size_t)size, r);
}
static ncclResult_t f_irecv_v8(void *c, int n, void **d, int *sz, int *tags, void **mh, void **r)
{
    (void)c, (void)d, (void)mh;
    size_t s[8] = {0};
    for (int i = 0; i < n && i < 8; i++)
        s[i] = sz && sz[i] > 0 ? (size_t)sz[i] : 0;
    return f_irecv(n, s, tags, r);
}

FAKE_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "fake", .init = f_init_v8, .devices = f_devices, .getProperties = f_props_v8,
    .listen = f_listen, .connect = f_connect_v8, .accept = f_accept, .regMr = f_reg,
    .deregMr = f_dereg, .isend = f_isend_v8, .irecv = f_irecv_v8, .test = f_test,
    .closeSend = f_close, .closeRecv = f_close, .closeListen = f_close,
};

/* ---- v10 ---- */
static ncclResult_t f_init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t p)
{
    (void)log, (void)p;
    return read_mode();
}
static ncclResult_t f_connect_v10(int dev, ncclNetCommConfig_v10_t *cfg, void *h, void **s,
                                  ncclNetDeviceHandle_v10_t **d)
{
    fake_inner_stats.connect_tc = cfg ? cfg->trafficClass : -100;
    return f_connect_v8(dev, h, s, d);
}
static ncclResult_t f_isend_ph(void *s, void *d, size_t size, int tag, void *mh, void *ph,
                               void **r)
{
    (void)tag, (void)mh, (void)ph;
    return f_isend(s, d, size, r);
}
static ncclResult_t f_irecv_ph(void *c, int n, void **d, size_t *sz, int *tags, void **mh,
                               void **ph, void **r)
{
    (void)c, (void)d, (void)mh, (void)ph;
    return f_irecv(n, sz, tags, r);
}

FAKE_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "fake", .init = f_init_v10, .devices = f_devices, .getProperties = f_props_v9,
    .listen = f_listen, .connect = f_connect_v10, .accept = f_accept, .regMr = f_reg,
    .deregMr = f_dereg, .isend = f_isend_ph, .irecv = f_irecv_ph, .test = f_test,
    .closeSend = f_close, .closeRecv = f_close, .closeListen = f_close,
};

/* ---- v11, lazy ---- */
static ncclResult_t f_init_v11(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg,
                               ncclDebugLogger_t log, ncclProfilerCallback_t p);
static ncclResult_t f_listen_v11(void *ctx, int dev, void *h, void **l)
{
    (void)ctx;
    return f_listen(dev, h, l);
}
static ncclResult_t f_connect_v11(void *ctx, int dev, void *h, void **s,
                                  ncclNetDeviceHandle_v11_t **d)
{
    (void)ctx;
    return f_connect_v8(dev, h, s, d);
}
static ncclResult_t f_finalize(void *ctx)
{
    free(ctx);
    fake_inner_stats.finalize_calls++;
    return ncclSuccess;
}

FAKE_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {.name = "fake", .init = f_init_v11};

static ncclResult_t f_init_v11(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg,
                               ncclDebugLogger_t log, ncclProfilerCallback_t p)
{
    (void)id, (void)log, (void)p;
    static const ncclNet_v11_t full = {
        .name = "fake", .init = f_init_v11, .devices = f_devices, .getProperties = f_props_v11,
        .listen = f_listen_v11, .connect = f_connect_v11, .accept = f_accept, .regMr = f_reg,
        .deregMr = f_dereg, .isend = f_isend_ph, .irecv = f_irecv_ph, .test = f_test,
        .closeSend = f_close, .closeRecv = f_close, .closeListen = f_close,
        .finalize = f_finalize,
    };
    ncclResult_t rc = read_mode();
    if (rc != ncclSuccess)
        return rc;
    ncclNetPlugin_v11 = full;
    if (is("nullfn"))
        ncclNetPlugin_v11.test = NULL;
    if (is("flush"))
        ncclNetPlugin_v11.iflush = f_iflush;
    fake_inner_stats.connect_tc = cfg ? cfg->trafficClass : -100;
    *ctx = malloc(8);
    return *ctx ? ncclSuccess : ncclSystemError;
}
