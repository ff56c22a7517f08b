/* Wrap mode: loading the inner ncclNet plugin, starting it, and driving one connect attempt.
 * The per-version adapters are in inner_ops.c. */
#include "transport/inner/inner.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/log.h"
#include "runtime/params.h"
#include "transport/inner/inner_ops.h"
#include "transport/inner/inner_props.h"

/* NCCL's rule, narrowed: a path or soname as given, a bare name X as libnccl-net-X.so. */
static void lib_name(const char *spec, char *out, size_t len)
{
    if (strchr(spec, '/') || strstr(spec, ".so"))
        snprintf(out, len, "%s", spec);
    else
        snprintf(out, len, "libnccl-net-%s.so", spec);
}

ncclResult_t lg_inner_open(const char *spec, int version, ncclDebugLogger_t logger,
                           ncclProfilerCallback_t prof, struct lg_inner **out)
{
    *out = NULL;
    if (!spec || !*spec) {
        LG_WARN("wrap mode: LINKGUARD_INNER is empty");
        return ncclInvalidUsage;
    }
    if (version && (version < LG_INNER_MIN_VERSION || version > LG_INNER_MAX_VERSION)) {
        LG_WARN("LINKGUARD_INNER_VERSION=%d: only %d..%d are supported", version,
                LG_INNER_MIN_VERSION, LG_INNER_MAX_VERSION);
        return ncclInvalidUsage;
    }
    struct lg_inner *in = calloc(1, sizeof(*in));
    if (!in)
        return ncclSystemError;
    lib_name(spec, in->lib, sizeof(in->lib));
    in->logger = logger;
    in->prof = prof;
    pthread_mutex_init(&in->mu, NULL);
    dlerror();
    in->dl = dlopen(in->lib, RTLD_NOW | RTLD_LOCAL);
    if (!in->dl) {
        const char *e = dlerror();
        LG_WARN("LINKGUARD_INNER=%s: cannot open %s: %s", spec, in->lib, e ? e : "?");
        lg_inner_close(in);
        return ncclInvalidUsage;
    }
    for (int v = LG_INNER_MAX_VERSION; v >= LG_INNER_MIN_VERSION && !in->table; v--) {
        char sym[32];
        if (version && v != version)
            continue;
        snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
        in->table = dlsym(in->dl, sym);
        in->version = v;
    }
    if (!in->table) {
        if (version)
            LG_WARN("LINKGUARD_INNER=%s: %s exports no ncclNetPlugin_v%d (forced by "
                    "LINKGUARD_INNER_VERSION)", spec, in->lib, version);
        else
            LG_WARN("LINKGUARD_INNER=%s: %s exports none of ncclNetPlugin_v12..v8: not an "
                    "ncclNet plugin, or one too old", spec, in->lib);
        lg_inner_close(in);
        return ncclInvalidUsage;
    }
    in->ops = lg_inner_ops_for(in->version);
    lg_inner_refresh_name(in);
    if (lg_inner_self_wrap(in)) {
        lg_inner_close(in);
        return ncclInvalidUsage;
    }
    if (!((const ncclNet_v8_t *)in->table)->init) {
        LG_WARN("inner plugin '%s' (%s, ncclNetPlugin_v%d) has no init function", in->name,
                in->lib, in->version);
        lg_inner_close(in);
        return ncclInvalidUsage;
    }
    LG_INFO(NCCL_INIT | NCCL_NET, "wrap mode: inner plugin '%s' from %s, ncclNetPlugin_v%d%s",
            in->name, in->lib, in->version, version ? " (forced)" : "");
    *out = in;
    return ncclSuccess;
}

ncclResult_t lg_inner_open_env(ncclDebugLogger_t logger, ncclProfilerCallback_t prof,
                               struct lg_inner **out)
{
    return lg_inner_open(lg_params.inner, (int)lg_params.inner_version, logger, prof, out);
}


static char *dup_str(const char *s) { return s ? strdup(s) : NULL; }

static void free_devs(struct lg_inner *in)
{
    for (int i = 0; i < in->ndev; i++) {
        free(in->dev[i].props.name);
        free(in->dev[i].props.pciPath);
        free(in->dev[i].pci_real);
    }
    in->ndev = 0;
}

/* Caches every device's properties, with our own copies of the strings. */
static ncclResult_t load_devs(struct lg_inner *in, int ndev)
{
    for (int i = 0; i < ndev; i++) {
        struct lg_inner_dev *d = &in->dev[i];
        ncclNetProperties_v12_t p;
        ncclResult_t rc = in->ops->getProperties(in, i, &p);
        if (rc != ncclSuccess)
            return rc;
        d->props = p;
        d->props.name = dup_str(p.name);
        d->props.pciPath = dup_str(p.pciPath);
        d->pci_real = p.pciPath ? realpath(p.pciPath, NULL) : NULL;
        in->ndev = i + 1;
        if (!d->props.name || (p.pciPath && !d->props.pciPath))
            return ncclSystemError;
    }
    return ncclSuccess;
}

ncclResult_t lg_inner_start(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                            struct lg_inner_ctx **ctx)
{
    int ndev = 0;
    ncclResult_t rc = in->ops->init(in, comm_id, traffic_class, ctx);
    if (rc != ncclSuccess)
        return rc;
    rc = in->ops->devices(in, &ndev);
    if (rc == ncclSuccess && ndev <= 0) {
        LG_WARN("inner plugin '%s' (%s) has no devices", in->name, in->lib);
        rc = ncclInvalidUsage;
    }
    if (rc == ncclSuccess && ndev > LG_INNER_MAX_DEVS) {
        LG_WARN("inner plugin '%s' (%s) has %d devices; linkguard uses the first %d", in->name,
                in->lib, ndev, LG_INNER_MAX_DEVS);
        ndev = LG_INNER_MAX_DEVS;
    }
    free_devs(in);
    if (rc == ncclSuccess)
        rc = load_devs(in, ndev);
    if (rc != ncclSuccess) {
        free_devs(in);
        in->ops->finalize(in, *ctx);
        *ctx = NULL;
        return rc;
    }
    for (int i = 0; i < in->ndev; i++) {
        const ncclNetProperties_v12_t *p = &in->dev[i].props;
        LG_INFO(NCCL_INIT | NCCL_NET, "inner dev %d: %s pci %s speed %d ptrSupport 0x%x "
                "maxRecvs %d maxP2pBytes %zu", i, p->name, p->pciPath ? p->pciPath : "none",
                p->speed, p->ptrSupport, p->maxRecvs, p->maxP2pBytes);
    }
    return ncclSuccess;
}

void lg_inner_close(struct lg_inner *in)
{
    if (!in)
        return;
    free_devs(in);
    /* An initialised plugin may have threads and v8..v10 have no finalize: keep it mapped
     * for the process lifetime, as NCCL does with NCCL_NET_PLUGIN_REF_COUNT. */
    if (in->dl && !in->inited)
        dlclose(in->dl);
    pthread_mutex_destroy(&in->mu);
    free(in);
}

void lg_inner_connecting_init(struct lg_inner_connecting *cg, int dev, const void *handle,
                              size_t len)
{
    memset(cg, 0, sizeof(*cg));
    cg->dev = dev;
    memcpy(cg->handle, handle, len < sizeof(cg->handle) ? len : sizeof(cg->handle));
}

int lg_inner_connecting_step(struct lg_inner *in, struct lg_inner_ctx *ctx,
                             struct lg_inner_connecting *cg)
{
    if (cg->comm)
        return 1;
    if (in->ops->connect(in, ctx, cg->dev, cg->handle, &cg->comm) != ncclSuccess) {
        if (cg->comm) /* as NCCL does with a partially created comm */
            in->ops->closeSend(in, cg->comm);
        cg->comm = NULL;
        return -1;
    }
    return cg->comm ? 1 : 0;
}
