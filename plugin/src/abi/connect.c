/* Non-blocking connect: every connection opens both paths at once, each a channel on the
 * control session to the peer's listener of that NIC (session.h: shared, opened by the first
 * connection that needs it) and its data sockets. Progress state lives in a heap object
 * whose address is kept in NCCL's handle memory between calls (handle.h). */
#include "abi/connect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/core.h"
#include "daemon/devices.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "proto/spread.h"
#include "runtime/ctx.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "session/handle.h"
#include "transport/transport_select.h"

#define LG_CONNECTING_MAGIC 0x4c47434eu /* "LGCN" */

static void lg_connect_abandon_all(void);

struct lg_connecting {
    uint32_t magic;
    struct lg_connecting *next; /* registry of live attempts */
    struct lg_conn *conn;
    uint64_t deadline;
    uint64_t primary_up_ns; /* when every primary socket was connected; 0 before */
    int started; /* sockets up, the monitor has it; wrap mode: waiting for the inner comms */
    int path_live[LG_NPATHS];
    struct lg_dial dial[LG_NPATHS]; /* each live path's sockets (dial.h) */
    char peer_nic[LG_NPATHS][LG_HANDLE_NIC_LEN]; /* from the handle, for the WARNs */
};

/* Only pointers found here are ever dereferenced: a handle with a stale or forged stage
 * pointer is treated as fresh. */
static pthread_mutex_t lg_connecting_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lg_connecting *lg_connecting_list;

static int registry_has(struct lg_connecting *cg)
{
    pthread_mutex_lock(&lg_connecting_mu);
    struct lg_connecting *it = lg_connecting_list;
    while (it && it != cg)
        it = it->next;
    pthread_mutex_unlock(&lg_connecting_mu);
    return it != NULL;
}

static void registry_remove(struct lg_connecting *cg)
{
    pthread_mutex_lock(&lg_connecting_mu);
    for (struct lg_connecting **pp = &lg_connecting_list; *pp; pp = &(*pp)->next)
        if (*pp == cg) {
            *pp = cg->next;
            break;
        }
    pthread_mutex_unlock(&lg_connecting_mu);
}

/* Why a path's peer address is unreachable: on another subnet, NCCL paired NICs of different
 * rails (cross-NIC rings) and nothing routes between them; on the NIC's own, a NIC or link
 * is down. An unknown mask (an address from the daemon's table) is taken as another subnet. */
static const char *reach_hint(const struct lg_conn *c, int p, int err)
{
    if (err != ENETUNREACH && err != EHOSTUNREACH)
        return "";
    const struct lg_device *d = lg_device_get(c->dev);
    const struct lg_nic *member = p ? lg_device_set_member(d, c->local_ip[p]) : NULL;
    const struct lg_nic *nic = member ? member : &d->nic[p]; /* a spread backup's member */
    if (nic->mask && !((nic->ip ^ c->peer_ip[p]) & nic->mask))
        return " (no answer from that address on this NIC's own subnet: a NIC or link between "
               "the two is down)";
    return " (no route from this NIC to that address: the two NICs are on rails that are not "
           "routed to each other; NCCL's cross-NIC rings need routed rails, or "
           "NCCL_CROSS_NIC=0 keeps every ring on one rail)";
}

/* Both ends of a path that could not connect, e.g. "NIC rail0 (198.18.0.1) to the peer's
 * primary NIC rail1 at 198.18.1.2:40001" (no peer NIC name from a peer too old to send it). */
struct lg_ends_str {
    char s[IFNAMSIZ + LG_HANDLE_NIC_LEN + 96];
};
static struct lg_ends_str path_ends(const struct lg_connecting *cg, int p)
{
    const struct lg_conn *c = cg->conn;
    struct lg_ends_str e;
    char local[INET_ADDRSTRLEN];
    struct in_addr in = {.s_addr = c->local_ip[p]};
    inet_ntop(AF_INET, &in, local, sizeof(local));
    snprintf(e.s, sizeof(e.s), "NIC %s (%s) to the peer's %s NIC%s%s at %s", c->paths[p]->nic,
             local, p ? "backup" : "primary", cg->peer_nic[p][0] ? " " : "", cg->peer_nic[p],
             c->paths[p]->peer);
    return e;
}

static void give_up_backup(struct lg_connecting *cg, int err, const char *why)
{
    struct lg_path *p = cg->conn->paths[1];
    LG_WARN("send conn %016llx: backup path via NIC %s to %s unavailable (%s%s%s)%s; the "
            "connection runs unprotected until that path can be built",
            (unsigned long long)cg->conn->nonce, p->nic, p->peer, why, err ? ": " : "",
            err ? strerror(err) : "", reach_hint(cg->conn, 1, err));
    cg->path_live[1] = 0;
    cg->dial[0].hello.paths_mask = 1; /* the primary's hellos announce it alone */
    struct lg_conn *c = cg->conn;
    if (c->spread_held) { /* added later where the listener expects a pair's backup */
        const struct lg_device *d = lg_device_get(c->dev);
        lg_spread_put(c->dev, c->nic[1]);
        c->spread_held = 0;
        lg_nic_name_copy(c->nic[1], d->nic[1].name);
        c->local_ip[1] = d->nic[1].ip;
        c->peer_ip[1] = c->peer.ip[1]; /* the listener's nearest backup */
        c->peer_port[1] = c->peer.port[1];
    }
    cg->conn->paths[1] = NULL; /* the connection starts with its primary path only */
    cg->conn->npaths = 1;
    cg->conn->upgradable = 1; /* ... and the monitor adds the backup when it can */
    lg_path_free(p); /* its sockets, its session's channel */
}

static struct lg_connecting *connect_start(struct lg_ctx *ctx, int dev, const struct lg_handle *h)
{
    const struct lg_device *d = lg_device_get(dev);
    struct lg_connecting *cg = calloc(1, sizeof(*cg));
    const struct lg_transport *tr = lg_transport_select();
    struct lg_conn *c = lg_conn_new(LG_CONN_SEND, dev, tr, tr->nstreams(), lg_transport_blob(tr),
                                    lg_random_u64());
    if (!cg || !c) {
        free(cg);
        if (c)
            lg_conn_free(c);
        return NULL;
    }
    lg_fo_init(c);
    cg->magic = LG_CONNECTING_MAGIC;
    cg->conn = c;
    c->ctx = lg_ctx_ref(ctx);
    c->listen_id = h->listen_id;
    memcpy(cg->peer_nic, h->nic, sizeof(cg->peer_nic));
    cg->deadline = lg_now_ns() + (uint64_t)lg_params.connect_timeout_ms * 1000000ull;
    int npaths = d->has_backup && (h->flags & LG_HANDLE_F_BACKUP) ? 2 : 1;
    if (d->has_backup && npaths == 1)
        LG_INFO(NCCL_INIT | NCCL_NET, "connect on %s: the peer has no backup path; this "
                "connection runs unprotected", d->nic[0].name);
    c->peer = *h;
    for (int p = 0; p < LG_NPATHS; p++) { /* kept for rebuilding paths (reconnect.c) */
        lg_nic_name_copy(c->nic[p], d->nic[p].name);
        c->local_ip[p] = d->nic[p].ip;
        c->peer_ip[p] = p < npaths ? h->ip[p] : 0;
        c->peer_port[p] = p < npaths ? h->port[p] : 0;
    }
    /* Both ends have a backup set: this connection's backup goes to its least-loaded member,
     * and to the listener's NIC on that member's rail (spread.h). */
    if (npaths > 1 && d->nset > 1 && (h->flags & LG_HANDLE_F_SET) && tr->any_backup_nic) {
        int j = lg_spread_take(dev, d);
        if (j >= 0 && lg_spread_peer(&d->set[j], j, h, &c->peer_ip[1], &c->peer_port[1]) == 0) {
            lg_nic_name_copy(c->nic[1], d->set[j].name);
            c->local_ip[1] = d->set[j].ip;
            c->spread_held = 1;
            c->fo.respread_gen = lg_spread_gen(dev); /* spread now: no return to act on */
        } else if (j >= 0) {
            lg_spread_put(dev, d->set[j].name); /* the listener names no NIC on that rail */
        }
    }
    for (int p = 0; p < npaths; p++) {
        struct lg_path *path = lg_path_new(c, p, c->nic[p],
                                           lg_addr_format(c->peer_ip[p], c->peer_port[p]).s);
        if (!path) {
            lg_conn_free(c);
            free(cg);
            return NULL;
        }
        cg->path_live[p] = 1;
        /* The primary's first hello goes last: it announces which paths exist. */
        if (lg_path_dial(path, &cg->dial[p], (uint8_t)(npaths > 1 ? 3 : 1), 0, p ? 0 : 1) == 0)
            continue;
        if (p == 0) {
            int e = errno;
            LG_WARN("connect from %s: %s%s", path_ends(cg, 0).s, strerror(e), reach_hint(c, 0, e));
            lg_conn_free(c);
            free(cg);
            return NULL;
        }
        give_up_backup(cg, errno, "socket");
    }
    pthread_mutex_lock(&lg_connecting_mu);
    cg->next = lg_connecting_list;
    lg_connecting_list = cg;
    pthread_mutex_unlock(&lg_connecting_mu);
    return cg;
}

/* 1: connected, 0: in progress, -1: failed (logged). */
static int connect_progress(struct lg_connecting *cg)
{
    struct lg_conn *c = cg->conn;
    int timed_out = lg_now_ns() > cg->deadline;
    int all = 1;
    for (int p = 0; p < LG_NPATHS; p++) {
        int rc = cg->path_live[p] ? lg_dial_step(&cg->dial[p], timed_out) : 1;
        int err = errno;
        if (rc < 0 && p == 0) {
            LG_WARN("connect from %s failed: %s%s", path_ends(cg, 0).s, strerror(err),
                    reach_hint(c, 0, err));
            return -1;
        }
        if (rc < 0)
            give_up_backup(cg, err, "connect");
        all &= rc != 0;
    }
    if (!cg->primary_up_ns && lg_dial_connected(&cg->dial[0]))
        cg->primary_up_ns = lg_now_ns();
    if (!all && cg->path_live[1] && cg->primary_up_ns &&
        lg_now_ns() - cg->primary_up_ns > (uint64_t)lg_params.backup_grace_ms * 1000000ull) {
        give_up_backup(cg, ETIMEDOUT, "not connected within LINKGUARD_BACKUP_GRACE_MS");
        return connect_progress(cg);
    }
    if (!all) /* (the primary's sockets are all connected once it is) */
        return 0;
    int rc = lg_dial_hello(&cg->dial[0], 1);
    if (rc < 0) {
        LG_WARN("connect from %s failed: %s", path_ends(cg, 0).s, strerror(errno));
        return -1;
    }
    return rc;
}

int lg_core_connect_started(const void *handle)
{
    struct lg_connecting *cg = lg_handle_stage_get(handle);
    return cg && registry_has(cg) && cg->magic == LG_CONNECTING_MAGIC && cg->started;
}

ncclResult_t lg_core_connect_ctx(void *ctx, int dev, void *handle, void **send_comm)
{
    *send_comm = NULL;
    if (!lg_device_get(dev)) {
        LG_WARN("connect: no device %d", dev);
        return ncclInvalidArgument;
    }
    lg_core_on_stop(lg_connect_abandon_all);
    struct lg_connecting *cg = lg_handle_stage_get(handle);
    if (cg && (!registry_has(cg) || cg->magic != LG_CONNECTING_MAGIC))
        cg = NULL;
    if (!cg) {
        struct lg_handle h;
        int st = lg_handle_decode(handle, &h);
        if (st != LG_HANDLE_OK) {
            LG_WARN("connect on device %d: %s", dev, lg_handle_strerror(st));
            return ncclInvalidUsage;
        }
        struct lg_ctx *cx;
        if (lg_ctx_hold(ctx, "connect", &cx) != 0)
            return ncclInternalError;
        cg = connect_start(cx, dev, &h);
        lg_ctx_release(cx);
        if (!cg)
            return ncclSystemError;
        lg_handle_stage_set(handle, cg);
    }
    struct lg_conn *c = cg->conn;
    int rc = cg->started ? 1 : connect_progress(cg);
    if (rc > 0 && !cg->started) {
        if (lg_core_conn_ready(c) != 0)
            rc = -1;
        cg->started = rc > 0;
    }
    /* NCCL gets the comm once the transport can take it (wrap mode: its inner comms are up,
     * built by the monitor), so that its regMr registers with them, or fails, right there. */
    int usable = rc > 0 ? c->tr->usable(c, lg_now_ns()) : rc;
    if (usable == 0)
        return ncclSuccess;
    registry_remove(cg);
    lg_handle_stage_set(handle, NULL);
    int started = cg->started;
    cg->magic = 0;
    free(cg);
    /* A peer that accepted and closed before our inner comms were up: NCCL gets the comm,
     * whose test() reports the close (as accept does, and NCCL's transports). */
    int peer_closed = __atomic_load_n(&c->peer_closed, __ATOMIC_ACQUIRE);
    if (usable < 0 && started && !peer_closed) {
        LG_WARN("connect on device %d: the connection failed before its inner comms were up "
                "(%s)", dev, c->errmsg[0] ? c->errmsg : "no reason recorded");
        lg_core_close_send(c);
        return ncclSystemError;
    }
    if (usable < 0 && !started) {
        lg_conn_free(c);
        return ncclSystemError;
    }
    *send_comm = c;
    return ncclSuccess;
}

/* The process-wide part stops: free the connects NCCL never finished (lg_core_on_stop). */
static void lg_connect_abandon_all(void)
{
    pthread_mutex_lock(&lg_connecting_mu);
    struct lg_connecting *cg = lg_connecting_list;
    lg_connecting_list = NULL;
    pthread_mutex_unlock(&lg_connecting_mu);
    while (cg) {
        struct lg_connecting *next = cg->next;
        lg_conn_free(cg->conn);
        free(cg);
        cg = next;
    }
}
