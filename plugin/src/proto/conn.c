/* Connections: creation, teardown, path failure and the control channel. */
#include "proto/conn.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "daemon/verdict.h"
#include "runtime/ctx.h"
#include "proto/sendmatch.h"
#include "proto/spread.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "session/acceptor.h"

struct lg_conn *lg_conn_new(enum lg_conn_kind kind, int dev, const struct lg_transport *tr,
                            int nstreams, uint32_t blob, uint64_t nonce)
{
    struct lg_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->magic = LG_CONN_MAGIC;
    c->kind = kind;
    c->dev = dev;
    c->tr = tr;
    c->nstreams = nstreams;
    c->blob = blob;
    c->nonce = nonce;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->mb_mu, NULL);
    pthread_mutex_init(&c->run_mu, NULL);
    c->refs = 1; /* the owner's: connect/accept, then NCCL until close */
    c->failed_req = (struct lg_failed_req){.magic = LG_REQ_FAILED_MAGIC, .conn = c};
    for (int i = 0; i < LG_WINDOW; i++) {
        c->reqs[i].magic = LG_REQ_MAGIC;
        c->reqs[i].conn = c;
    }
    if (tr->open && tr->open(c, &c->ep) != 0) {
        lg_conn_put(c);
        return NULL;
    }
    return c;
}

struct lg_path *lg_path_alloc(struct lg_conn *c, int index, const char *nic, const char *peer)
{
    struct lg_path *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->conn = c;
    p->index = index;
    p->nstreams = c->nstreams;
    p->state = LG_PATH_UP;
    snprintf(p->nic, sizeof(p->nic), "%s", nic);
    snprintf(p->peer, sizeof(p->peer), "%s", peer);
    pthread_mutex_init(&p->ctrl_mu, NULL);
    for (int i = 0; i < LG_MAX_STREAMS; i++) {
        p->data[i].path = p;
        p->data[i].index = i + 1;
        p->data[i].task.fd = -1;
    }
    p->last_rx_ns = p->prev_rx_ns = lg_now_ns();
    if (c->tr->path_open && c->tr->path_open(p, &p->tp) != 0) {
        pthread_mutex_destroy(&p->ctrl_mu);
        free(p);
        return NULL;
    }
    return p;
}

struct lg_path *lg_path_new(struct lg_conn *c, int index, const char *nic, const char *peer)
{
    struct lg_path *p = lg_path_alloc(c, index, nic, peer);
    if (!p)
        return NULL;
    c->paths[index] = p;
    if (index + 1 > c->npaths)
        c->npaths = index + 1;
    return p;
}

int lg_path_start(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    int send = c->kind == LG_CONN_SEND;
    int active = p->index == c->active && c->paths[p->index] == p;
    __atomic_store_n(&p->started, 1, __ATOMIC_RELEASE); /* a session's end may look (path_lost) */
    for (int i = 0; i < p->nstreams; i++) {
        p->data[i].task.fn = c->tr->stream_fn[send ? 0 : 1];
        /* Data arriving for a posted receive on the active path is placed by test() when
         * NCCL's thread polls (it hands bigger reads to a worker with a kick); elsewhere a
         * worker is woken for every arrival. Send streams need EPOLLOUT only. */
        uint32_t ev = send ? EPOLLOUT
                           : lg_params.poll_inline && active ? EPOLLOUT : EPOLLIN | EPOLLOUT;
        if (lg_task_attach(&p->data[i].task, ev) != 0)
            return -1;
    }
    return 0;
}

int lg_conn_start(struct lg_conn *c)
{
    c->active_path = c->paths[c->active];
    __atomic_store_n(&c->protected_, c->paths[0] && c->paths[1], __ATOMIC_RELEASE);
    for (int pi = 0; pi < LG_NPATHS; pi++)
        if (c->paths[pi] && lg_path_start(c->paths[pi]) != 0)
            return -1;
    return 0;
}

/* Reads whatever is left so that close() sends FIN, not RST (which could destroy the peer's
 * last unread bytes). Bounded: a peer that keeps sending does not hold us. */
static void drain_close(int fd)
{
    char buf[4096];
    for (int i = 0; i < 64 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
        ;
    close(fd);
}

static int path_tasks(struct lg_path *p, struct lg_task **tasks)
{
    int n = 0;
    for (int i = 0; i < LG_MAX_STREAMS; i++)
        if (p->data[i].task.worker)
            tasks[n++] = &p->data[i].task;
    return n;
}

/* Closes the fds of a path whose tasks are detached (or were never attached), and takes it
 * off its session. Every fd is taken out under ctrl_mu (a holder of it sees fds that stay
 * open until it lets go), then closed. */
static void path_close_fds(struct lg_path *p)
{
    int fds[LG_MAX_STREAMS];
    lg_session_detach(&p->ch);
    pthread_mutex_lock(&p->ctrl_mu);
    for (int i = 0; i < LG_MAX_STREAMS; i++) {
        fds[i] = p->data[i].task.fd;
        p->data[i].task.fd = -1;
    }
    pthread_mutex_unlock(&p->ctrl_mu);
    for (int i = 0; i < LG_MAX_STREAMS; i++)
        if (fds[i] >= 0)
            drain_close(fds[i]);
}

/* The object goes: its session's hold with it (NCCL's thread may have used the session
 * through the path until the path was unpublished and quiesced). */
static void retire_forget(struct lg_path *p);

static void path_destroy(struct lg_path *p)
{
    retire_forget(p);
    if (p->conn->tr->path_close)
        p->conn->tr->path_close(p->tp);
    p->tp = NULL;
    pthread_mutex_destroy(&p->ctrl_mu);
    lg_session_put(p->ch.sess);
    free(p);
}

void lg_path_fence_start(struct lg_path *p, int say_bye)
{
    if (!p || p->retired)
        return;
    if (__atomic_exchange_n(&p->state, LG_PATH_FAILED, __ATOMIC_ACQ_REL) != LG_PATH_FAILED) {
        snprintf(p->why, sizeof(p->why), "fenced");
        p->fail_ns = lg_now_ns();
        __atomic_store_n(&p->fail_noted, 1, __ATOMIC_RELEASE);
    }
    if (say_bye && !p->bye_sent && __atomic_load_n(&p->ch.attached, __ATOMIC_ACQUIRE)) {
        /* Best effort: the peer then takes our EOF for a fence, not for our death. */
        struct lg_ctrl bye = {.type = LG_CTRL_BYE, .flags = LG_BYE_FENCE};
        lg_path_ctrl_send(p, &bye);
        p->bye_sent = 1;
    }
}

/* Retiring, in two halves around the detach of its tasks (which a batch does once for all). */
static int retire_begin(struct lg_path *p, int say_bye, struct lg_task **tasks)
{
    lg_path_fence_start(p, say_bye);
    p->conn->tr->fence(p); /* the transport's comm first (no late write lands after it) */
    return path_tasks(p, tasks);
}

static void retire_end(struct lg_path *p)
{
    if (p->conn->tr->path_detached) /* what its streams held goes back */
        p->conn->tr->path_detached(p);
    path_close_fds(p);
    p->retired = 1;
}

void lg_path_retire(struct lg_path *p, int say_bye)
{
    if (!p || p->retired)
        return;
    struct lg_task *tasks[LG_MAX_STREAMS];
    int n = retire_begin(p, say_bye, tasks);
    if (n)
        lg_tasks_detach(tasks, n);
    retire_end(p);
}

/* ---- retiring later, in batches ------------------------------------------------------------ */

/* Paths fenced by a storm's switches wait here (FIFO), each holding its connection, and are
 * retired LG_RETIRE_BATCH at a time with one detach for all their tasks: a detach is a round
 * trip to the workers, which 500 paths one by one made 80 ms of the monitor's time while the
 * RESYNCs of the next switches waited. */
static struct {
    pthread_mutex_t mu; /* entries; a path's destruction clears its own */
    struct later_path {
        struct lg_path *p; /* NULL: destroyed (or retired) since */
        struct lg_conn *c;
    } *e;
    int head, n, cap;
} later = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void retire_forget(struct lg_path *p)
{
    if (!__atomic_load_n(&p->retire_queued, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&later.mu);
    for (int i = later.head; i < later.n; i++)
        if (later.e[i].p == p)
            later.e[i].p = NULL;
    pthread_mutex_unlock(&later.mu);
}

void lg_path_retire_later(struct lg_path *p)
{
    if (p->retired || p->retire_queued)
        return;
    lg_path_fence_start(p, 1); /* failed for everyone and the peer told, now */
    pthread_mutex_lock(&later.mu);
    if (later.head == later.n)
        later.head = later.n = 0;
    if (later.n == later.cap) {
        int cap = later.cap ? 2 * later.cap : 64;
        struct later_path *ne = realloc(later.e, (size_t)cap * sizeof(*ne));
        if (!ne) {
            pthread_mutex_unlock(&later.mu);
            lg_path_retire(p, 1); /* no room: at once */
            return;
        }
        later.e = ne;
        later.cap = cap;
    }
    lg_conn_hold(p->conn);
    __atomic_store_n(&p->retire_queued, 1, __ATOMIC_RELEASE);
    later.e[later.n++] = (struct later_path){.p = p, .c = p->conn};
    pthread_mutex_unlock(&later.mu);
}

int lg_paths_retire_queued(void)
{
    struct later_path b[LG_RETIRE_BATCH];
    int n = 0;
    pthread_mutex_lock(&later.mu);
    while (n < LG_RETIRE_BATCH && later.head < later.n)
        b[n++] = later.e[later.head++];
    int left = later.n - later.head;
    pthread_mutex_unlock(&later.mu);
    /* Each connection's run_mu, once (a connection may have both paths here): under it a
     * close cannot free the path, and a connection that is closing has freed it already. */
    int own[LG_RETIRE_BATCH];
    for (int i = 0; i < n; i++) {
        own[i] = 1;
        for (int k = 0; k < i && own[i]; k++)
            own[i] = b[k].c != b[i].c;
        if (own[i])
            pthread_mutex_lock(&b[i].c->run_mu);
    }
    struct lg_task *tasks[LG_RETIRE_BATCH * LG_MAX_STREAMS];
    int nt = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].p || b[i].c->closing || b[i].p->retired) {
            b[i].p = NULL;
            continue;
        }
        nt += retire_begin(b[i].p, 1, tasks + nt);
    }
    if (nt)
        lg_tasks_detach(tasks, nt);
    for (int i = 0; i < n; i++)
        if (b[i].p) {
            retire_end(b[i].p);
            __atomic_store_n(&b[i].p->retire_queued, 0, __ATOMIC_RELEASE);
        }
    for (int i = 0; i < n; i++)
        if (own[i])
            pthread_mutex_unlock(&b[i].c->run_mu);
    for (int i = 0; i < n; i++)
        lg_conn_put(b[i].c);
    return left;
}

void lg_path_free(struct lg_path *p)
{
    if (!p)
        return;
    p->conn->tr->fence(p);
    /* Once more: a kick that raced the first detach may have queued a task again. */
    struct lg_task *tasks[LG_MAX_STREAMS + 1];
    int n = path_tasks(p, tasks);
    if (n)
        lg_tasks_detach(tasks, n);
    path_close_fds(p);
    path_destroy(p);
}

void lg_conn_free(struct lg_conn *c)
{
    struct lg_task *tasks[2 * LG_NPATHS * (LG_MAX_STREAMS + 1)];
    struct lg_path *all[2 * LG_NPATHS];
    int n = 0, np = 0;
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        if (c->paths[pi])
            all[np++] = c->paths[pi];
        if (c->fo.slot[pi].rj.path)
            all[np++] = c->fo.slot[pi].rj.path;
    }
    for (int i = 0; i < np; i++)
        n += path_tasks(all[i], tasks + n);
    if (n)
        lg_tasks_detach(tasks, n);
    for (int i = 0; i < np; i++) { /* no frame reaches the transport once it is released */
        lg_session_detach(&all[i]->ch);
        c->tr->fence(all[i]);
    }
    c->tr->release(c->ep);
    c->ep = NULL;
    for (int i = 0; i < np; i++) {
        path_close_fds(all[i]);
        path_destroy(all[i]);
    }
    for (size_t i = 0; i < sizeof(c->listener) / sizeof(c->listener[0]); i++)
        if (c->listener[i])
            lg_listener_put(c->listener[i]);
    if (c->spread_held)
        lg_spread_put(c->dev, c->nic[1]);
    for (int i = 0; i < LG_WINDOW; i++) {
        free(c->reqs[i].cover_heap);
        free(c->reqs[i].copy);
    }
    lg_ctx_release(c->ctx); /* after the inner comms: the last one may end the inner context */
    c->magic = 0;
    lg_conn_put(c);
}

void lg_conn_hold(struct lg_conn *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); }

void lg_conn_put(struct lg_conn *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_destroy(&c->mb_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->run_mu);
    lg_match_free(c);
    free(c);
}

int lg_conn_fail(struct lg_conn *c, enum lg_fail_reason why, ncclResult_t code, const char *fmt,
                 ...)
{
    int set = 0;
    pthread_mutex_lock(&c->mu);
    if (!c->error) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
        va_end(ap);
        c->fail_reason = why;
        __atomic_store_n(&c->error, (int)code, __ATOMIC_RELEASE);
        set = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (set)
        lg_monitor_wake(c);
    return set;
}

size_t lg_path_ports(const struct lg_path *p, char *out, size_t len, int sep)
{
    if (len == 0)
        return 0;
    size_t n = 0;
    int w = snprintf(out, len, "%s%s ctrl %u data", sep ? "; " : "",
                     p->index ? "backup" : "primary", lg_sock_local_port(lg_path_ctrl_fd(p)));
    for (int k = 0; k < p->nstreams && w >= 0 && (size_t)w < len - n; k++) {
        n += (size_t)w;
        w = snprintf(out + n, len - n, "%s%u", k ? "," : " ",
                     lg_sock_local_port(p->data[k].task.fd));
    }
    return w >= 0 && (size_t)w < len - n ? n + (size_t)w : len - 1; /* else truncated */
}

void lg_conn_peer_lied(struct lg_conn *c, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (lg_conn_fail(c, LG_FAIL_OTHER, ncclRemoteError, "the peer broke the protocol: %s", what))
        LG_WARN("%s conn %016llx: the peer broke the protocol (%s); failing the connection",
                c->kind == LG_CONN_SEND ? "send" : "recv", (unsigned long long)c->nonce, what);
}

/* Requests posted but not complete: what a dying path takes down with it. */
static uint64_t outstanding(struct lg_conn *c)
{
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    if (c->kind == LG_CONN_SEND)
        return posted - __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE);
    return posted - __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE);
}

static void path_lost(struct lg_path *p, int err, int eof, const char *why)
{
    /* A peer that closes says BYE on the control session first, but a data stream's EOF can
     * be seen before it: read the session now (serialized with its own handler). */
    if (!err && !__atomic_load_n(&p->peer_bye, __ATOMIC_ACQUIRE))
        lg_path_ctrl_pump(p, 0);
    if (__atomic_exchange_n(&p->state, LG_PATH_FAILED, __ATOMIC_ACQ_REL) == LG_PATH_FAILED)
        return;
    struct lg_conn *c = p->conn;
    const char *kind = c->kind == LG_CONN_SEND ? "send" : "recv";
    const char *pname = p->index == 0 ? "primary" : "backup";
    int bye = __atomic_load_n(&p->peer_bye, __ATOMIC_ACQUIRE);
    snprintf(p->why, sizeof(p->why), "%s%s%s", why, err ? ": " : "", err ? strerror(err) : "");
    p->fail_ns = lg_now_ns();
    __atomic_store_n(&p->peer_gone, !bye && (eof || err == ECONNRESET || err == EPIPE),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&p->fail_noted, 1, __ATOMIC_RELEASE);
    uint64_t left = outstanding(c);
    if (bye == 1 + LG_BYE_CLOSE) {
        /* The peer closed the connection on purpose: nothing to fail over to. */
        __atomic_store_n(&c->peer_closed, 1, __ATOMIC_RELEASE);
        if (lg_conn_fail(c, left ? LG_FAIL_PEER : LG_FAIL_CLOSED, ncclRemoteError,
                         "peer closed the connection")) {
            if (left)
                LG_WARN("%s conn %016llx: peer closed the connection with %llu request(s) in "
                        "flight (%s path on NIC %s to %s)",
                        kind, (unsigned long long)c->nonce, (unsigned long long)left, pname,
                        p->nic, p->peer);
            else
                LG_INFO(NCCL_NET, "%s conn %016llx: closed by the peer", kind,
                        (unsigned long long)c->nonce);
        }
    } else if (!__atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE) &&
               __atomic_load_n(&p->started, __ATOMIC_ACQUIRE) &&
               __atomic_load_n(&c->paths[p->index], __ATOMIC_ACQUIRE) == p) {
        /* (A path still being built is not the connection's: its attempt just fails; a
         * connect or accept in progress sees it failed.) */
        /* Built without a standby path: nothing to fail over to. An EOF with nothing in
         * flight is a close whose BYE lost the race to a data stream's EOF (e.g. an inner
         * comm that linkguard fenced, in wrap mode): noted quietly, the next call fails. */
        int quiet = eof && !left;
        enum lg_fail_reason fr = quiet ? LG_FAIL_CLOSED
                                 : __atomic_load_n(&p->peer_gone, __ATOMIC_RELAXED) ? LG_FAIL_PEER
                                                                                  : LG_FAIL_NO_PATH;
        if (lg_conn_fail(c, fr, ncclRemoteError, "%s path on %s to %s: %s", pname, p->nic,
                         p->peer, p->why)) {
            if (quiet)
                LG_INFO(NCCL_NET, "%s conn %016llx: %s path on NIC %s to %s ended (%s) with "
                        "nothing in flight", kind, (unsigned long long)c->nonce, pname, p->nic,
                        p->peer, p->why);
            else
                LG_WARN("%s conn %016llx: %s path on NIC %s to %s failed (%s) with %llu "
                        "request(s) in flight; the connection has no backup path",
                        kind, (unsigned long long)c->nonce, pname, p->nic, p->peer, p->why,
                        (unsigned long long)left);
        }
    }
    lg_monitor_wake(c); /* the monitor fails over (failover.c) */
}

void lg_conn_quiesce_inline(struct lg_conn *c)
{
    uint32_t old = __atomic_fetch_add(&c->inline_phase, 1, __ATOMIC_SEQ_CST) & 1;
    while (__atomic_load_n(&c->inline_users[old], __ATOMIC_SEQ_CST))
        sched_yield();
}

void lg_conn_path_failed(struct lg_path *p, int err, const char *why) { path_lost(p, err, 0, why); }
void lg_conn_path_eof(struct lg_path *p, const char *why) { path_lost(p, 0, 1, why); }

uint64_t lg_conn_stalled_since(struct lg_conn *c, int busy, uint64_t base, uint64_t placed,
                               uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    if (!busy || base != fo->wd_base || placed != fo->wd_placed || !fo->wd_since) {
        fo->wd_base = base;
        fo->wd_placed = placed;
        fo->wd_since = busy ? now : 0;
        return 0;
    }
    uint64_t from = LG_MAX(fo->wd_since, fo->wd_commit_ns);
    if (now - from < LG_MS(lg_params.stall_ms))
        return 0;
    fo->wd_since = 0;
    return from;
}

void lg_path_note_bye(struct lg_path *p, uint8_t flags)
{
    __atomic_store_n(&p->peer_bye, 1 + (flags == LG_BYE_FENCE), __ATOMIC_RELEASE);
}

/* ---- the path's channel on its control session ------------------------------------------ */

static struct lg_path *path_of(struct lg_chan *ch)
{
    return (struct lg_path *)((char *)ch - offsetof(struct lg_path, ch));
}

static void chan_frame(struct lg_chan *ch, const struct lg_ctrl *f, uint64_t now)
{
    struct lg_path *p = path_of(ch);
    lg_path_note_rx(p, now);
    if (lg_path_up(p))
        p->conn->ctrl_frame(p, f);
}

static void chan_lost(struct lg_chan *ch, int err, int eof, const char *why)
{
    /* (a path still being built fails too: its attempt ends) */
    if (eof)
        lg_conn_path_eof(path_of(ch), why);
    else
        lg_conn_path_failed(path_of(ch), err, why);
}

static void chan_bye(struct lg_chan *ch) { lg_path_note_bye(path_of(ch), LG_BYE_FENCE); }

static const struct lg_chan_ops path_chan_ops = {
    .frame = chan_frame, .lost = chan_lost, .bye = chan_bye};

int lg_path_attach(struct lg_path *p, struct lg_session *s, uint32_t id)
{
    return lg_session_attach(s, &p->ch, id, &path_chan_ops);
}

/* Puts p on a control session to the peer's listener of its slot: a shared one that is up,
 * else a new one. 0, or -1 with errno set. */
static int path_open_session(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    int i = p->index;
    /* A shared session can fail between its lookup and the attach (its peer went silent, on a
     * starved machine too): the second lookup no longer finds it and opens another. */
    for (int tries = 0; tries < 2; tries++) {
        struct lg_session *s = lg_session_open(p->nic, c->local_ip[i], c->peer_ip[i],
                                                c->peer_port[i]);
        if (!s)
            return -1;
        if (lg_path_attach(p, s, 0) == 0)
            return 0;
        lg_session_put(s);
    }
    errno = ECONNRESET;
    return -1;
}

int lg_path_dial(struct lg_path *p, struct lg_dial *d, uint8_t paths_mask, uint8_t flags,
                 int held)
{
    struct lg_conn *c = p->conn;
    int i = p->index;
    if (path_open_session(p) != 0) {
        d->part = LG_DIAL_SESSION;
        return -1;
    }
    d->ch = &p->ch;
    d->nstreams = c->nstreams;
    d->held = held;
    for (int k = 1; k <= c->nstreams; k++)
        d->fd[k] = &p->data[k - 1].task.fd;
    d->hello = (struct lg_hello){.path = (uint8_t)i, .nstreams = (uint8_t)c->nstreams,
                                 .paths_mask = paths_mask, .transport = c->tr->id,
                                 .blob = c->blob,
                                 .listen_id = c->listen_id, .conn_nonce = c->nonce,
                                 .flags = (uint8_t)flags, .gen = p->gen};
    return lg_dial_start(d, p->nic, c->local_ip[i], c->peer_ip[i], c->peer_port[i]);
}

int lg_path_join(struct lg_path *p, uint64_t id, uint32_t chan)
{
    struct lg_session *s = lg_session_find(id, p->conn->local_ip[p->index]);
    if (s && lg_path_attach(p, s, chan) == 0)
        return 0;
    lg_session_put(s);
    return -1;
}

/* A progress watchdog's verdict: logged, reported to the daemon, and the path fails like a
 * dead one (the sender fails over, an unprotected connection reports the error). */
void lg_path_stalled(struct lg_path *p, const char *why, uint32_t for_ms)
{
    struct lg_conn *c = p->conn;
    LG_INFO(NCCL_NET, "%s conn %016llx: %s path on NIC %s to %s %s", lg_conn_kind_str(c),
            (unsigned long long)c->nonce, lg_slot_name(p->index), p->nic, p->peer, why);
    lg_verdict_report(&(struct lg_verdict){.nic = p->nic, .kind = LG_VERDICT_STALLED,
                                           .path = (uint8_t)p->index, .for_ms = for_ms,
                                           .conn = c->nonce, .peer = p->peer});
    lg_conn_path_failed(p, 0, why);
}


/* Anything readable on a socket that carries nothing is EOF or an error: the peer never
 * writes there. */
void lg_stream_idle_handler(struct lg_task *t, uint32_t events)
{
    struct lg_stream *s = lg_stream_of(t);
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    char b[64];
    struct iovec iov = {b, sizeof(b)};
    ssize_t n = lg_sock_readv(t->fd, &iov, 1);
    if (n == 0)
        lg_conn_path_eof(s->path, "data stream closed by peer");
    else if (n > 0)
        lg_conn_path_failed(s->path, 0, "unexpected bytes on an idle data stream");
    else if (errno != EAGAIN && errno != EWOULDBLOCK)
        lg_conn_path_failed(s->path, errno, "data stream");
}

void lg_conn_poll_ctrl(struct lg_conn *c)
{
    uint32_t ph = lg_conn_enter(c);
    lg_path_ctrl_pump(lg_conn_active_path(c), lg_now_ns());
    lg_conn_exit(c, ph);
}
