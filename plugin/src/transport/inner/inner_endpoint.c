/* Wrap mode, phase 2: paths whose data goes through the inner plugin (see inner_endpoint.h). */
#include "transport/inner/inner_endpoint.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/upcall.h"
#include "runtime/ctx.h"
#include "runtime/le.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"

#define LG_FLUSH_MAGIC 0x4c47464cu /* "LGFL" */
#define LG_INNER_PARTS_ALL ((1u << LG_INNER_PARTS) - 1)

_Static_assert(LG_INNER_PARTS * LG_INNER_PART_BYTES == NCCL_NET_HANDLE_MAXSIZE,
               "INNER frames carry a whole NCCL handle");

/* The inner context a connection's comms are made in: its NCCL communicator's, else the one
 * wrap mode was started with (NCCL before 2.28 has no contexts). */
static struct lg_inner_ctx *conn_ctx(const struct lg_conn *c)
{
    struct lg_inner_ctx *x = lg_ctx_inner(c->ctx);
    return x ? x : lg_inner_devs->ctx;
}

int lg_inner_ep_carries(const struct lg_path *p)
{
    return lg_inner_path_carries(lg_inner_tp(p->tp));
}

int lg_inner_ep_conn_usable(struct lg_conn *c, uint64_t now)
{
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    if (!e->since)
        e->since = now;
    if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE))
        return -1;
    uint32_t ph = lg_conn_enter(c); /* path pointers: the monitor may replace paths */
    pthread_mutex_lock(&c->mu);
    struct lg_path *a = c->active_path;
    pthread_mutex_unlock(&c->mu);
    /* Not yet: a handshake or a failover is under way (the monitor fails what stays stuck). */
    int usable = a && lg_path_up(a) && lg_inner_ep_carries(a);
    int grace_over = now - e->since > (uint64_t)lg_params.backup_grace_ms * 1000000ull;
    for (int i = 0; i < LG_NPATHS && usable && !grace_over; i++) {
        struct lg_path *p = __atomic_load_n(&c->paths[i], __ATOMIC_ACQUIRE);
        if (p && p != a && lg_path_up(p) && !lg_inner_ep_carries(p))
            usable = 0;
    }
    lg_conn_exit(c, ph);
    return usable;
}

/* ---- registrations ------------------------------------------------------------------------ */

/* Under mr_mu: registers `mr` on every path whose comm is there. */
static ncclResult_t reg_on_paths(struct lg_conn *c, struct lg_inner_mr *mr)
{
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = c->paths[i];
        if (!p || !lg_inner_ep_carries(p))
            continue;
        ncclResult_t rc = lg_inner_mr_add(lg_inner_devs->in, mr, i, lg_inner_tp(p->tp)->comm);
        if (rc != ncclSuccess)
            return rc;
    }
    return ncclSuccess;
}

ncclResult_t lg_inner_ep_reg_mr(struct lg_conn *c, void *data, size_t size, int type,
                            uint64_t offset, int fd, struct lg_inner_mr **out)
{
    void *none[LG_INNER_NPATHS] = {NULL, NULL};
    struct lg_inner_mr *mr;
    /* An empty registration first (keeps the DMA-BUF fd), then the paths under the lock. */
    ncclResult_t rc = fd >= 0 ? lg_inner_mr_reg_dmabuf(lg_inner_devs->in, none, data, size, type,
                                                       offset, fd, &mr)
                              : lg_inner_mr_reg(lg_inner_devs->in, none, data, size, type, &mr);
    if (rc != ncclSuccess)
        return rc;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    pthread_mutex_lock(&e->mr_mu);
    rc = reg_on_paths(c, mr);
    if (rc == ncclSuccess) {
        mr->next = e->mrs;
        e->mrs = mr;
    }
    pthread_mutex_unlock(&e->mr_mu);
    if (rc != ncclSuccess) {
        lg_inner_mr_dereg(lg_inner_devs->in, mr);
        return rc;
    }
    *out = mr;
    return ncclSuccess;
}

ncclResult_t lg_inner_ep_dereg_mr(struct lg_conn *c, struct lg_inner_mr *mr)
{
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    /* A request NCCL posted with it may still be posted again (a replay after a switch):
     * that post gets no registration (the inner refuses it, and the path fails over) rather
     * than a freed one. Under wmu, so no pump is reading the slot meanwhile. */
    pthread_mutex_lock(&e->wmu);
    for (int k = 0; k < LG_WINDOW; k++) {
        struct lg_inner_mr *was = mr;
        __atomic_compare_exchange_n(&e->req[k].imr, &was, NULL, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&e->wmu);
    pthread_mutex_lock(&e->mr_mu);
    for (struct lg_inner_mr **pp = &e->mrs; *pp; pp = &(*pp)->next)
        if (*pp == mr) {
            *pp = mr->next;
            break;
        }
    ncclResult_t rc = lg_inner_mr_dereg(lg_inner_devs->in, mr);
    pthread_mutex_unlock(&e->mr_mu);
    return rc;
}

/* ---- data (NCCL's thread, under wmu) --------------------------------------------------- */

static void inner_failed(struct lg_path *p, const char *call, ncclResult_t rc)
{
    char why[96];
    snprintf(why, sizeof(why), "inner %s failed: %s", call, lg_inner_strerror(rc));
    lg_conn_path_failed(p, 0, why);
}

/* One inner test(): 1 done, 0 not yet, -1 failed (the path fails over). */
static int inner_test(struct lg_path *p, void *ireq, int *size)
{
    struct lg_inner *in = lg_inner_devs->in;
    int done = 0;
    ncclResult_t rc = in->ops->test(in, ireq, &done, size);
    if (rc != ncclSuccess) {
        inner_failed(p, "test", rc);
        return -1;
    }
    return done;
}

/* Under wmu: the inner no longer reads message seq's buffer. A kept send's replay reads its
 * copy from now on, so NCCL may have the buffer back (released before the writer's hold goes,
 * which test() reads after). */
static void tx_released(struct lg_conn *c, uint64_t seq)
{
    struct lg_req *r = &c->reqs[seq % LG_WINDOW];
    if (r->kept)
        __atomic_store_n(&r->released, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&r->writers, 0, __ATOMIC_RELEASE);
}

/* Under wmu: inner sends complete in posted order. With LINKGUARD_INNER_PLACED an inner
 * completion means the data is in the receiver's buffer, so it counts as an acknowledgement
 * (the NCCL send completes without waiting for ours); during a switch, once the receiver
 * has been told how many it must hold (lg_inner_ep_tx_switching), none completes any more. */
static int tx_complete(struct lg_conn *c, struct lg_inner_conn *e, struct lg_path *p)
{
    pthread_mutex_lock(&c->mu);
    uint64_t end = c->cursor_seq;
    int frozen = e->frozen && c->hold != LG_HOLD_NONE;
    if (c->hold == LG_HOLD_NONE)
        e->frozen = 0;
    pthread_mutex_unlock(&c->mu);
    for (; !frozen && e->test_seq < end; e->test_seq++) {
        struct lg_inner_req *ir = &e->req[e->test_seq % LG_WINDOW];
        if (ir->ireq) {
            int done = inner_test(p, ir->ireq, NULL);
            if (done < 0)
                return -1;
            if (!done)
                break;
            ir->ireq = NULL;
            tx_released(c, e->test_seq);
        }
    }
    /* Read after the tests: a completion seen before a GROUPED was taken was of a single
     * receive (the receiver posts its groups only once our answer, sent after, is in). */
    if (lg_inner_ep_placed(e)) {
        pthread_mutex_lock(&c->mu);
        if (e->test_seq > __atomic_load_n(&c->acked, __ATOMIC_RELAXED))
            __atomic_store_n(&c->acked, e->test_seq, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->mu);
    }
    return 0;
}

void lg_inner_ep_tx_switching(struct lg_conn *c, struct lg_path *target)
{
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    if (!lg_inner_ep_placed(e))
        return;
    pthread_mutex_lock(&e->wmu);
    pthread_mutex_lock(&c->mu);
    e->frozen = 1;
    uint64_t delivered = __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&e->wmu);
    struct lg_ctrl f = {.type = LG_CTRL_DELIVERED, .value = delivered};
    lg_path_ctrl_send(target, &f);
}

/* Under wmu: the handle on path p of slot r's copy buffer, registered at its first replay
 * there (a replay is rare; the buffer stays put: window.c allocates it whole once). The
 * registration joins the connection's list, so a fence drops it with the comm and a rebuilt
 * path registers it again here. NULL if the inner refuses (the path fails over). */
static void *copy_handle(struct lg_conn *c, struct lg_inner_conn *e, struct lg_path *p,
                         const struct lg_req *r, struct lg_inner_req *ir)
{
    struct lg_inner *in = lg_inner_devs->in;
    void *comm = lg_inner_tp(p->tp)->comm;
    void *none[LG_INNER_NPATHS] = {NULL, NULL};
    pthread_mutex_lock(&e->mr_mu);
    if (!ir->copy_mr &&
        lg_inner_mr_reg(in, none, r->copy, r->copy_cap, NCCL_PTR_HOST, &ir->copy_mr) ==
            ncclSuccess) {
        ir->copy_mr->next = e->mrs;
        e->mrs = ir->copy_mr;
    }
    struct lg_inner_mr *mr = ir->copy_mr;
    if (mr && mr->comm[p->index] != comm &&
        (lg_inner_mr_drop(in, mr, p->index) != ncclSuccess ||
         lg_inner_mr_add(in, mr, p->index, comm) != ncclSuccess))
        mr = NULL;
    pthread_mutex_unlock(&e->mr_mu);
    if (!mr)
        LG_WARN("send conn %016llx: the inner plugin refused to register the copy of message "
                "#%llu for its replay", (unsigned long long)c->nonce,
                (unsigned long long)r->seq);
    return lg_inner_mr_handle(mr, p->index);
}

static void tx_pump(struct lg_conn *c, struct lg_inner_conn *e, struct lg_path *p)
{
    struct lg_inner *in = lg_inner_devs->in;
    void *comm = lg_inner_tp(p->tp)->comm;
    if (tx_complete(c, e, p) != 0)
        return;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        uint64_t seq = c->cursor_seq;
        int go = c->hold == LG_HOLD_NONE && seq < __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&c->mu);
        if (!go)
            return;
        struct lg_req *r = &c->reqs[seq % LG_WINDOW];
        struct lg_inner_req *ir = &e->req[seq % LG_WINDOW];
        void *ireq = NULL;
        /* The inner reads the buffer until its send completes: completion waits for it. The
         * message counts as sent (acks are checked against the cursor) before the inner can
         * deliver it, so an honest ack never beats the cursor. */
        __atomic_store_n(&r->writers, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&c->mu);
        c->cursor_seq = seq + 1;
        pthread_mutex_unlock(&c->mu);
        /* NCCL's buffer with its registration, or a released kept send's copy with ours. */
        int copy = r->kept && __atomic_load_n(&r->released, __ATOMIC_ACQUIRE);
        void *mh = copy ? copy_handle(c, e, p, r, ir)
                        : lg_inner_mr_handle(__atomic_load_n(&ir->imr, __ATOMIC_ACQUIRE),
                                             p->index);
        ncclResult_t rc = copy && !mh ? ncclSystemError
                                      : in->ops->isend(in, comm, copy ? r->copy : (void *)r->data,
                                                       r->size, r->tag, mh, NULL, &ireq);
        if (rc != ncclSuccess || !ireq) {
            pthread_mutex_lock(&c->mu);
            c->cursor_seq = seq;
            int lied = __atomic_load_n(&c->acked, __ATOMIC_RELAXED) > seq;
            pthread_mutex_unlock(&c->mu);
            if (lied) {
                /* Acked before it was posted: keep the writer's hold, so the send never
                 * completes and NCCL never reuses a buffer we might still post. */
                lg_conn_peer_lied(c, "ACK for message #%llu before it was sent",
                                  (unsigned long long)seq);
                return;
            }
            __atomic_store_n(&r->writers, 0, __ATOMIC_RELEASE);
            if (rc != ncclSuccess)
                inner_failed(p, "isend", rc);
            return; /* NULL: the inner's back-pressure, try again at the next call */
        }
        ir->ireq = ireq;
        /* A small send we could not keep (GPU memory): our receiver batches the acks of
         * that size (KEEPS), so this one asks for its own (lg_inner_ep_pump, once unlocked). */
        if (!r->kept && r->size <= (size_t)lg_params.send_copy &&
            __atomic_load_n(&e->keeps_told, __ATOMIC_ACQUIRE))
            e->ask_upto = seq + 1;
    }
}

/* Under wmu: completes, in posted order, the inner receives on p that are done. A grouped
 * receive is one inner irecv of all its buffers, held by its head slot: the inner plugin
 * matches the sends to them by tag; it completes whole, so test_seq and post_seq stay on
 * group boundaries and a switch re-posts whole groups. 0, or -1 (the path failed). */
static int rx_complete(struct lg_conn *c, struct lg_inner_conn *e, struct lg_path *p)
{
    while (e->test_seq < e->post_seq) {
        struct lg_req *r = &c->reqs[e->test_seq % LG_WINDOW];
        struct lg_inner_req *ir = &e->req[e->test_seq % LG_WINDOW];
        int n = r->g_n, sizes[LG_MAX_RECVS] = {0};
        int done = inner_test(p, ir->ireq, sizes);
        if (done < 0)
            return -1;
        if (!done)
            break;
        ir->ireq = NULL;
        for (int i = 0; i < n; i++)
            if (sizes[i] < 0 || (size_t)sizes[i] > r->sub[i].cap) {
                lg_conn_path_failed(p, 0, "inner receive completed with a bad size");
                return -1;
            }
        for (int i = 0; i < n; i++) {
            struct lg_req *m = &c->reqs[(r->seq + (uint64_t)i) % LG_WINDOW];
            e->req[(r->seq + (uint64_t)i) % LG_WINDOW].slot = p->index; /* its flush: that NIC */
            __atomic_store_n(&m->total, (uint64_t)sizes[i], __ATOMIC_RELAXED);
            __atomic_store_n(&m->placed, (uint64_t)sizes[i], __ATOMIC_RELAXED);
            uint64_t keeps = __atomic_load_n(&e->peer_keeps, __ATOMIC_ACQUIRE);
            int placed = __atomic_load_n(&e->peer_placed, __ATOMIC_ACQUIRE) &&
                         __atomic_load_n(&e->grouped, __ATOMIC_ACQUIRE) != LG_GROUPED_ANSWERED;
            int lazy = placed || (keeps && (uint64_t)sizes[i] <= keeps); /* waits for no ack */
            if (lg_recv_complete(p, m, (uint64_t)sizes[i], lazy) != 0)
                return -1;
        }
        e->test_seq += (uint64_t)n;
    }
    return 0;
}

void lg_inner_ep_rx_hold(struct lg_conn *c, struct lg_path *old, uint64_t delivered)
{
    /* The sender's inner plugin placed every message below `delivered` and NCCL may have
     * reused those send buffers: they cannot be sent again, so their receives must be
     * complete before the old comm is closed. Their completions are due (placed before the
     * sender saw them complete); wait for them a bounded time. */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    uint64_t t0 = lg_now_ns(), limit = (uint64_t)lg_params.switch_timeout_ms * 1000000ull;
    while (old && __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) < delivered &&
           old == c->active_path && lg_inner_ep_carries(old) && lg_now_ns() - t0 < limit) {
        lg_inner_path_calls(1);
        int rc = rx_complete(c, e, old);
        lg_inner_path_calls(0);
        if (rc != 0)
            break;
        if (__atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) < delivered)
            sched_yield();
    }
}

/* How long a receiver completes what a closing sender's inner plugin delivered: those
 * completions are due (placed before the sender saw them), so a short bound suffices. */
#define LG_CLOSE_DRAIN_MS 200

void lg_inner_ep_drain_delivered(struct lg_conn *c, uint64_t delivered)
{
    /* On the session's reader, which holds the path busy: wmu only by trylock (its holder may
     * wait for that path), never past the bound. */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    if (delivered > posted)
        delivered = posted;
    uint64_t t0 = lg_now_ns();
    while (__atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) < delivered &&
           lg_now_ns() - t0 < LG_MS(LG_CLOSE_DRAIN_MS)) {
        if (pthread_mutex_trylock(&e->wmu) == 0) {
            uint32_t ph = lg_conn_enter(c);
            pthread_mutex_lock(&c->mu);
            struct lg_path *p = c->active_path;
            pthread_mutex_unlock(&c->mu);
            int rc = 0;
            if (p && lg_path_up(p) && lg_inner_ep_carries(p)) {
                lg_inner_path_calls(1);
                rc = rx_complete(c, e, p);
                lg_inner_path_calls(0);
            }
            lg_conn_exit(c, ph);
            pthread_mutex_unlock(&e->wmu);
            if (rc != 0 || !p || !lg_path_up(p))
                return;
        }
        if (__atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) < delivered)
            sched_yield();
    }
}

/* Under wmu, a group to post: 1 once the sender answered GROUPED (wire.h); else asks (again
 * each heartbeat period: a question or answer may be lost with a path), and the group, with
 * every receive behind it, waits. */
static int group_may_go(struct lg_inner_conn *e)
{
    int st = LG_GROUPED_NONE;
    if (__atomic_compare_exchange_n(&e->grouped, &st, LG_GROUPED_ASKED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        e->grouped_asked_ns = 0;
    else if (st == LG_GROUPED_ANSWERED)
        return 1;
    uint64_t now = lg_now_ns();
    if (now - e->grouped_asked_ns >= LG_MS(lg_params.heartbeat_ms)) {
        e->grouped_asked_ns = now;
        e->grouped_ask = 1;
    }
    return 0;
}

static void rx_pump(struct lg_conn *c, struct lg_inner_conn *e, struct lg_path *p)
{
    struct lg_inner *in = lg_inner_devs->in;
    if (rx_complete(c, e, p) != 0)
        return;
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    while (e->post_seq < posted) {
        struct lg_req *r = &c->reqs[e->post_seq % LG_WINDOW];
        uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
        if (r->seq != e->post_seq || !(st & LG_REQ_POSTED) || (st & LG_REQ_DONE) || r->g_n < 1)
            break;
        if (r->g_n > 1 && !group_may_go(e))
            break;
        void *bufs[LG_MAX_RECVS], *mhs[LG_MAX_RECVS], *ireq = NULL;
        size_t caps[LG_MAX_RECVS];
        int tags[LG_MAX_RECVS];
        for (int i = 0; i < r->g_n; i++) {
            bufs[i] = r->sub[i].buf;
            caps[i] = r->sub[i].cap;
            tags[i] = r->sub[i].tag;
            /* sub-receive i is message r->seq + i: its slot holds that buffer's registration */
            struct lg_inner_mr **imr = &e->req[(r->seq + (uint64_t)i) % LG_WINDOW].imr;
            mhs[i] = lg_inner_mr_handle(__atomic_load_n(imr, __ATOMIC_ACQUIRE), p->index);
        }
        /* Never the optional-completion marker: a receive completes only once placed. */
        ncclResult_t rc = in->ops->irecv(in, lg_inner_tp(p->tp)->comm, r->g_n, bufs, caps, tags,
                                         mhs, NULL, &ireq);
        if (rc != ncclSuccess) {
            inner_failed(p, "irecv", rc);
            return;
        }
        if (!ireq)
            break;
        e->req[e->post_seq % LG_WINDOW].ireq = ireq;
        e->post_seq += (uint64_t)r->g_n;
    }
    /* The acks a sender waits for go now; those of messages it completed without one
     * (placed, or kept: lg_recv_complete's `kept`) when due (window.c). */
    lg_recv_flush_due(p);
}

void lg_inner_ep_ack_asked(struct lg_path *p, uint64_t n)
{
    if (__atomic_load_n(&lg_inner_ep(p->conn->ep)->peer_keeps, __ATOMIC_ACQUIRE))
        lg_recv_ack_asked(p, n); /* else every ack goes at once anyway */
}

void lg_inner_ep_pump(struct lg_conn *c)
{
    /* The monitor holds wmu only across a commit or a fence: skip a beat rather than wait. */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    if (pthread_mutex_trylock(&e->wmu) != 0)
        return;
    uint32_t ph = lg_conn_enter(c);
    pthread_mutex_lock(&c->mu);
    struct lg_path *p = c->active_path;
    pthread_mutex_unlock(&c->mu);
    if (p && lg_path_up(p) && lg_inner_ep_carries(p)) {
        lg_inner_path_calls(1);
        if (c->kind == LG_CONN_SEND)
            tx_pump(c, e, p);
        else
            rx_pump(c, e, p);
        lg_inner_path_calls(0);
    }
    lg_conn_exit(c, ph);
    uint64_t ask = e->ask_upto;
    int ask_grouped = e->grouped_ask;
    e->ask_upto = 0;
    e->grouped_ask = 0;
    pthread_mutex_unlock(&e->wmu);
    if (ask)
        lg_send_ask_ack_upto(c, ask);
    if (ask_grouped)
        lg_conn_ctrl_out(c, &(struct lg_ctrl){.type = LG_CTRL_GROUPED});
}

/* ---- switches (monitor) ------------------------------------------------------------------ */

void lg_inner_ep_tx_forget(struct lg_conn *c)
{
    /* Every inner send went to the path being left (or to one fenced before): drop them.
     * The rewound cursor posts the unacknowledged ones again on the new path. */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    for (uint64_t s = e->test_seq; s < e->test_seq + LG_WINDOW; s++) {
        struct lg_inner_req *ir = &e->req[s % LG_WINDOW];
        if (ir->ireq) {
            ir->ireq = NULL;
            tx_released(c, s);
        }
    }
    e->test_seq = c->cursor_seq;
    e->frozen = 0; /* the switch is over */
}

void lg_inner_ep_rx_forget(struct lg_conn *c)
{
    /* The receives were posted on the comm being left: the new one gets them all again. */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    for (uint64_t s = e->test_seq; s < e->post_seq; s++)
        e->req[s % LG_WINDOW].ireq = NULL;
    e->post_seq = e->test_seq;
}

void lg_inner_ep_fence(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    struct lg_inner *in = lg_inner_devs ? lg_inner_devs->in : NULL;
    if (!in)
        return;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    pthread_mutex_lock(&e->wmu);
    if (c->kind == LG_CONN_RECV && lg_inner_path_carries(w) && p == c->active_path) {
        /* What the comm placed is counted before it closes: the sender may have seen those
         * sends complete (LINKGUARD_INNER_PLACED) and cannot send them again. */
        lg_inner_path_calls(1);
        rx_complete(c, e, p);
        lg_inner_path_calls(0);
    }
    int was = __atomic_exchange_n(&w->dead, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&e->wmu);
    if (was)
        return;
    pthread_mutex_lock(&e->mr_mu);
    void *comm = w->comm;
    for (struct lg_inner_mr *mr = e->mrs; comm && mr; mr = mr->next)
        if (mr->comm[p->index] == comm)
            lg_inner_mr_drop(in, mr, p->index);
    pthread_mutex_unlock(&e->mr_mu);
    if (comm)
        c->kind == LG_CONN_SEND ? in->ops->closeSend(in, comm) : in->ops->closeRecv(in, comm);
    if (w->lcomm)
        in->ops->closeListen(in, w->lcomm);
    if (w->cg) {
        if (w->cg->comm)
            in->ops->closeSend(in, w->cg->comm);
        free(w->cg);
    }
    w->lcomm = NULL;
    w->cg = NULL;
}

void lg_inner_ep_rearm(struct lg_path *p)
{
    struct lg_inner_conn *e = lg_inner_ep(p->conn->ep);
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    lg_inner_ep_fence(p);
    pthread_mutex_lock(&e->wmu);
    pthread_mutex_lock(&e->mr_mu);
    w->comm = NULL;
    __atomic_store_n(&w->ready, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&w->dead, 0, __ATOMIC_RELEASE);
    w->igen++; /* under wmu: a flush request of the old comm sees it (lg_inner_ep_flush_test) */
    pthread_mutex_unlock(&e->mr_mu);
    pthread_mutex_unlock(&e->wmu);
    w->t0 = 0;
}

/* ---- handshake (monitor) ------------------------------------------------------------------ */

int lg_inner_ep_on_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    if (c->kind != LG_CONN_SEND || f->flags >= LG_INNER_PARTS) {
        lg_conn_path_failed(p, 0, "INNER frame out of place");
        return -1;
    }
    /* Frames of one path come in order, handled one at a time: a newer inner generation
     * (the receiver re-armed the path) starts a new handle. */
    uint32_t igen = __atomic_load_n(&w->parts_igen, __ATOMIC_ACQUIRE);
    if (f->epoch < igen)
        return 1;
    if (f->epoch > igen) {
        __atomic_store_n(&w->parts, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&w->parts_igen, f->epoch, __ATOMIC_RELEASE);
    }
    lg_put64(w->handle + LG_INNER_PART_BYTES * f->flags, f->value);
    uint32_t got = __atomic_or_fetch(&w->parts, 1u << f->flags, __ATOMIC_ACQ_REL);
    if (got == LG_INNER_PARTS_ALL)
        lg_monitor_wake(c);
    return 1;
}

/* The comm is there: register every buffer on it, then let the path carry. */
static void comm_ready(struct lg_conn *c, struct lg_path *p, int dev, void *comm, uint64_t now)
{
    struct lg_inner *in = lg_inner_devs->in;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    ncclResult_t rc = ncclSuccess;
    pthread_mutex_lock(&e->mr_mu);
    for (struct lg_inner_mr *mr = e->mrs; mr && rc == ncclSuccess; mr = mr->next) {
        lg_inner_mr_drop(in, mr, p->index); /* a fenced comm's, if any was left */
        rc = lg_inner_mr_add(in, mr, p->index, comm);
    }
    w->comm = comm;
    __atomic_store_n(&w->ready, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&e->mr_mu);
    if (rc != ncclSuccess) {
        inner_failed(p, "regMr", rc);
        return;
    }
    LG_INFO(NCCL_NET, "%s conn %016llx: %s path on NIC %s (gen %u): inner '%s' %s comm #%u "
            "ready in %.1f ms on inner dev %d (%s)", lg_conn_kind_str(c),
            (unsigned long long)c->nonce, lg_slot_name(p->index), p->nic, p->gen, in->name,
            c->kind == LG_CONN_SEND ? "send" : "recv", w->igen, (now - w->t0) / 1e6, dev,
            in->dev[dev].props.name);
    if (w->ready_owed) {
        w->ready_owed = 0;
        struct lg_ctrl ready = {.type = LG_CTRL_READY, .value = p->gen};
        lg_path_ctrl_send(p, &ready);
    }
    if (c->kind == LG_CONN_SEND && lg_inner_ep_placed(e)) {
        /* Tells the receiver that our sends complete on placement: it then acks only now and
         * then (an ack is a syscall on its way to NCCL's completion), never making us wait. */
        struct lg_ctrl f = {.type = LG_CTRL_DELIVERED,
                            .value = __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE)};
        lg_path_ctrl_send(p, &f);
    } else if (c->kind == LG_CONN_SEND && lg_params.send_copy) {
        /* Our small host sends are kept (window.c) and complete without the ack: the
         * receiver may batch their acks too. */
        __atomic_store_n(&e->keeps_told, 1, __ATOMIC_RELEASE);
        struct lg_ctrl f = {.type = LG_CTRL_KEEPS, .value = (uint64_t)lg_params.send_copy};
        lg_path_ctrl_send(p, &f);
    }
    lg_monitor_wake(c);
}

static int rx_handshake(struct lg_conn *c, struct lg_path *p, int dev, uint64_t now)
{
    struct lg_inner *in = lg_inner_devs->in;
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    if (!w->lcomm) {
        _Alignas(16) uint8_t handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
        ncclResult_t rc = in->ops->listen(in, conn_ctx(c), dev, handle, &w->lcomm);
        if (rc != ncclSuccess) {
            inner_failed(p, "listen", rc);
            return 0;
        }
        for (int k = 0; k < LG_INNER_PARTS; k++) {
            struct lg_ctrl f = {.type = LG_CTRL_INNER, .flags = (uint8_t)k, .epoch = w->igen,
                                .value = lg_get64(handle + LG_INNER_PART_BYTES * k)};
            lg_path_ctrl_send(p, &f);
        }
    }
    void *comm = NULL;
    ncclResult_t rc = in->ops->accept(in, w->lcomm, &comm);
    if (rc != ncclSuccess) {
        inner_failed(p, "accept", rc);
        return 0;
    }
    if (!comm)
        return 1;
    in->ops->closeListen(in, w->lcomm);
    w->lcomm = NULL;
    comm_ready(c, p, dev, comm, now);
    return 0;
}

static int tx_handshake(struct lg_conn *c, struct lg_path *p, int dev, uint64_t now)
{
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    if (__atomic_load_n(&w->parts_igen, __ATOMIC_ACQUIRE) != w->igen ||
        __atomic_load_n(&w->parts, __ATOMIC_ACQUIRE) != LG_INNER_PARTS_ALL)
        return 1;
    if (!w->cg) {
        w->cg = malloc(sizeof(*w->cg));
        if (!w->cg) {
            lg_conn_path_failed(p, 0, "out of memory for the inner connect");
            return 0;
        }
        lg_inner_connecting_init(w->cg, dev, w->handle, sizeof(w->handle));
    }
    int st = lg_inner_connecting_step(lg_inner_devs->in, conn_ctx(c), w->cg);
    if (st < 0) {
        lg_conn_path_failed(p, 0, "inner connect failed");
        return 0;
    }
    if (st == 0)
        return 1;
    void *comm = w->cg->comm;
    free(w->cg);
    w->cg = NULL;
    comm_ready(c, p, dev, comm, now);
    return 0;
}

static int handshake(struct lg_conn *c, struct lg_path *p, uint64_t now)
{
    if (!p || p->retired || !lg_path_up(p))
        return 0;
    struct lg_inner_path *w = lg_inner_tp(p->tp);
    if (__atomic_load_n(&w->ready, __ATOMIC_ACQUIRE) || __atomic_load_n(&w->dead, __ATOMIC_ACQUIRE))
        return 0;
    if (!w->t0)
        w->t0 = now;
    int64_t limit = p->gen || w->igen ? lg_params.rejoin_timeout_ms
                                      : lg_params.connect_timeout_ms;
    if (now - w->t0 > (uint64_t)limit * 1000000ull) {
        char why[96];
        snprintf(why, sizeof(why), "inner %s not done after %lld ms",
                 c->kind == LG_CONN_SEND ? "connect" : "accept", (long long)limit);
        lg_conn_path_failed(p, 0, why);
        return 0;
    }
    int dev = lg_inner_devs_find(c->dev, p->nic); /* a spread backup: its member's */
    if (dev < 0) {
        lg_conn_path_failed(p, 0, "no inner device for this NIC");
        return 0;
    }
    lg_inner_path_calls(1);
    int busy = c->kind == LG_CONN_SEND ? tx_handshake(c, p, dev, now)
                                       : rx_handshake(c, p, dev, now);
    lg_inner_path_calls(0);
    return busy;
}

int lg_inner_ep_step(struct lg_conn *c, uint64_t now)
{
    int busy = 0;
    for (int i = 0; i < LG_NPATHS; i++) {
        busy |= handshake(c, c->paths[i], now);
        busy |= handshake(c, c->fo.slot[i].rj.path, now); /* sender: a rebuild in progress */
    }
    return busy;
}

/* ---- flush -------------------------------------------------------------------------------- */

struct lg_flush {
    uint32_t magic;
    struct lg_conn *conn;
    struct lg_path *path; /* compared, dereferenced only while still in conn->paths[] */
    int slot;
    uint32_t gen, igen; /* the path and the inner comm of that path it was posted on */
    void *ireq;
};

/* Under wmu: the path now in the slot (the NIC) whose inner comm placed the newest receive
 * into `buf`: NCCL flushes right after that receive completed, and only that NIC's comm can
 * order its own writes. The committed path when no receive is known for `buf`. */
static struct lg_path *placing_path(struct lg_conn *c, const void *buf)
{
    const struct lg_inner_conn *e = lg_inner_ep(c->ep);
    int best = -1;
    for (int i = 0; i < LG_WINDOW; i++) {
        const struct lg_req *r = &c->reqs[i];
        if (r->buf == buf && r->seq < e->test_seq && (best < 0 || r->seq > c->reqs[best].seq))
            best = i;
    }
    pthread_mutex_lock(&c->mu);
    struct lg_path *p = best >= 0 ? c->paths[e->req[best].slot] : c->active_path;
    pthread_mutex_unlock(&c->mu);
    return p;
}

ncclResult_t lg_inner_ep_iflush(struct lg_conn *c, int n, void **data, int *sizes,
                            struct lg_inner_mr **mrs, void **request)
{
    struct lg_inner *in = lg_inner_devs->in;
    void *mh[NCCL_PROXY_MAX_SUBS] = {0};
    *request = NULL;
    if (n < 1 || n > NCCL_PROXY_MAX_SUBS)
        return ncclInternalError;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    pthread_mutex_lock(&e->wmu);
    uint32_t ph = lg_conn_enter(c); /* p may be a standby, which a rebuild replaces */
    struct lg_path *p = placing_path(c, data[0]);
    ncclResult_t rc = ncclSuccess;
    void *ireq = NULL;
    if (p && lg_inner_ep_carries(p)) {
        for (int i = 0; i < n; i++)
            mh[i] = lg_inner_mr_handle(mrs[i], p->index);
        rc = in->ops->iflush(in, lg_inner_tp(p->tp)->comm, n, data, sizes, mh, &ireq);
    }
    /* No comm: the data came through one that is closed now, and closing waited for it. */
    if (rc == ncclSuccess && ireq) {
        struct lg_flush *f = malloc(sizeof(*f));
        if (f) {
            *f = (struct lg_flush){.magic = LG_FLUSH_MAGIC, .conn = c, .path = p,
                                   .slot = p->index, .gen = p->gen,
                                   .igen = lg_inner_tp(p->tp)->igen,
                                   .ireq = ireq};
            *request = f;
        } else {
            rc = ncclSystemError;
        }
    }
    lg_conn_exit(c, ph);
    pthread_mutex_unlock(&e->wmu);
    return rc;
}

int lg_inner_ep_flush_test(void *request, int *done, ncclResult_t *rc)
{
    struct lg_flush *f = request;
    if (!f || f->magic != LG_FLUSH_MAGIC)
        return 0;
    struct lg_conn *c = f->conn;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    *rc = ncclSuccess;
    *done = 0;
    pthread_mutex_lock(&e->wmu);
    pthread_mutex_lock(&c->mu);
    struct lg_path *p = c->paths[f->slot];
    int gone = p != f->path || p->gen != f->gen || lg_inner_tp(p->tp)->igen != f->igen ||
               __atomic_load_n(&lg_inner_tp(p->tp)->dead, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&c->mu);
    /* A fenced comm took its requests with it; its flush has nothing left to wait for. */
    if (gone)
        *done = 1;
    else
        *rc = lg_inner_devs->in->ops->test(lg_inner_devs->in, f->ireq, done, NULL);
    pthread_mutex_unlock(&e->wmu);
    if (*done || *rc != ncclSuccess) {
        f->magic = 0;
        free(f);
    }
    return 1;
}
