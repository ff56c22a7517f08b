/* lg_nccl_driver: loading an ncclNet plugin like NCCL does (dlopen, newest ncclNetPlugin_vN
 * first) and calling any of v8..v12 through one set of wrappers. */
#ifndef LG_DRIVER_NET_H
#define LG_DRIVER_NET_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_net_abi.h"

struct drv_net {
    int version;
    void *table;
    void *ctx; /* v11+ per-communicator context */
    const char *name;
};

static int drv_log_level = NCCL_LOG_WARN;
static int drv_log_times; /* --timestamps: CLOCK_MONOTONIC seconds on every plugin log line */

static void drv_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...)
{
    (void)flags;
    if ((int)level > drv_log_level)
        return;
    /* One write per line: progress threads log concurrently with the polling thread. */
    char buf[1400];
    int n;
    const char *lvl = level == NCCL_LOG_WARN ? "WARN" : "INFO";
    if (drv_log_times) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        n = snprintf(buf, sizeof(buf), "[plugin %s %s:%d t=%lld.%09ld] ", lvl, file, line,
                     (long long)ts.tv_sec, ts.tv_nsec);
    } else {
        n = snprintf(buf, sizeof(buf), "[plugin %s %s:%d] ", lvl, file, line);
    }
    if (n < 0 || n >= (int)sizeof(buf) - 2)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m < (int)(sizeof(buf) - (size_t)n - 1) ? m : (int)(sizeof(buf) - (size_t)n - 2);
    buf[n++] = '\n';
    buf[n] = 0;
    fputs(buf, stderr);
}

/* Opens the plugin and picks ncclNetPlugin_v<want> (0: the newest of 12..8 present). */
static int drv_net_open(struct drv_net *n, const char *path, int want, char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
        return -1;
    }
    for (int v = 12; v >= 8; v--) {
        if (want && v != want)
            continue;
        char sym[32];
        snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
        void *t = dlsym(h, sym);
        if (t) {
            n->version = v;
            n->table = t;
            n->name = *(const char *const *)t; /* every table starts with its name */
            return 0;
        }
    }
    snprintf(err, errlen, "%s exports no ncclNetPlugin_v%s", path, want ? "<forced>" : "8..12");
    return -1;
}

#define T8 ((ncclNet_v8_t *)n->table)
#define T9 ((ncclNet_v9_t *)n->table)
#define T10 ((ncclNet_v10_t *)n->table)
#define T11 ((ncclNet_v11_t *)n->table)
#define T12 ((ncclNet_v12_t *)n->table)

static ncclResult_t drv_init(struct drv_net *n, uint64_t comm_id)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    switch (n->version) {
    case 8: return T8->init(drv_logger);
    case 9: return T9->init(drv_logger);
    case 10: return T10->init(drv_logger, NULL);
    case 11: return T11->init(&n->ctx, comm_id, &cfg, drv_logger, NULL);
    default: return T12->init(&n->ctx, comm_id, &cfg, drv_logger, NULL);
    }
}

static ncclResult_t drv_finalize(struct drv_net *n)
{
    if (n->version == 11)
        return T11->finalize(n->ctx);
    if (n->version == 12)
        return T12->finalize(n->ctx);
    return ncclSuccess;
}

static ncclResult_t drv_devices(struct drv_net *n, int *ndev) { return T8->devices(ndev); }

/* Properties in the v12 layout whatever the version. */
static ncclResult_t drv_props(struct drv_net *n, int dev, ncclNetProperties_v12_t *p)
{
    memset(p, 0, sizeof(*p));
    ncclResult_t rc;
    if (n->version == 12)
        return T12->getProperties(dev, p);
    if (n->version == 8) {
        ncclNetProperties_v8_t q;
        rc = T8->getProperties(dev, &q);
        p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
        p->speed = q.speed, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
        p->netDeviceType = q.netDeviceType;
        p->maxP2pBytes = 1ull << 30; /* what NCCL's v8 shim assumes */
        return rc;
    }
    ncclNetProperties_v11_t q;
    memset(&q, 0, sizeof(q));
    rc = n->version == 11 ? T11->getProperties(dev, &q)
                          : T9->getProperties(dev, (ncclNetProperties_v9_t *)&q);
    p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
    p->speed = q.speed, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
    p->netDeviceType = q.netDeviceType, p->maxP2pBytes = q.maxP2pBytes;
    p->vProps.ndevs = q.vProps.ndevs;
    return rc;
}

static ncclResult_t drv_listen(struct drv_net *n, int dev, void *handle, void **l)
{
    if (n->version >= 11)
        return T12->listen(n->ctx, dev, handle, l);
    return T8->listen(dev, handle, l);
}

static ncclResult_t drv_connect(struct drv_net *n, int dev, void *handle, void **s)
{
    ncclNetDeviceHandle_v8_t *devh = NULL; /* NCCL passes pointer-to-NULL for HOST */
    ncclNetCommConfig_v10_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    switch (n->version) {
    case 8: case 9: return T8->connect(dev, handle, s, &devh);
    case 10: return T10->connect(dev, &cfg, handle, s, &devh);
    default: return T12->connect(n->ctx, dev, handle, s, &devh);
    }
}

static ncclResult_t drv_accept(struct drv_net *n, void *l, void **r)
{
    ncclNetDeviceHandle_v8_t *devh = NULL;
    return T8->accept(l, r, &devh); /* same position and type in every version */
}

static ncclResult_t drv_reg_mr(struct drv_net *n, void *c, void *d, size_t sz, void **mh)
{
    return T8->regMr(c, d, sz, NCCL_PTR_HOST, mh);
}

static ncclResult_t drv_dereg_mr(struct drv_net *n, void *c, void *mh) { return T8->deregMr(c, mh); }

static ncclResult_t drv_isend(struct drv_net *n, void *c, void *d, size_t sz, int tag, void *mh,
                              void **req)
{
    switch (n->version) {
    case 8: return T8->isend(c, d, (int)sz, tag, mh, req);
    case 9: return T9->isend(c, d, sz, tag, mh, req);
    default: return T12->isend(c, d, sz, tag, mh, NULL, req);
    }
}

/* optional: preset the v9+ "optional receive completion" marker, as NCCL does for LL. */
static ncclResult_t drv_irecv(struct drv_net *n, void *c, void *d, size_t sz, int tag, void *mh,
                              int optional, void **req)
{
    void *data[1] = {d}, *mhs[1] = {mh};
    int tags[1] = {tag};
    *req = optional && n->version >= 9 ? (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION
                                       : NULL;
    switch (n->version) {
    case 8: {
        int s8[1] = {(int)sz};
        return T8->irecv(c, 1, data, s8, tags, mhs, req);
    }
    case 9: {
        size_t s9[1] = {sz};
        return T9->irecv(c, 1, data, s9, tags, mhs, req);
    }
    default: {
        size_t s12[1] = {sz};
        void *ph[1] = {NULL};
        return T12->irecv(c, 1, data, s12, tags, mhs, ph, req);
    }
    }
}

static ncclResult_t drv_test(struct drv_net *n, void *req, int *done, int *size)
{
    return T8->test(req, done, size);
}

static ncclResult_t drv_close_send(struct drv_net *n, void *c) { return T8->closeSend(c); }
static ncclResult_t drv_close_recv(struct drv_net *n, void *c) { return T8->closeRecv(c); }
static ncclResult_t drv_close_listen(struct drv_net *n, void *c) { return T8->closeListen(c); }

#endif
