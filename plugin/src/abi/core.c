/* The version-neutral plugin core: init/finalize refcounting, devices and properties,
 * memory registration, and argument checks in front of the transport. */
#include "abi/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/monitor.h"
#include "proto/proto.h"
#include "proto/window.h"
#include "runtime/ctx.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/progress.h"
#include "runtime/sock.h"
#include "transport/inner/inner_dev.h"
#include "transport/transport_select.h"

struct lg_mr {
    uint32_t magic;
    struct lg_conn *conn;
    void *data;
    size_t size;
    struct lg_inner_mr *imr;  /* wrap mode: the inner registrations, one per path */
};

static pthread_mutex_t lg_core_mu = PTHREAD_MUTEX_INITIALIZER;
static int lg_core_inits;  /* init()s not yet finalized */
static int lg_core_live;   /* listen comms and connections */
static int lg_core_running; /* progress threads started */
static int lg_core_loaded = -1; /* flavor whose device table is loaded */
static struct lg_device_table lg_devs;

static int lg_core_injected; /* lg_core_test_set_devices was called */

void lg_core_test_set_devices(const struct lg_device_table *t, enum lg_flavor flavor)
{
    pthread_mutex_lock(&lg_core_mu);
    lg_devs = *t;
    lg_core_loaded = (int)flavor;
    lg_devices_publish(&lg_devs);
    lg_core_injected = 1;
    pthread_mutex_unlock(&lg_core_mu);
}

static void raise_nofile(void)
{
    struct rlimit r;
    if (!lg_params.raise_nofile || getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max)
        return;
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
}

static const char *getenv_wrap(const char *n) { return getenv(n); }

static void log_devices(enum lg_flavor flavor)
{
    for (int i = 0; i < lg_devs.count; i++) {
        const struct lg_device *d = &lg_devs.dev[i];
        char set[LG_MAX_BACKUP_SET * IFNAMSIZ + 16] = ""; /* " (set a+b+c)" beyond the pair */
        for (int k = 0, o = 0; d->nset > 1 && k < d->nset; k++)
            o += snprintf(set + o, sizeof(set) - (size_t)o, "%s%s", k ? "+" : " (set ",
                          d->set[k].name);
        if (d->nset > 1)
            snprintf(set + strlen(set), sizeof(set) - strlen(set), ")");
        LG_INFO(NCCL_INIT | NCCL_NET, "dev %d: %s%s%s%s speed %d Mb/s pci %s (from %s)", i,
                d->nic[0].name, d->has_backup ? " backup " : "",
                d->has_backup ? d->nic[1].name : "", set, d->speed_mbps,
                d->pci_path[0] ? d->pci_path : "none (virtual)", lg_devs.source);
    }
    LG_INFO(NCCL_INIT | NCCL_NET, "%s: %d device(s), %lld stream(s) per path, chunk %lld B, "
            "%lld progress thread(s), backup path %s",
            flavor == LG_FLAVOR_TCP ? "lgtcp" : "linkguard", lg_devs.count,
            (long long)lg_params.streams, (long long)lg_params.chunk_size,
            (long long)lg_params.threads,
            flavor == LG_FLAVOR_TCP ? "n/a" : lg_params.backup ? "on" : "off");
}

static void (*lg_core_stop_hook)(void);

void lg_core_on_stop(void (*fn)(void))
{
    pthread_mutex_lock(&lg_core_mu);
    lg_core_stop_hook = fn;
    pthread_mutex_unlock(&lg_core_mu);
}

/* Stops the threads once nothing uses them (under lg_core_mu). */
static void maybe_stop(void)
{
    if (lg_core_inits == 0 && lg_core_live == 0 && lg_core_running) {
        if (lg_core_stop_hook)
            lg_core_stop_hook();
        lg_monitor_stop();
        lg_progress_stop();
        lg_health_fini();
        lg_core_running = 0;
    }
}

/* The settings, then what a flavor overrides. Only here: the threads read lg_params. */
static void load_params(enum lg_flavor flavor)
{
    lg_params_load(&lg_params, getenv_wrap);
    /* lgtcp promises that a send completes once its receiver placed it (wrap mode's placed
     * completion rests on that, docs/wrap-mode.md): a kept send completes before. And it
     * sends no census: wrapped, the linkguard around it reports the process's connections
     * (one census per pid: two would replace each other in the daemon). */
    if (flavor == LG_FLAVOR_TCP) {
        lg_params.send_copy = 0;
        lg_params.census = 0;
    }
}

ncclResult_t lg_core_init(enum lg_flavor flavor, ncclDebugLogger_t logger)
{
    ncclResult_t rc = ncclSuccess;
    lg_log_set(logger);
    pthread_mutex_lock(&lg_core_mu);
    if (lg_core_injected && lg_core_inits == 0)
        load_params(flavor);
    if (!lg_core_running)
        lg_health_init(); /* before discovery: the daemon's table lists the devices */
    if (lg_core_loaded != (int)flavor)
        load_params(flavor);
    /* Wrap mode (the failover plugin only: the standalone transport is what gets wrapped)
     * starts the inner plugin first: LINKGUARD_PAIRS may name its devices. */
    if (flavor == LG_FLAVOR_LINKGUARD && (rc = lg_inner_devs_open(logger)) != ncclSuccess)
        goto out;
    if (lg_core_loaded != (int)flavor) {
        if (lg_devices_discover(&lg_devs, flavor == LG_FLAVOR_TCP) < 0) {
            rc = ncclInvalidUsage;
            goto out;
        }
        lg_core_loaded = (int)flavor;
        lg_devices_publish(&lg_devs);
        raise_nofile();
        log_devices(flavor);
    }
    if (flavor == LG_FLAVOR_LINKGUARD && (rc = lg_inner_devs_start(&lg_devs)) != ncclSuccess)
        goto out;
    if (!lg_core_running) {
        if (lg_progress_start((int)lg_params.threads) != 0) {
            rc = ncclSystemError;
            goto out;
        }
        if (lg_monitor_start() != 0) {
            lg_progress_stop();
            rc = ncclSystemError;
            goto out;
        }
        lg_core_running = 1;
    }
    lg_core_inits++;
out:
    pthread_mutex_unlock(&lg_core_mu);
    return rc;
}

ncclResult_t lg_core_finalize(void)
{
    pthread_mutex_lock(&lg_core_mu);
    if (lg_core_inits > 0)
        lg_core_inits--;
    maybe_stop();
    pthread_mutex_unlock(&lg_core_mu);
    return ncclSuccess;
}

void lg_core_ref(int delta)
{
    pthread_mutex_lock(&lg_core_mu);
    lg_core_live += delta;
    maybe_stop();
    pthread_mutex_unlock(&lg_core_mu);
}

ncclResult_t lg_core_ctx_free(void *ctx) { return lg_ctx_free(ctx); }

ncclResult_t lg_core_ctx_new(uint64_t comm_id, int traffic_class, void **ctx)
{
    struct lg_inner_ctx *inner = NULL; /* the inner plugin's context for it, if any */
    const struct lg_transport *tr = lg_transport_select();
    ncclResult_t rc = tr->ctx_open(comm_id, traffic_class, &inner);
    if (rc != ncclSuccess) /* WARNed by the loader */
        return rc;
    return lg_ctx_new(comm_id, traffic_class, inner, tr->ctx_close, (struct lg_ctx **)ctx);
}

const struct lg_device *lg_core_device(int dev) { return lg_device_get(dev); }

ncclResult_t lg_core_devices(int *ndev)
{
    *ndev = lg_core_loaded < 0 ? 0 : lg_devs.count;
    return ncclSuccess;
}

ncclResult_t lg_core_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    if (!lg_core_device(dev)) {
        LG_WARN("getProperties: no device %d", dev);
        return ncclInvalidArgument;
    }
    return lg_transport_select()->get_properties(dev, props);
}

int lg_core_conn_ready(struct lg_conn *c)
{
    if (lg_conn_start(c) != 0)
        return -1;
    lg_core_ref(1);
    lg_monitor_add(c);
    char ports[160] = "", *at = ports;
    for (int i = 0; i < LG_NPATHS; i++)
        if (c->paths[i])
            at += lg_path_ports(c->paths[i], at, sizeof(ports) - (size_t)(at - ports), at != ports);
    LG_INFO(NCCL_NET, "%s conn %016llx on dev %d: %d path(s), %d stream(s) each, %s "
            "transport (word %u); local ports: %s", c->kind == LG_CONN_SEND ? "send" : "recv",
            (unsigned long long)c->nonce, c->dev, c->paths[1] ? 2 : 1, c->nstreams,
            c->tr->name, c->blob, ports);
    return 0;
}

static struct lg_conn *as_conn(void *comm, enum lg_conn_kind kind, const char *call)
{
    struct lg_conn *c = comm;
    if (!c || c->magic != LG_CONN_MAGIC || (kind && c->kind != kind)) {
        LG_WARN("%s: not a linkguard %s comm", call,
                kind == LG_CONN_SEND ? "send" : kind == LG_CONN_RECV ? "recv" : "");
        return NULL;
    }
    return c;
}

static ncclResult_t reg_mr(void *comm, void *data, size_t size, int type, uint64_t offset,
                           int fd, void **mhandle)
{
    struct lg_conn *c = as_conn(comm, 0, fd >= 0 ? "regMrDmaBuf" : "regMr");
    if (!c)
        return ncclInternalError;
    struct lg_mr *mr = calloc(1, sizeof(*mr));
    if (!mr)
        return ncclSystemError;
    /* The transport checks the memory type and registers what it must (TCP: nothing). */
    ncclResult_t rc = c->tr->reg_mr(c, data, size, type, offset, fd, &mr->imr);
    if (rc != ncclSuccess) {
        free(mr);
        return rc;
    }
    mr->magic = LG_MR_MAGIC;
    mr->conn = c;
    mr->data = data;
    mr->size = size;
    __atomic_add_fetch(&c->nmr, 1, __ATOMIC_RELAXED);
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t lg_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    return reg_mr(comm, data, size, type, 0, -1, mhandle);
}

ncclResult_t lg_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle)
{
    if (fd < 0) {
        LG_WARN("regMrDmaBuf: bad file descriptor %d", fd);
        return ncclInvalidArgument;
    }
    return reg_mr(comm, data, size, type, offset, fd, mhandle);
}

ncclResult_t lg_core_dereg_mr(void *comm, void *mhandle)
{
    struct lg_mr *mr = mhandle;
    (void)comm;
    if (!mr || mr->magic != LG_MR_MAGIC) {
        LG_WARN("deregMr: not a linkguard memory handle");
        return ncclInternalError;
    }
    ncclResult_t rc = mr->conn->tr->dereg_mr(mr->conn, mr->imr);
    __atomic_sub_fetch(&mr->conn->nmr, 1, __ATOMIC_RELAXED);
    mr->magic = 0;
    free(mr);
    return rc;
}

/* The inner registrations behind NCCL's memory handle (wrap mode); NULL without one. */
static int inner_mr(void *mhandle, const char *call, struct lg_inner_mr **out)
{
    struct lg_mr *mr = mhandle;
    *out = NULL;
    if (!mr)
        return 0;
    if (mr->magic != LG_MR_MAGIC) {
        LG_WARN("%s: not a linkguard memory handle", call);
        return -1;
    }
    *out = mr->imr;
    return 0;
}

ncclResult_t lg_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void **request)
{
    struct lg_inner_mr *imr;
    struct lg_conn *c = as_conn(send_comm, LG_CONN_SEND, "isend");
    if (!c || inner_mr(mhandle, "isend", &imr) != 0)
        return ncclInternalError;
    if (size > LG_MAX_MSG_BYTES) {
        LG_WARN("isend of %zu bytes exceeds maxP2pBytes (%llu)", size, LG_MAX_MSG_BYTES);
        return ncclInternalError;
    }
    return lg_conn_isend(c, data, size, tag, imr, request);
}

ncclResult_t lg_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **request)
{
    struct lg_inner_mr *imrs[LG_MAX_RECVS] = {0};
    struct lg_conn *c = as_conn(recv_comm, LG_CONN_RECV, "irecv");
    if (!c)
        return ncclInternalError;
    for (int i = 0; mhandles && i < n && i < LG_MAX_RECVS; i++)
        if (inner_mr(mhandles[i], "irecv", &imrs[i]) != 0)
            return ncclInternalError;
    return lg_conn_irecv(c, n, data, sizes, tags, imrs, request);
}

ncclResult_t lg_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                            void **request)
{
    struct lg_conn *c = as_conn(recv_comm, LG_CONN_RECV, "iflush");
    struct lg_inner_mr *imrs[NCCL_PROXY_MAX_SUBS] = {0};
    *request = NULL;
    if (!c || n < 1 || n > NCCL_PROXY_MAX_SUBS)
        return ncclInternalError;
    for (int i = 0; mhandles && i < n; i++)
        if (inner_mr(mhandles[i], "iflush", &imrs[i]) != 0)
            return ncclInternalError;
    return c->tr->iflush(c, n, data, sizes, imrs, request);
}

ncclResult_t lg_core_test(void *request, int *done, int *sizes)
{
    struct lg_req *r = request;
    ncclResult_t frc;
    if (r && r->magic == LG_REQ_MAGIC) /* the common case first: every poll comes here */
        return lg_req_test(r, done, sizes);
    if (r && r->magic == LG_REQ_FAILED_MAGIC) { /* posted after the connection failed */
        *done = 0;
        return (ncclResult_t)__atomic_load_n(&((struct lg_failed_req *)request)->conn->error,
                                             __ATOMIC_ACQUIRE);
    }
    if (lg_transport_select()->flush_test(request, done, &frc))
        return frc;
    LG_WARN("test: not a linkguard request");
    return ncclInternalError;
}

/* How long a close waits for its goodbye to leave a full control socket (a live peer reads
 * its control channel continuously; a dead one is not worth a longer wait). */
#define LG_BYE_DRAIN_MS 200

static ncclResult_t close_conn(void *comm, enum lg_conn_kind kind, const char *call)
{
    struct lg_conn *c = as_conn(comm, kind, call);
    if (!c)
        return ncclInternalError;
    lg_send_settle(c); /* kept sends acked first: until then a failover may replay them */
    lg_monitor_remove(c); /* from here on, no path changes under us */
    /* Say goodbye first, so the peer logs a close, not a failure. A receiver's BYE carries
     * what it placed: the sender completes those sends, whatever ACK it has not read yet (a
     * receiver may close right after its last receive, as NCCL's own transports allow). A
     * sender's carries what completed: the receiver completes those receives (wrap mode: an
     * inner plugin placed them, whatever completion its receiver has not seen yet). The
     * goodbye is written out before the sockets close, not left in a full queue. */
    uint64_t count = __atomic_load_n(c->kind == LG_CONN_RECV ? &c->placed : &c->acked,
                                     __ATOMIC_ACQUIRE);
    struct lg_ctrl bye = {.type = LG_CTRL_BYE, .flags = LG_BYE_CLOSE, .value = count};
    for (int p = 0; p < LG_NPATHS; p++)
        if (c->paths[p] && __atomic_load_n(&c->paths[p]->state, __ATOMIC_ACQUIRE) == LG_PATH_UP) {
            lg_path_ctrl_send(c->paths[p], &bye);
            lg_path_ctrl_drain(c->paths[p], LG_BYE_DRAIN_MS);
        }
    lg_conn_free(c);
    lg_core_ref(-1);
    return ncclSuccess;
}

ncclResult_t lg_core_close_send(void *send_comm) { return close_conn(send_comm, LG_CONN_SEND, "closeSend"); }
ncclResult_t lg_core_close_recv(void *recv_comm) { return close_conn(recv_comm, LG_CONN_RECV, "closeRecv"); }
