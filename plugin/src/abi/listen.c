/* Listen and accept: a listen comm gets the process's shared listener of each NIC of its device
 * (acceptor.h) and a handle naming their ports and a fresh listen id. Accepted sockets
 * introduce themselves with a hello; the acceptor hands those naming this listen id to
 * file_socket, which groups them by the connector's nonce until every socket of every
 * announced path is there. The listeners outlive the listen comm (NCCL closes it right after
 * accept) while a protected connection accepted on them lives: rebuilt paths come to them
 * (monitor.c, reconnect.c). */
#include "abi/listen.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi/core.h"
#include "daemon/devices.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "runtime/ctx.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "session/acceptor.h"
#include "session/handle.h"
#include "transport/transport_select.h"

#define LG_LISTEN_MAGIC 0x4c474c49u /* "LGLI" */
#define LG_GROUP_MAX 64              /* connections being assembled on one listen comm */

struct lg_group {
    int used;
    uint64_t nonce, t0;
    int nstreams;
    uint32_t blob; /* the transport's word (lg_hello.blob) */
    int mask; /* paths announced by the primary's first data hello; 0 until then */
    int fds[LG_NPATHS][LG_MAX_STREAMS + 1]; /* [p][k]: data stream k (1..nstreams) */
    uint64_t sess[LG_NPATHS]; /* the control session each path's hellos name, and its channel */
    uint32_t chan[LG_NPATHS];
    uint32_t local_ip[LG_NPATHS]; /* our NIC each path came to (the backup: a set member) */
};

/* NICs a listen comm listens on: its primary's, then its backup set's (as many as a handle
 * names), so that a connector spreading its backups reaches any of them (proto/spread.h). */
#define LG_LISTEN_NICS (1 + LG_HANDLE_MAX_SET)

struct lg_listen {
    uint32_t magic;
    int dev;
    uint64_t listen_id;
    int npaths;
    struct lg_ctx *ctx; /* NCCL's communicator context (held), or NULL */
    int nlis;
    struct lg_listener *lis[LG_LISTEN_NICS]; /* [0] primary, [1 + k] set[k]; shared with the
                                              * connections accepted here */
    pthread_mutex_t mu;                 /* groups: filled by the acceptor, taken by accept */
    struct lg_group groups[LG_GROUP_MAX];
    struct lg_conn *pending; /* built; NCCL gets it once its transport can take it */
    uint64_t wait_ns; /* accept found nothing to hand out since then (0: it did not wait) */
    int warned;
};

static int file_socket(void *arg, const struct lg_hello *h, int fd, uint32_t local_ip,
                       uint64_t now);

/* The NIC of listener k: [0] the primary, [1 + m] member m of the backup set (a device built
 * without a set: its backup). */
static const struct lg_nic *lis_nic(const struct lg_device *d, int k)
{
    return k == 0 ? &d->nic[0] : k - 1 < d->nset ? &d->set[k - 1] : &d->nic[1];
}

/* The listener of ours that `local_ip` is (index into l->lis), for a path of `slot`: the
 * primary's NIC for slot 0, a member of the backup set for slot 1; -1 if none. */
static int lis_of(const struct lg_listen *l, const struct lg_device *d, int slot,
                  uint32_t local_ip)
{
    if (slot == 0)
        return d->nic[0].ip == local_ip ? 0 : -1;
    for (int k = 1; k < l->nlis; k++)
        if (lis_nic(d, k)->ip == local_ip)
            return k;
    return -1;
}


ncclResult_t lg_core_listen_ctx(void *ctx, int dev, void *handle, void **listen_comm)
{
    const struct lg_device *d = lg_device_get(dev);
    *listen_comm = NULL;
    if (!d) {
        LG_WARN("listen: no device %d", dev);
        return ncclInvalidArgument;
    }
    struct lg_listen *l = calloc(1, sizeof(*l));
    if (!l)
        return ncclSystemError;
    if (lg_ctx_hold(ctx, "listen", &l->ctx) != 0) {
        free(l);
        return ncclInternalError;
    }
    l->magic = LG_LISTEN_MAGIC;
    l->dev = dev;
    l->listen_id = lg_random_u64();
    l->npaths = d->has_backup ? 2 : 1;
    struct lg_handle h = {.listen_id = l->listen_id,
                          .flags = l->npaths > 1 ? LG_HANDLE_F_BACKUP : 0};
    for (int g = 0; g < LG_GROUP_MAX; g++)
        for (int p = 0; p < LG_NPATHS; p++)
            for (int k = 0; k <= LG_MAX_STREAMS; k++)
                l->groups[g].fds[p][k] = -1;
    pthread_mutex_init(&l->mu, NULL);
    /* Every member when this process's transport can carry a backup on any (spread.h). */
    int members = lg_transport_select()->any_backup_nic ? LG_MIN(d->nset, LG_HANDLE_MAX_SET) : 1;
    l->nlis = l->npaths > 1 ? 1 + LG_MAX(members, 1) : 1;
    for (int k = 0; k < l->nlis; k++) {
        const struct lg_nic *nic = lis_nic(d, k);
        uint16_t port = 0;
        l->lis[k] = lg_listener_get(nic->ip, &port);
        if (!l->lis[k]) {
            LG_WARN("listen on NIC %s (%s): %s", nic->name, lg_addr_format(nic->ip, 0).s,
                    strerror(errno));
            goto fail;
        }
        if (k < LG_NPATHS) { /* the primary and the nearest backup, as a pair's handle */
            h.ip[k] = nic->ip;
            h.port[k] = port;
            snprintf(h.nic[k], sizeof(h.nic[k]), "%s", nic->name);
        } else {
            h.flags |= LG_HANDLE_F_SET;
            h.more_ip[h.nmore] = nic->ip;
            h.more_port[h.nmore++] = port;
        }
    }
    if (lg_acceptor_register(l->listen_id, file_socket, l) != 0) {
        LG_WARN("listen on device %d: out of memory", dev);
        goto fail;
    }
    lg_handle_encode(handle, &h);
    lg_core_ref(1);
    *listen_comm = l;
    return ncclSuccess;
fail:
    for (int k = 0; k < l->nlis; k++)
        if (l->lis[k])
            lg_listener_put(l->lis[k]);
    pthread_mutex_destroy(&l->mu);
    lg_ctx_release(l->ctx);
    free(l);
    return ncclSystemError;
}

static void group_drop(struct lg_group *g)
{
    for (int p = 0; p < LG_NPATHS; p++)
        for (int k = 0; k <= LG_MAX_STREAMS; k++) {
            if (g->fds[p][k] >= 0)
                close(g->fds[p][k]);
            g->fds[p][k] = -1;
        }
    g->used = 0;
    g->mask = 0;
    memset(g->chan, 0, sizeof(g->chan));
    memset(g->local_ip, 0, sizeof(g->local_ip));
}

/* The acceptor's sink (under its lock): files a socket whose hello names this listen comm.
 * 0, or -1 to close it (not a peer of this listener, or a socket it already has). */
static int file_socket(void *arg, const struct lg_hello *h, int fd, uint32_t local_ip,
                       uint64_t now)
{
    struct lg_listen *l = arg;
    const struct lg_device *d = lg_device_get(l->dev);
    const struct lg_transport *tr = lg_transport_select();
    if (!d || h->path >= l->npaths || lis_of(l, d, h->path, local_ip) < 0 ||
        /* both ends use the same transport (both wrap an inner plugin, or neither) */
        h->transport != tr->id || !lg_transport_blob_ok(tr, h->blob))
        goto stranger;
    pthread_mutex_lock(&l->mu);
    struct lg_group *g = NULL, *free_g = NULL;
    for (int i = 0; i < LG_GROUP_MAX; i++) {
        if (l->groups[i].used && l->groups[i].nonce == h->conn_nonce)
            g = &l->groups[i];
        else if (!l->groups[i].used && !free_g)
            free_g = &l->groups[i];
    }
    if (!g && free_g) {
        g = free_g;
        g->used = 1;
        g->nonce = h->conn_nonce;
        g->t0 = now; /* the acceptor's clock, read under its lock (see lg_core_accept) */
        g->nstreams = h->nstreams;
        g->blob = h->blob;
        g->mask = 0;
    }
    int ok = g && g->nstreams == h->nstreams && g->blob == h->blob &&
             g->fds[h->path][h->stream] < 0 &&
             (!g->chan[h->path] || (g->chan[h->path] == h->chan && g->sess[h->path] == h->session));
    ok = ok && (!g->local_ip[h->path] || g->local_ip[h->path] == local_ip);
    if (ok) {
        g->fds[h->path][h->stream] = fd;
        g->sess[h->path] = h->session;
        g->chan[h->path] = h->chan;
        g->local_ip[h->path] = local_ip;
        if (h->path == 0 && h->stream == 1)
            g->mask = h->paths_mask;
    }
    pthread_mutex_unlock(&l->mu);
    if (ok)
        return 0;
stranger:
    if (!__atomic_fetch_add(&l->warned, 1, __ATOMIC_RELAXED))
        LG_WARN("accept on device %d: dropped a connection that is not a linkguard peer of this "
                "listener", l->dev);
    return -1;
}

/* The connector hung up a data socket of path p: it closed the connection (or died) after its
 * connect returned, maybe before this side saw the path's session, which goes with it. */
static int path_hung_up(const struct lg_group *g, int p)
{
    for (int k = 1; k <= g->nstreams; k++) {
        struct pollfd pfd = {.fd = g->fds[p][k], .events = POLLRDHUP};
        if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return 1;
    }
    return 0;
}

/* Every socket of every announced path is here, and so is each path's session (its socket
 * may come in after the data sockets), or the connector closed the path already: a
 * connection whose connect returned is accepted even then, as NCCL's transports accept it,
 * and its receiver sees the close afterwards. */
static int group_complete(const struct lg_listen *l, const struct lg_group *g)
{
    if (!g->used || !g->mask)
        return 0;
    const struct lg_device *d = lg_device_get(l->dev);
    for (int p = 0; p < LG_NPATHS; p++) {
        if (!(g->mask & (1 << p)))
            continue;
        for (int k = 1; k <= g->nstreams; k++)
            if (g->fds[p][k] < 0)
                return 0;
        struct lg_session *s = d ? lg_session_find(g->sess[p], g->local_ip[p]) : NULL;
        lg_session_put(s);
        if (!s && !path_hung_up(g, p))
            return 0;
    }
    return 1;
}

/* A path whose connector closed it before the accept: failed from the start, as if its
 * peer had said goodbye (the BYE went to a channel not attached yet), so the connection
 * reports the close to its first test(), quietly. */
static void path_closed_early(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    snprintf(p->why, sizeof(p->why), "closed by the peer before the accept");
    p->fail_ns = lg_now_ns();
    __atomic_store_n(&p->peer_bye, 1 + LG_BYE_CLOSE, __ATOMIC_RELAXED);
    __atomic_store_n(&p->fail_noted, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->state, LG_PATH_FAILED, __ATOMIC_RELEASE);
    __atomic_store_n(&c->peer_closed, 1, __ATOMIC_RELEASE);
    if (lg_conn_fail(c, LG_FAIL_CLOSED, ncclRemoteError, "peer closed the connection"))
        LG_INFO(NCCL_NET, "recv conn %016llx: closed by the peer before the accept",
                (unsigned long long)c->nonce);
}

static struct lg_conn *group_build(struct lg_listen *l, struct lg_group *g)
{
    const struct lg_device *d = lg_device_get(l->dev);
    struct lg_conn *c = lg_conn_new(LG_CONN_RECV, l->dev, lg_transport_select(), g->nstreams,
                                    g->blob, g->nonce);
    if (!c)
        return NULL;
    lg_fo_init(c);
    c->listen_id = l->listen_id;
    c->ctx = lg_ctx_ref(l->ctx);
    /* Each slot on the NIC its path came to (a backup: the set member the connector chose);
     * a slot without a path (a connector that adds its backup later) on the pair's NIC. */
    int lis[LG_NPATHS] = {0, l->npaths > 1 ? 1 : -1};
    for (int p = 0; p < LG_NPATHS; p++) {
        int k = g->local_ip[p] ? lis_of(l, d, p, g->local_ip[p]) : lis[p];
        const struct lg_nic *nic = k >= 0 ? lis_nic(d, k) : &d->nic[p];
        c->local_ip[p] = nic->ip;
        lg_nic_name_copy(c->nic[p], nic->name);
    }
    for (int p = 0; p < LG_NPATHS; p++) {
        if (!(g->mask & (1 << p)))
            continue;
        struct lg_path *path = lg_path_new(c, p, c->nic[p], lg_sock_peer(g->fds[p][1]).s);
        if (!path) {
            lg_conn_free(c);
            return NULL;
        }
        if (lg_path_join(path, g->sess[p], g->chan[p]) != 0)
            path_closed_early(path); /* ended with the connector's close: over before it starts */
        for (int k = 1; k <= g->nstreams; k++) {
            int fd = g->fds[p][k];
            g->fds[p][k] = -1;
            lg_sock_setup_accepted(fd, LG_SOCK_DATA);
            path->data[k - 1].task.fd = fd;
        }
    }
    group_drop(g); /* sockets of paths the connector gave up on */
    /* A connector that gave its backup up adds it later (it knows our address for it). */
    c->upgradable = l->npaths > 1 && !c->paths[1];
    if ((c->paths[0] && c->paths[1]) || c->upgradable) /* rebuilt paths come to these */
        for (int k = 0; k < l->nlis; k++) {
            lg_listener_ref(l->lis[k]);
            c->listener[k] = l->lis[k];
        }
    return c;
}

ncclResult_t lg_core_accept(void *listen_comm, void **recv_comm)
{
    struct lg_listen *l = listen_comm;
    *recv_comm = NULL;
    if (!l || l->magic != LG_LISTEN_MAGIC) {
        LG_WARN("accept: not a linkguard listen comm");
        return ncclInternalError;
    }
    uint64_t timeout = (uint64_t)lg_params.connect_timeout_ms * 1000000ull;
    if (l->pending) { /* wrap mode: regMr must find the inner comms there (inner_endpoint.h) */
        struct lg_conn *c = l->pending;
        int usable = c->tr->usable(c, lg_now_ns());
        if (usable == 0)
            return ncclSuccess;
        l->pending = NULL;
        /* A peer that closed since its connect returned: NCCL gets the comm, whose test()
         * reports the close (as native mode and NCCL's transports do). */
        if (usable < 0 && !__atomic_load_n(&c->peer_closed, __ATOMIC_ACQUIRE)) {
            LG_WARN("accept on device %d: the connection failed before its inner comms were up "
                    "(%s)", l->dev, c->errmsg[0] ? c->errmsg : "no reason recorded");
            lg_core_close_recv(c);
            return ncclSystemError;
        }
        l->wait_ns = 0;
        *recv_comm = c;
        return ncclSuccess;
    }
    lg_acceptor_progress();
    struct lg_group ready = {0};
    int dropped = 0, assembling = 0;
    pthread_mutex_lock(&l->mu);
    /* Read under the lock: groups are stamped by whichever thread ran the acceptor, so an
     * earlier reading could lie before their t0 and make now - t0 wrap. */
    uint64_t now = lg_now_ns();
    for (int i = 0; i < LG_GROUP_MAX && !ready.used; i++) {
        struct lg_group *g = &l->groups[i];
        if (group_complete(l, g)) {
            ready = *g; /* taken out: built below, outside the lock the acceptor's sink takes */
            memset(g->fds, -1, sizeof(g->fds));
            memset(g->chan, 0, sizeof(g->chan));
            g->used = g->mask = 0;
        } else if (g->used && now - g->t0 > timeout) {
            char have[2 * (LG_MAX_STREAMS + 2) + 1];
            int n = 0;
            for (int p = 0; p < LG_NPATHS; p++) {
                for (int k = 1; k <= g->nstreams; k++)
                    have[n++] = g->fds[p][k] >= 0 ? '+' : '-';
                have[n++] = p ? 0 : '/';
            }
            LG_WARN("accept on device %d: connection %016llx incomplete after %lld ms (paths "
                    "announced %d, sockets %s), dropped; the accept fails",
                    l->dev, (unsigned long long)g->nonce, (long long)lg_params.connect_timeout_ms,
                    g->mask, have);
            group_drop(g);
            dropped = 1;
        } else if (g->used) {
            assembling = 1;
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (dropped) /* that connection can never be accepted: NCCL must not wait for it */
        return ncclSystemError;
    if (!ready.used) {
        /* Nothing came at all: the peer's connect never reached this listener. */
        if (!l->wait_ns || assembling)
            l->wait_ns = now;
        else if (now - l->wait_ns > timeout) {
            LG_WARN("accept on device %d: no connection came to this listen comm (NIC %s) "
                    "in %lld ms (LINKGUARD_CONNECT_TIMEOUT_MS); the accept fails",
                    l->dev, lg_device_get(l->dev)->nic[0].name,
                    (long long)lg_params.connect_timeout_ms);
            l->wait_ns = 0;
            return ncclSystemError;
        }
        return ncclSuccess;
    }
    struct lg_conn *c = group_build(l, &ready);
    if (!c)
        group_drop(&ready); /* the sockets not yet handed to a path */
    if (!c || lg_core_conn_ready(c) != 0) {
        if (c)
            lg_conn_free(c);
        LG_WARN("accept on device %d: cannot set up the connection", l->dev);
        return ncclSystemError;
    }
    l->pending = c; /* handed over once the transport can take it (below) */
    return lg_core_accept(l, recv_comm);
}

ncclResult_t lg_core_close_listen(void *listen_comm)
{
    struct lg_listen *l = listen_comm;
    if (!l || l->magic != LG_LISTEN_MAGIC)
        return ncclInternalError;
    lg_acceptor_unregister(l->listen_id); /* no more sockets filed here */
    for (int k = 0; k < l->nlis; k++)
        lg_listener_put(l->lis[k]); /* stays open while its connections hold it */
    if (l->pending) /* never handed to NCCL */
        lg_core_close_recv(l->pending);
    for (int i = 0; i < LG_GROUP_MAX; i++)
        if (l->groups[i].used)
            group_drop(&l->groups[i]);
    pthread_mutex_destroy(&l->mu);
    lg_ctx_release(l->ctx);
    l->magic = 0;
    free(l);
    lg_core_ref(-1);
    return ncclSuccess;
}
