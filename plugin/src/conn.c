/* Connections: creation, teardown, path failure and the control channel. */
#include "conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "log.h"
#include "params.h"
#include "sock.h"
#include "util.h"

struct lg_conn *lg_conn_new(enum lg_conn_kind kind, int dev, int nstreams, uint32_t chunk_size)
{
    struct lg_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->magic = LG_CONN_MAGIC;
    c->kind = kind;
    c->dev = dev;
    c->nstreams = nstreams;
    c->chunk_size = chunk_size;
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < LG_WINDOW; i++) {
        c->reqs[i].magic = LG_REQ_MAGIC;
        c->reqs[i].conn = c;
    }
    return c;
}

struct lg_path *lg_path_new(struct lg_conn *c, int index, const char *nic, const char *peer)
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
    p->txq_last_ack = -1;
    p->ctrl.path = p;
    p->ctrl.index = 0;
    p->ctrl.task.fd = -1;
    for (int i = 0; i < LG_MAX_STREAMS; i++) {
        p->data[i].path = p;
        p->data[i].index = i + 1;
        p->data[i].task.fd = -1;
    }
    c->paths[index] = p;
    if (index + 1 > c->npaths)
        c->npaths = index + 1;
    return p;
}

int lg_conn_start(struct lg_conn *c)
{
    int send = c->kind == LG_CONN_SEND;
    if (send) /* every data stream starts with nothing to send */
        c->parked = (uint32_t)((1ull << c->nstreams) - 1);
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        struct lg_path *p = c->paths[pi];
        if (!p)
            continue;
        p->ctrl.task.fn = send ? lg_send_ctrl_handler : lg_recv_ctrl_handler;
        /* The sender's acks are read by test() on NCCL's thread, which polls while sends are
         * outstanding: no worker wake-up per ack. Workers still see hang-ups and errors. */
        uint32_t ctrl_ev = EPOLLOUT | (send && lg_params.poll_inline ? 0 : EPOLLIN);
        if (lg_task_attach(&p->ctrl.task, ctrl_ev) != 0)
            return -1;
        for (int i = 0; i < p->nstreams; i++) {
            p->data[i].task.fn = send ? lg_send_stream_handler : lg_recv_stream_handler;
            /* Data arriving for a posted receive is placed by test() when NCCL's thread
             * polls (it hands bigger reads to a worker with a kick); without inline polling
             * a worker is woken for every arrival. Send streams need EPOLLOUT only. */
            uint32_t ev = send ? EPOLLOUT : lg_params.poll_inline ? EPOLLOUT : EPOLLIN | EPOLLOUT;
            if (lg_task_attach(&p->data[i].task, ev) != 0)
                return -1;
        }
    }
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

void lg_conn_free(struct lg_conn *c)
{
    struct lg_task *tasks[LG_NPATHS * (LG_MAX_STREAMS + 1)];
    int n = 0;
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        struct lg_path *p = c->paths[pi];
        if (!p)
            continue;
        if (p->ctrl.task.worker)
            tasks[n++] = &p->ctrl.task;
        for (int i = 0; i < LG_MAX_STREAMS; i++)
            if (p->data[i].task.worker)
                tasks[n++] = &p->data[i].task;
    }
    if (n)
        lg_tasks_detach(tasks, n);
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        struct lg_path *p = c->paths[pi];
        if (!p)
            continue;
        if (p->ctrl.task.fd >= 0)
            drain_close(p->ctrl.task.fd);
        for (int i = 0; i < LG_MAX_STREAMS; i++)
            if (p->data[i].task.fd >= 0)
                drain_close(p->data[i].task.fd);
        pthread_mutex_destroy(&p->ctrl_mu);
        free(p);
    }
    pthread_mutex_destroy(&c->mu);
    c->magic = 0;
    free(c);
}

void lg_conn_fail(struct lg_conn *c, ncclResult_t code, const char *fmt, ...)
{
    pthread_mutex_lock(&c->mu);
    if (!c->error) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
        va_end(ap);
        __atomic_store_n(&c->error, (int)code, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Requests posted but not complete: what a dying path takes down with it. */
static uint64_t outstanding(struct lg_conn *c)
{
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    if (c->kind == LG_CONN_SEND)
        return posted - __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&c->mu);
    uint64_t placed = c->win.base;
    pthread_mutex_unlock(&c->mu);
    return posted - placed;
}

void lg_conn_path_failed(struct lg_path *p, int err, const char *why)
{
    /* A peer that closes says BYE on the control channel first, but a data stream's EOF can
     * be seen before it: read the control channel now (serialized with its own handler). */
    if (!err && p->ctrl.task.worker && !__atomic_load_n(&p->peer_bye, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == LG_PATH_UP)
        lg_task_run(&p->ctrl.task, EPOLLIN);
    if (__atomic_exchange_n(&p->state, LG_PATH_FAILED, __ATOMIC_ACQ_REL) == LG_PATH_FAILED)
        return;
    struct lg_conn *c = p->conn;
    const char *kind = c->kind == LG_CONN_SEND ? "send" : "recv";
    const char *pname = p->index == 0 ? "primary" : "backup";
    int bye = __atomic_load_n(&p->peer_bye, __ATOMIC_ACQUIRE);
    uint64_t left = outstanding(c);
    char detail[96];
    snprintf(detail, sizeof(detail), "%s%s%s", why, err ? ": " : "", err ? strerror(err) : "");
    /* Issue 6 turns the active path's failure into a failover onto the standby path. */
    if (p->index == c->active) {
        lg_conn_fail(c, ncclRemoteError, "%s path on %s to %s: %s", pname, p->nic, p->peer,
                     detail);
        if (left || !bye)
            LG_WARN("%s conn %016llx: %s path on NIC %s to %s failed (%s) with %llu request(s) "
                    "in flight",
                    kind, (unsigned long long)c->nonce, pname, p->nic, p->peer, detail,
                    (unsigned long long)left);
        else
            LG_INFO(NCCL_NET, "%s conn %016llx: peer closed the %s path on %s", kind,
                    (unsigned long long)c->nonce, pname, p->nic);
    } else if (!bye) {
        LG_WARN("%s conn %016llx: standby %s path on NIC %s to %s lost (%s); the connection "
                "is unprotected",
                kind, (unsigned long long)c->nonce, pname, p->nic, p->peer, detail);
    }
}

/* ---- control channel ----------------------------------------------------------------- */

static void txq_send_locked(struct lg_path *p)
{
    while (p->txq_off < p->txq_len) {
        struct iovec iov = {p->txq + p->txq_off, p->txq_len - p->txq_off};
        ssize_t n = lg_sock_writev(p->ctrl.task.fd, &iov, 1);
        if (n < 0)
            return; /* EAGAIN: EPOLLOUT brings the owner back; errors show up on read */
        p->txq_off += (size_t)n;
    }
    p->txq_off = p->txq_len = 0;
    p->txq_last_ack = -1;
}

void lg_path_ctrl_send(struct lg_path *p, const struct lg_ctrl *f)
{
    pthread_mutex_lock(&p->ctrl_mu);
    /* Acks are cumulative: an unsent one is simply updated. */
    if (f->type == LG_CTRL_ACK && p->txq_last_ack >= (int)p->txq_off) {
        lg_ctrl_encode(p->txq + p->txq_last_ack, f);
        pthread_mutex_unlock(&p->ctrl_mu);
        return;
    }
    if (p->txq_len + LG_CTRL_SIZE > sizeof(p->txq)) {
        memmove(p->txq, p->txq + p->txq_off, p->txq_len - p->txq_off);
        p->txq_last_ack -= p->txq_last_ack >= 0 ? (int)p->txq_off : 0;
        p->txq_len -= p->txq_off;
        p->txq_off = 0;
    }
    if (p->txq_len + LG_CTRL_SIZE > sizeof(p->txq)) {
        pthread_mutex_unlock(&p->ctrl_mu);
        lg_conn_path_failed(p, 0, "control channel stalled");
        return;
    }
    if (f->type == LG_CTRL_ACK)
        p->txq_last_ack = (int)p->txq_len;
    lg_ctrl_encode(p->txq + p->txq_len, f);
    p->txq_len += LG_CTRL_SIZE;
    txq_send_locked(p);
    pthread_mutex_unlock(&p->ctrl_mu);
}

void lg_path_ctrl_flush(struct lg_path *p)
{
    pthread_mutex_lock(&p->ctrl_mu);
    txq_send_locked(p);
    pthread_mutex_unlock(&p->ctrl_mu);
}

int lg_path_ctrl_read(struct lg_stream *s, void (*on_frame)(struct lg_path *, const struct lg_ctrl *))
{
    struct lg_path *p = s->path;
    for (;;) {
        struct iovec iov = {s->crx.buf + s->crx.got, sizeof(s->crx.buf) - s->crx.got};
        ssize_t n = lg_sock_readv(s->task.fd, &iov, 1);
        if (n == 0) {
            lg_conn_path_failed(p, 0, __atomic_load_n(&p->peer_bye, __ATOMIC_ACQUIRE)
                                          ? "closed by peer" : "connection closed by peer");
            return -1;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            lg_conn_path_failed(p, errno, "control channel");
            return -1;
        }
        s->crx.got += (size_t)n;
        size_t off = 0;
        for (; s->crx.got - off >= LG_CTRL_SIZE; off += LG_CTRL_SIZE) {
            struct lg_ctrl f;
            if (lg_ctrl_decode(s->crx.buf + off, &f) != 0) {
                lg_conn_path_failed(p, 0, "garbage on the control channel");
                return -1;
            }
            if (f.type == LG_CTRL_BYE)
                __atomic_store_n(&p->peer_bye, 1, __ATOMIC_RELEASE);
            else
                on_frame(p, &f);
        }
        memmove(s->crx.buf, s->crx.buf + off, s->crx.got - off);
        s->crx.got -= off;
    }
}
