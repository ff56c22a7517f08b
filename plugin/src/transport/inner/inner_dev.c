/* Wrap mode's process-wide half: the inner plugin, loaded and started once, and what each
 * linkguard device is made of (see inner_dev.h). */
#include "transport/inner/inner_dev.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "transport/inner/inner_completion.h"
#include "transport/inner/inner_pair.h"
#include "transport/inner/inner_props.h"

struct lg_inner_devs *lg_inner_devs;

/* ---- init ------------------------------------------------------------------------------- */

/* A NIC as pairing sees it: its PCI function and its RDMA device and port, from sysfs. */
struct nic_ids {
    char pci[4096];
    char rdma[64];
};

static void nic_id(const char *netdev, struct nic_ids *buf, struct lg_nic_id *id)
{
    int port = 0;
    int pci = lg_nic_pci_real(lg_params.sysfs_root, netdev, buf->pci, sizeof(buf->pci));
    int rdma = lg_nic_rdma_id(lg_params.sysfs_root, netdev, buf->rdma, sizeof(buf->rdma), &port);
    *id = (struct lg_nic_id){.netdev = netdev, .rdma_dev = rdma == 0 ? buf->rdma : NULL,
                             .rdma_port = rdma == 0 ? port : 0,
                             .pci_real = pci == 0 ? buf->pci : NULL};
}

/* Pairing's view of the inner devices; one that cannot be told apart from a lower index has
 * no name there (lg_inner_dev_duplicate_of), and `log` says so once. */
static void inner_ids(const struct lg_inner *in, struct lg_inner_devid *devs, int log)
{
    for (int i = 0; i < in->ndev; i++)
        devs[i] = (struct lg_inner_devid){.name = in->dev[i].props.name,
                                          .pci_real = in->dev[i].pci_real,
                                          .port = in->dev[i].props.port,
                                          .speed = in->dev[i].props.speed};
    for (int i = in->ndev - 1; i > 0; i--) { /* from the top: a lower one may be a duplicate */
        int j = lg_inner_dev_duplicate_of(devs, i);
        if (j < 0)
            continue;
        if (log)
            LG_INFO(NCCL_INIT | NCCL_NET, "inner device %d ('%s') cannot be told apart from "
                    "inner device %d (the same name, no PCI path, the same port and speed): "
                    "dev %d stands for both", i, devs[i].name, j, j);
        devs[i].name = NULL;
    }
}

/* LINKGUARD_PAIRS may name inner devices ("mlx5_0:mlx5_1"): each such name becomes the netdev
 * of its NIC (by RDMA device and port, or PCI function), whose address carries linkguard's
 * control channel; device discovery then reads netdevs only. */
static int translate_pairs(const struct lg_inner *in, char *err, size_t len)
{
    static struct lg_ifinfo ifs[LG_MAX_IFS];
    static struct nic_ids bufs[LG_MAX_IFS];
    static struct lg_nic_id nics[LG_MAX_IFS];
    static struct lg_inner_devid devs[LG_INNER_MAX_DEVS];
    static char out[1024];
    const char *spec = lg_params.pairs;
    if (!spec || !spec[0])
        return 0;
    int nifs = lg_ifaces_scan(ifs, LG_MAX_IFS);
    for (int i = 0; i < nifs; i++)
        nic_id(ifs[i].name, &bufs[i], &nics[i]);
    inner_ids(in, devs, 0); /* (map_devices says which collapse) */
    size_t o = 0;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",:");
        char name[IFNAMSIZ + 64];
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        const char *use = name;
        int is_if = 0, dev = -1, ndev = 0;
        for (int i = 0; i < nifs; i++)
            is_if |= !strcmp(ifs[i].name, name);
        for (int i = 0; i < in->ndev; i++)
            if (!strcmp(devs[i].name, name))
                dev = i, ndev++;
        if (!is_if && ndev > 1) {
            snprintf(err, len, LG_INNER_SHARED_NAME_ERR, name);
            return -1;
        }
        if (!is_if && ndev == 1) {
            int k = lg_inner_nic_match(nics, nifs, &devs[dev]);
            if (k < 0) {
                snprintf(err, len, "inner device '%s' matches %s network interface (by RDMA "
                         "device or PCI path): linkguard's control channel needs its netdev",
                         name, k == LG_MATCH_NONE ? "no" : "more than one");
                return -1;
            }
            use = nics[k].netdev;
        }
        int w = snprintf(out + o, sizeof(out) - o, "%s%s", use, p[n] ? (p[n] == ':' ? ":" : ",")
                                                                     : "");
        if (w < 0 || (size_t)w >= sizeof(out) - o) {
            snprintf(err, len, "too long");
            return -1;
        }
        o += (size_t)w;
        p += n + (p[n] ? 1 : 0);
    }
    if (strcmp(out, spec))
        LG_INFO(NCCL_INIT | NCCL_NET, "LINKGUARD_PAIRS=\"%s\" is \"%s\" in netdevs", spec, out);
    lg_params.pairs = out;
    return 0;
}

/* Device d's backup set, each member on an inner device of its own (lg_inner_set_map); a
 * member without one leaves the set (INFO), so that the spread never puts a backup path where
 * no inner comm can follow. */
static void map_set(struct lg_inner_devs *w, struct lg_device *d, int dev,
                    const struct lg_inner_devid *devs, int ndev)
{
    static struct nic_ids bufs[LG_MAX_BACKUP_SET];
    struct lg_nic_id ids[LG_MAX_BACKUP_SET];
    int out[LG_MAX_BACKUP_SET], kept = 0;
    for (int k = 0; k < d->nset; k++)
        nic_id(d->set[k].name, &bufs[k], &ids[k]);
    lg_inner_set_map(devs, ndev, ids, d->nset, w->inner_dev[dev][0], w->inner_dev[dev][1], out);
    for (int k = 0; k < d->nset; k++) {
        if (out[k] < 0) {
            LG_INFO(NCCL_INIT | NCCL_NET, "dev %d: NIC %s leaves its backup set in wrap mode: "
                    "%s", dev, d->set[k].name, out[k] == LG_MATCH_CLASH
                    ? "its inner device carries another NIC of the device"
                    : "the inner plugin does not list it once");
            continue;
        }
        d->set[kept] = d->set[k];
        w->set_dev[dev][kept++] = out[k];
    }
    d->nset = kept;
}

int lg_inner_devs_find(int dev, const char *nic)
{
    const struct lg_device *d = lg_device_get(dev);
    if (!lg_inner_devs || !d)
        return -1;
    if (!strcmp(nic, d->nic[0].name))
        return lg_inner_devs->inner_dev[dev][0];
    for (int k = 0; k < d->nset; k++)
        if (!strcmp(nic, d->set[k].name))
            return lg_inner_devs->set_dev[dev][k];
    return d->has_backup && !strcmp(nic, d->nic[1].name) ? lg_inner_devs->inner_dev[dev][1] : -1;
}

static int map_devices(struct lg_inner_devs *w, struct lg_device_table *t, char *err, size_t len)
{
    struct lg_inner *in = w->in;
    static struct lg_inner_devid devs[LG_INNER_MAX_DEVS];
    static struct nic_ids bufs[2 * LG_MAX_DEVS];
    static struct lg_nic_id nics[2 * LG_MAX_DEVS];
    static struct lg_inner_pair pairs[LG_MAX_DEVS];
    inner_ids(in, devs, 1);
    int nnic = 0;
    for (int d = 0; d < t->count; d++)
        for (int k = 0; k < 1 + t->dev[d].has_backup; k++, nnic++)
            nic_id(t->dev[d].nic[k].name, &bufs[nnic], &nics[nnic]);
    if (lg_inner_pairs_from_table(t, devs, in->ndev, nics, nnic, pairs, LG_MAX_DEVS, err,
                                  len) < 0)
        return -1;
    const char *names[LG_MAX_DEVS], *inner_names[LG_INNER_MAX_DEVS];
    for (int d = 0; d < t->count; d++) {
        const struct lg_inner_pair *p = &pairs[d];
        const ncclNetProperties_v12_t *pb = p->has_backup ? &in->dev[p->m[1].dev].props : NULL;
        w->inner_dev[d][0] = p->m[0].dev;
        w->inner_dev[d][1] = p->has_backup ? p->m[1].dev : -1;
        map_set(w, &t->dev[d], d, devs, in->ndev);
        if (lg_inner_vdev_name(w->name[d], sizeof(w->name[d]), in->dev[p->m[0].dev].props.name,
                               pb ? pb->name : NULL) < 0 ||
            lg_inner_props_merge(&in->dev[p->m[0].dev].props, pb, d, w->name[d], &w->props[d],
                                 err, len) < 0) {
            if (!err[0])
                snprintf(err, len, "device %d: inner device names too long", d);
            return -1;
        }
        names[d] = w->name[d];
    }
    for (int i = 0; i < in->ndev; i++)
        inner_names[i] = in->dev[i].props.name;
    return lg_inner_names_check(names, t->count, inner_names, in->ndev, err, len);
}

/* The inner plugin's log goes through here. Its WARNs are about one path (a comm that
 * linkguard fenced, or whose link died), which linkguard fails over: they become INFO lines
 * that say so. linkguard WARNs itself when a call or a connection really fails. */
static ncclDebugLogger_t inner_log_to;

static void inner_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                         int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!inner_log_to)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN)
        inner_log_to(NCCL_LOG_INFO, flags | NCCL_NET, file, line,
                       "inner plugin warning (linkguard fails this path over): %s", msg);
    else
        inner_log_to(level, flags, file, line, "%s", msg);
}

/* Opened and started, not yet mapped onto the device table (between the two init steps). */
static struct lg_inner_devs *devs_opened;

ncclResult_t lg_inner_devs_open(ncclDebugLogger_t logger)
{
    if (!lg_params.inner[0] || lg_inner_devs || devs_opened)
        return ncclSuccess;
    struct lg_inner_devs *w = calloc(1, sizeof(*w));
    if (!w)
        return ncclSystemError;
    inner_log_to = logger;
    ncclResult_t rc = lg_inner_open_env(logger ? inner_logger : NULL, NULL, &w->in);
    if (rc == ncclSuccess)
        rc = lg_inner_start(w->in, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF, &w->ctx);
    if (rc != ncclSuccess) { /* WARNed by the loader */
        if (w->in)
            lg_inner_close(w->in);
        free(w);
        return rc;
    }
    char err[256] = "";
    if (translate_pairs(w->in, err, sizeof(err)) != 0) {
        LG_WARN("LINKGUARD_PAIRS=\"%s\" (wrap mode): %s", lg_params.pairs, err);
        free(w); /* the inner stays initialised: never dlclosed after init */
        return ncclInvalidUsage;
    }
    devs_opened = w;
    return ncclSuccess;
}

ncclResult_t lg_inner_devs_start(struct lg_device_table *t)
{
    struct lg_inner_devs *w = devs_opened;
    if (!w || lg_inner_devs)
        return ncclSuccess;
    char err[256] = "";
    if (map_devices(w, t, err, sizeof(err)) != 0) {
        LG_WARN("LINKGUARD_INNER=%s: cannot pair the inner plugin's devices with the NICs: %s",
                lg_params.inner, err);
        return ncclInvalidUsage;
    }
    for (int d = 0; d < t->count; d++)
        LG_INFO(NCCL_INIT | NCCL_NET, "dev %d: %s = inner '%s' dev %d (NIC %s), backup inner "
                "dev %d (NIC %s)", d, w->name[d], w->in->name, w->inner_dev[d][0],
                t->dev[d].nic[0].name, w->inner_dev[d][1],
                t->dev[d].has_backup ? t->dev[d].nic[1].name : "none");
    const char *why;
    w->placed = lg_inner_completion_placed(lg_params.inner_placed, w->in->name, w->in->version,
                                           &why);
    if (w->placed < 0) {
        LG_WARN("LINKGUARD_INNER_PLACED=\"%s\": neither auto, 1 nor 0; using auto",
                lg_params.inner_placed);
        w->placed = lg_inner_completion_placed("auto", w->in->name, w->in->version, &why);
    }
    LG_INFO(NCCL_INIT | NCCL_NET, "wrap mode: a send completes %s (%s)",
            w->placed ? "when the inner plugin completes it: its completion means placed at "
                        "the receiver"
                      : "on linkguard's acknowledgement and the inner plugin's completion",
            why);
    lg_inner_devs = w;
    return ncclSuccess;
}

ncclResult_t lg_inner_devs_properties(int dev, ncclNetProperties_v12_t *props)
{
    *props = lg_inner_devs->props[dev];
    /* A grouped receive goes to the inner plugin whole, within our request window. */
    props->maxRecvs = LG_MIN(props->maxRecvs, (int)lg_params.max_recvs);
    return ncclSuccess;
}

/* ---- contexts ----------------------------------------------------------------------------- */

ncclResult_t lg_inner_devs_ctx_open(uint64_t comm_id, int traffic_class, struct lg_inner_ctx **out)
{
    return lg_inner_devs->in->ops->init(lg_inner_devs->in, comm_id, traffic_class, out);
}

void lg_inner_devs_ctx_close(struct lg_inner_ctx *ctx)
{
    lg_inner_devs->in->ops->finalize(lg_inner_devs->in, ctx);
}

