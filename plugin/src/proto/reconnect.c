/* Rebuilding a path: the sender (connector) takes a channel on a control session to the
 * receiver's listening socket for that NIC (a new session when the old one is gone or silent)
 * and connects fresh data sockets there with REJOIN hellos naming it; the receiver's monitor
 * groups them by connection nonce and generation, builds the path and answers READY on its
 * channel. */
#include "proto/reconnect.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/devices.h"
#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/spread.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"

/* Sender rebuilds connecting in this process (monitor thread only): admitted
 * LINKGUARD_REJOIN_BUDGET at a time. */
static int tx_inflight; /* rebuilds under way (atomic: a close aborts its own) */

static int *sock_fd(struct lg_path *p, int k) /* k = 1..nstreams */
{
    return &p->data[k - 1].task.fd;
}

void lg_rejoin_publish(struct lg_conn *c, int slot, struct lg_path *p)
{
    struct lg_path *old = c->paths[slot];
    if (old)
        lg_path_retire(old, 1);
    pthread_mutex_lock(&c->mu);
    __atomic_store_n(&c->paths[slot], p, __ATOMIC_SEQ_CST);
    if (c->active_path == old)
        c->active_path = NULL; /* no longer the committed path: entered by a new epoch */
    pthread_mutex_unlock(&c->mu);
    /* NCCL's thread may still hold the old pointer inside one call: wait it out. */
    lg_conn_quiesce_inline(c);
    lg_path_free(old);
    if (c->paths[0] && c->paths[1] && !__atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE)) {
        /* A connection built without its backup has it now. Its primary's control channel
         * was quiet until now (no heartbeats while unprotected; in wrap mode no data on our
         * sockets either): silence counts from here. */
        uint64_t now_ns = lg_now_ns();
        __atomic_store_n(&c->paths[0]->last_rx_ns, now_ns, __ATOMIC_RELAXED);
        __atomic_store_n(&c->paths[0]->prev_rx_ns, now_ns, __ATOMIC_RELAXED);
        c->upgradable = 0;
        __atomic_store_n(&c->protected_, 1, __ATOMIC_RELEASE);
        LG_INFO(NCCL_NET, "%s conn %016llx: backup path on NIC %s built after the start; the "
                "connection is protected from now on", c->kind == LG_CONN_SEND ? "send" : "recv",
                (unsigned long long)c->nonce, p->nic);
    }
}

void lg_rejoin_abort(struct lg_conn *c, int slot)
{
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    if (!rj->path)
        return;
    if (c->kind == LG_CONN_SEND)
        __atomic_sub_fetch(&tx_inflight, 1, __ATOMIC_RELAXED);
    lg_path_retire(rj->path, 0);
    lg_path_free(rj->path);
    memset(rj, 0, sizeof(*rj));
}

/* ---- sender ------------------------------------------------------------------------------ */

int lg_rejoin_tx_start(struct lg_conn *c, int slot, uint64_t now)
{
    const struct lg_device *d = lg_device_get(c->dev);
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    if (!d || rj->path || !c->peer_ip[slot])
        return -1;
    if (__atomic_load_n(&tx_inflight, __ATOMIC_RELAXED) >= lg_params.rejoin_budget)
        return 1;
    struct lg_path *p = lg_path_alloc(c, slot, c->nic[slot],
                                      lg_addr_format(c->peer_ip[slot], c->peer_port[slot]).s);
    if (!p)
        return -1;
    memset(rj, 0, sizeof(*rj));
    rj->path = p;
    __atomic_add_fetch(&tx_inflight, 1, __ATOMIC_RELAXED);
    rj->gen = p->gen = ++c->fo.slot[slot].next_gen;
    rj->t0 = now;
    if (lg_path_dial(p, &rj->dial, (uint8_t)(1 | (1 << slot)), LG_HELLO_F_REJOIN, 0) != 0) {
        int no_session = rj->dial.part == LG_DIAL_SESSION;
        LG_TRACE("send conn %016llx: rebuild of path %d: %s%s%s", (unsigned long long)c->nonce,
                 slot, no_session ? "no control session (" : "", strerror(errno),
                 no_session ? ")" : "");
        lg_rejoin_abort(c, slot);
        return -1;
    }
    return 0;
}

int lg_rejoin_tx_progress(struct lg_conn *c, int slot, uint64_t now, char *why, size_t len)
{
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    struct lg_path *p = rj->path;
    if (!p)
        return -1;
    if (now - rj->t0 > (uint64_t)lg_params.rejoin_timeout_ms * 1000000ull) {
        snprintf(why, len, "%s after %lld ms", p->started ? "no READY" : "not connected",
                 (long long)lg_params.rejoin_timeout_ms);
        lg_rejoin_abort(c, slot);
        return -1;
    }
    if (!p->started) {
        int rc = lg_dial_step(&rj->dial, 0);
        if (rc < 0) {
            static const char *const part[] = {[LG_DIAL_SESSION] = "control session",
                                               [LG_DIAL_CONNECT] = "connect",
                                               [LG_DIAL_HELLO] = "hello"};
            snprintf(why, len, "%s: %s", part[rj->dial.part], strerror(errno));
            lg_rejoin_abort(c, slot);
            return -1;
        }
        if (rc == 0)
            return 0;
        if (lg_path_start(p) != 0) {
            snprintf(why, len, "cannot register its sockets");
            lg_rejoin_abort(c, slot);
            return -1;
        }
    }
    if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != LG_PATH_UP) {
        snprintf(why, len, "%s", __atomic_load_n(&p->fail_noted, __ATOMIC_ACQUIRE) && p->why[0]
                                     ? p->why : "refused by the peer");
        lg_rejoin_abort(c, slot);
        return -1;
    }
    /* READY says the receiver took the path (wrap mode: accepted its inner comm); ours must
     * be there too. */
    if (!__atomic_load_n(&p->ready, __ATOMIC_ACQUIRE) || !c->tr->carries(p))
        return 0;
    rj->path = NULL;
    __atomic_sub_fetch(&tx_inflight, 1, __ATOMIC_RELAXED);
    lg_rejoin_publish(c, slot, p);
    return 1;
}

/* ---- receiver ---------------------------------------------------------------------------- */

static void rx_build(struct lg_conn *c, int slot, uint64_t now)
{
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    struct lg_path *p = rj->path;
    uint32_t state = lg_health_state(c->fo.slot[slot].nic_idx, NULL);
    if (!lg_health_usable(state)) {
        /* Our daemon keeps this NIC out (hold-down, damping, drain): refuse; the sender
         * hears it from our heartbeats and tries again once we say it is usable. */
        LG_TRACE("recv conn %016llx: refused a rebuilt path %d (NIC %s not usable)",
                 (unsigned long long)c->nonce, slot, p->nic);
        lg_rejoin_abort(c, slot);
        return;
    }
    if (lg_path_join(p, rj->sess, rj->chan) != 0) {
        /* Its session's socket may come in after the data sockets: the monitor tries again
         * (lg_rejoin_rx_step) until the rebuild times out. */
        return;
    }
    rj->path = NULL;
    for (int k = 1; k <= c->nstreams; k++)
        lg_sock_setup_accepted(*sock_fd(p, k), LG_SOCK_DATA);
    struct lg_path *old = c->paths[slot];
    if (old && lg_path_up(old))
        lg_conn_path_failed(old, 0, "replaced by a rebuilt path");
    if (lg_path_start(p) != 0) {
        lg_path_retire(p, 0);
        lg_path_free(p);
        return;
    }
    lg_rejoin_publish(c, slot, p);
    c->fo.slot[slot].up_since_ns = now;
    c->fo.slot[slot].noted = 0;
    c->fo.hb_force = 1;
    c->tr->rebuilt(p); /* READY (wrap mode: once the inner comm is accepted) */
    LG_INFO(NCCL_NET, "recv conn %016llx: %s path on NIC %s rebuilt (gen %u) from %s",
            (unsigned long long)c->nonce, slot ? "backup" : "primary", p->nic, p->gen, p->peer);
}

int lg_rejoin_file(struct lg_conn *c, const struct lg_hello *h, int fd, uint32_t local_ip,
                   uint64_t now)
{
    /* It must come through our listener for that slot's NIC, for a connection that may be
     * rebuilt, and match what the connection was built with. */
    const struct lg_nic *moved = h->path == 1 && local_ip != c->local_ip[1]
                                     ? lg_spread_member(c, local_ip) : NULL;
    if ((!__atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE) && !c->upgradable) ||
        __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) ||
        (local_ip != c->local_ip[h->path] && !moved) ||
        h->transport != c->tr->id || h->nstreams != c->nstreams || h->blob != c->blob ||
        h->stream > c->nstreams || h->stream < 1)
        return -1;
    int slot = h->path;
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    if (moved) { /* the connector moved its backup: the slot is on that member from now on */
        c->local_ip[1] = local_ip;
        lg_nic_name_copy(c->nic[1], moved->name);
        c->fo.slot[1].nic_idx = lg_health_find(moved->name); /* its daemon state, not the old's */
        c->fo.slot[1].local_state = lg_health_state(c->fo.slot[1].nic_idx, NULL);
    }
    if (rj->path && rj->gen != h->gen) {
        if (h->gen < rj->gen)
            return -1; /* an abandoned attempt */
        lg_rejoin_abort(c, slot);
    }
    if (!rj->path) {
        rj->path = lg_path_alloc(c, slot, c->nic[slot], lg_sock_peer(fd).s);
        if (!rj->path)
            return -1;
        rj->path->gen = rj->gen = h->gen;
        rj->t0 = now;
        rj->nfds = 0;
        rj->sess = h->session;
        rj->chan = h->chan;
    }
    if (rj->sess != h->session || rj->chan != h->chan)
        return -1; /* the sockets of one path name one channel */
    int *slot_fd = sock_fd(rj->path, h->stream);
    if (*slot_fd >= 0)
        return -1;
    *slot_fd = fd;
    if (++rj->nfds == c->nstreams)
        rx_build(c, slot, now);
    return 0;
}

void lg_rejoin_rx_step(struct lg_conn *c, int slot, uint64_t now)
{
    struct lg_rejoin *rj = &c->fo.slot[slot].rj;
    if (rj->path && now - rj->t0 > LG_MS(lg_params.rejoin_timeout_ms))
        lg_rejoin_abort(c, slot);
    else if (rj->path && rj->nfds == c->nstreams)
        rx_build(c, slot, now);
}
