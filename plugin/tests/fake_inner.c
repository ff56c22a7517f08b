/* A fake inner ncclNet plugin for tests/test_inner.c (built as build/tests/libfake-inner.so).
 * It exports v8, v10 and v11; v11 is "lazy" like nccl-rdma-sharp-plugins: the exported table
 * holds only {name, init} until init fills in the rest. FAKE_INNER_MODE, read at each init:
 *   ok (default) | initfail | nodev | listenfail | nullfn (test is NULL after init) |
 *   offload (device 1 is UNPACK) | keepmarker (irecv leaves the marker in *request) |
 *   flush (v11 has an iflush, counted in fake_inner_stats.flushes) |
 *   loop (a real in-process transport with an iflush, fake_inner_loop.h).
 * Outside loop mode data never moves: requests complete at once. FAKE_INNER_DEVS names the
 * two devices ("fake0,fake1" by default). fake_inner_stats records what came in. */
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_inner.h"
#include "fake_inner_loop.h"
#include "nccl_net_abi.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

FAKE_EXPORT struct fake_inner_stats fake_inner_stats;
/* Fields that linkguard's monitor thread writes or reads while a test reads or writes them. */
#define ST_SET(f, v) __atomic_store_n(&fake_inner_stats.f, (v), __ATOMIC_RELAXED)
#define ST_ADD(f, v) __atomic_add_fetch(&fake_inner_stats.f, (v), __ATOMIC_RELAXED)
#define ST_GET(f) __atomic_load_n(&fake_inner_stats.f, __ATOMIC_RELAXED)

static char mode[32] = "ok";
static char dev_names[2][32] = {"fake0", "fake1"};
static int lcomm, scomm, rcomm, req;

static int is(const char *m) { return !strcmp(mode, m); }

static ncclResult_t read_mode(void)
{
    const char *m = getenv("FAKE_INNER_MODE"), *d = getenv("FAKE_INNER_DEVS");
    char names[2][32] = {{0}};
    if (strcmp(mode, m ? m : "ok")) /* written only when it changes: other threads read it */
        strncpy(mode, m ? m : "ok", sizeof(mode) - 1);
    if (d && strchr(d, ',')) {
        snprintf(names[0], sizeof(names[0]), "%.*s", (int)(strchr(d, ',') - d), d);
        snprintf(names[1], sizeof(names[1]), "%s", strchr(d, ',') + 1);
        if (memcmp(names, dev_names, sizeof(names)))
            memcpy(dev_names, names, sizeof(names));
    }
    fake_inner_stats.init_calls++;
    loop_st = &fake_inner_stats;
    return is("initfail") ? ncclSystemError : ncclSuccess;
}

/* A v11 context. */
struct fake_ctx {
    unsigned long long id;
    int tc;
};

static unsigned long long ctx_id(void *ctx) { return ctx ? ((struct fake_ctx *)ctx)->id : 0; }

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
    p->name = dev_names[dev];
    p->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    p->speed = 100000;
    p->maxComms = 1024;
    p->maxRecvs = is("loop") ? LOOP_MAXN : 4; /* the loop groups like NCCL's IB transport */
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
    if (is("listenfail"))
        return ncclSystemError;
    if (is("loop"))
        return loop_listen(dev, ST_GET(listen_id), handle, l);
    memset(handle, 0x5a, 16);
    *l = &lcomm;
    return ncclSuccess;
}

static ncclResult_t f_connect_v8(int dev, void *h, void **s, ncclNetDeviceHandle_v8_t **d)
{
    (void)d;
    if (is("loop"))
        return loop_connect(dev, ST_GET(connect_id), h, s);
    *s = &scomm;
    return ncclSuccess;
}

static ncclResult_t f_accept(void *l, void **r, ncclNetDeviceHandle_v8_t **d)
{
    (void)d;
    if (is("loop"))
        return loop_accept(l, r);
    *r = &rcomm;
    return ncclSuccess;
}

/* Counts a loop comm's registrations per device (+1 / -1). */
static void count_reg(void *c, int delta)
{
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *lc = loop_comm_of(c);
    if (lc && lc->dev >= 0 && lc->dev < 2)
        ST_ADD(regs[lc->dev], delta);
    pthread_mutex_unlock(&loop_mu);
}

static ncclResult_t f_reg(void *c, void *d, size_t s, int t, void **mh)
{
    (void)d, (void)s, (void)t;
    if (ST_GET(refuse_reg))
        return ncclSystemError;
    count_reg(c, 1);
    *mh = &req;
    return ncclSuccess;
}

static ncclResult_t f_dereg(void *c, void *mh)
{
    (void)mh;
    count_reg(c, -1);
    return ncclSuccess;
}

/* Comms of several threads post at once (the contract's 4-thread in-flight close). */
static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t f_isend(void *s, void *d, size_t size, int tag, void **r)
{
    pthread_mutex_lock(&stats_mu);
    fake_inner_stats.last_send_size = size;
    pthread_mutex_unlock(&stats_mu);
    if (is("loop"))
        return loop_post(s, LOOP_SEND, 1, &d, &size, &tag, r);
    *r = &req;
    return ncclSuccess;
}

static ncclResult_t f_irecv(void *c, int n, void **d, const size_t *sz, const int *tags,
                            void **r)
{
    pthread_mutex_lock(&stats_mu);
    fake_inner_stats.irecv_req_in = *r;
    fake_inner_stats.irecvs++;
    fake_inner_stats.recv_n = n;
    for (int i = 0; i < n && i < 8; i++) {
        fake_inner_stats.recv_sizes[i] = sz ? sz[i] : 0;
        fake_inner_stats.recv_tags[i] = tags ? tags[i] : -1;
    }
    pthread_mutex_unlock(&stats_mu);
    if (is("loop"))
        return loop_post(c, LOOP_RECV, n, d, sz, tags, r);
    if (!is("keepmarker"))
        *r = &req;
    return ncclSuccess;
}

static ncclResult_t f_test(void *r, int *done, int *sizes)
{
    ST_ADD(tests, 1);
    if (loop_test(r, done, sizes))
        return ncclSuccess;
    *done = 1;
    if (sizes)
        sizes[0] = (int)fake_inner_stats.last_send_size;
    for (int i = 1; sizes && i < fake_inner_stats.recv_n && i < 8; i++)
        sizes[i] = (int)fake_inner_stats.recv_sizes[i] - i;
    return ncclSuccess;
}

static ncclResult_t f_close(void *c)
{
    loop_close(c);
    return ncclSuccess;
}

static ncclResult_t f_iflush(void *c, int n, void **d, int *sz, void **mh, void **r)
{
    (void)n, (void)d, (void)sz, (void)mh;
    ST_ADD(flushes, 1);
    if (is("loop"))
        return loop_flush(c, r, &fake_inner_stats);
    *r = &req;
    return ncclSuccess;
}

/* ---- v8 ---- */
static ncclResult_t f_init_v8(ncclDebugLogger_t log) { (void)log; return read_mode(); }
static ncclResult_t f_isend_v8(void *s, void *d, int size, int tag, void *mh, void **r)
{
    (void)mh;
    return f_isend(s, d, (size_t)size, tag, r);
}
static ncclResult_t f_irecv_v8(void *c, int n, void **d, int *sz, int *tags, void **mh, void **r)
{
    (void)mh;
    size_t s[8] = {0};
    for (int i = 0; i < n && i < 8; i++)
        s[i] = sz && sz[i] > 0 ? (size_t)sz[i] : 0;
    return f_irecv(c, n, d, s, tags, r);
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
    (void)mh, (void)ph;
    return f_isend(s, d, size, tag, r);
}
static ncclResult_t f_irecv_ph(void *c, int n, void **d, size_t *sz, int *tags, void **mh,
                               void **ph, void **r)
{
    (void)mh, (void)ph;
    return f_irecv(c, n, d, sz, tags, r);
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
    ST_SET(listen_id, ctx_id(ctx));
    return f_listen(dev, h, l);
}
static ncclResult_t f_connect_v11(void *ctx, int dev, void *h, void **s,
                                  ncclNetDeviceHandle_v11_t **d)
{
    ST_SET(connect_id, ctx_id(ctx));
    return f_connect_v8(dev, h, s, d);
}
static ncclResult_t f_finalize(void *ctx)
{
    ST_SET(finalize_id, ctx_id(ctx));
    ST_ADD(live_ctxs, -1);
    free(ctx);
    fake_inner_stats.finalize_calls++;
    return ncclSuccess;
}

FAKE_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {.name = "fake", .init = f_init_v11};

static ncclResult_t f_init_v11(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg,
                               ncclDebugLogger_t log, ncclProfilerCallback_t p)
{
    (void)log, (void)p;
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
    if (is("flush") || is("loop"))
        ncclNetPlugin_v11.iflush = f_iflush;
    fake_inner_stats.connect_tc = cfg ? cfg->trafficClass : -100;
    fake_inner_stats.init_id = id;
    struct fake_ctx *c = malloc(sizeof(*c));
    if (!c)
        return ncclSystemError;
    *c = (struct fake_ctx){.id = id, .tc = fake_inner_stats.connect_tc};
    ST_ADD(live_ctxs, 1);
    *ctx = c;
    return ncclSuccess;
}
