/* The TCP transport, send side: the data stream writers that take chunks from the
 * connection's cursor, and the transport ops of a sending connection (tcp.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "proto/conn.h"
#include "proto/upcall.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "transport/tcp/tcp.h"
#include "transport/tcp/tcp_conn.h"

#define LG_WORKER_RUN_CHUNKS 16

/* Under mu: stream s may take a new chunk (its path carries the committed epoch and no
 * switch holds chunks back). */
static int may_grab(struct lg_conn *c, const struct lg_tcp_conn *e, struct lg_stream *s)
{
    if (c->cursor_seq >= __atomic_load_n(&c->posted, __ATOMIC_RELAXED) ||
        c->hold == LG_HOLD_ALL || (c->hold == LG_HOLD_BOUNDARY && e->cursor_chunk == 0))
        return 0;
    return s->path == c->active_path && c->paths[c->active] == s->path &&
           lg_path_up(s->path);
}

/* Takes the next chunk for stream s, or parks the stream. Returns 1 if s has a chunk. */
static int grab_chunk(struct lg_conn *c, struct lg_stream *s)
{
    struct lg_tcp_stream *ts = lg_tcp_stream_at(s->path->tp, s->index);
    struct lg_tcp_conn *e = lg_tcp_ep(c->ep);
    pthread_mutex_lock(&c->mu);
    if (!may_grab(c, e, s)) {
        e->parked |= 1u << (s->index - 1);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    struct lg_req *r = &c->reqs[c->cursor_seq % LG_WINDOW];
    uint64_t off = e->cursor_chunk * e->chunk_size;
    uint64_t len = r->size - off < e->chunk_size ? r->size - off : e->chunk_size;
    struct lg_chunk_hdr h = {.epoch = (uint16_t)c->epoch, .len = (uint32_t)len,
                             .seq = c->cursor_seq, .offset = off, .total = r->size,
                             .tag = (uint32_t)r->tag, .flags = r->kept ? LG_CHUNK_F_KEPT : 0};
    ts->tx.payload = r->data + off;
    ts->tx.req = r;
    /* Taken under mu, like a rewind: completion waits for this hold on the buffer. */
    __atomic_add_fetch(&r->writers, 1, __ATOMIC_ACQ_REL);
    if (++e->cursor_chunk == lg_chunk_count(r->size, e->chunk_size)) {
        c->cursor_seq++;
        e->cursor_chunk = 0;
    }
    pthread_mutex_unlock(&c->mu);
    lg_chunk_encode(ts->tx.hdr, &h);
    ts->tx.len = (uint32_t)len;
    ts->tx.done = 0;
    __atomic_store_n(&ts->tx.active, 1, __ATOMIC_RELEASE);
    return 1;
}

/* A run has written its share: a worker (again) takes over if more chunks wait, else the
 * stream parks (same lock as isend's look at `parked`: no lost wake-up). */
static void hand_over(struct lg_conn *c, struct lg_stream *s)
{
    struct lg_tcp_conn *e = lg_tcp_ep(c->ep);
    pthread_mutex_lock(&c->mu);
    int more = may_grab(c, e, s);
    if (!more)
        e->parked |= 1u << (s->index - 1);
    pthread_mutex_unlock(&c->mu);
    if (more)
        lg_task_kick(&s->task);
}

/* Anything readable on a send-side data stream is EOF or an error: the peer never writes. */
static int check_peer(struct lg_stream *s, uint32_t events)
{
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return 0;
    char b[64];
    struct iovec iov = {b, sizeof(b)};
    ssize_t n = lg_sock_readv(s->task.fd, &iov, 1);
    if (n == 0) {
        lg_conn_path_eof(s->path, "data stream closed by peer");
        return -1;
    }
    if (n > 0) {
        lg_conn_path_failed(s->path, 0, "unexpected bytes on a send stream");
        return -1;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        lg_conn_path_failed(s->path, errno, "data stream");
        return -1;
    }
    return 0;
}

void lg_tcp_send_handler(struct lg_task *t, uint32_t events)
{
    struct lg_stream *s = lg_stream_of(t);
    struct lg_tcp_stream *ts = lg_tcp_stream_at(s->path->tp, s->index);
    struct lg_path *p = s->path;
    struct lg_conn *c = p->conn;
    if (check_peer(s, events) != 0)
        return;
    /* A failed path's chunk is given back when the monitor retires the path; a path that
     * stops being active still finishes the chunk it is writing (TCP framing), which the
     * receiver drops by its epoch. */
    if (!lg_path_up(p))
        return;
    /* From NCCL's thread (inline send) write one chunk at most, then hand over; a worker
     * yields too after a few (its other tasks, a detach waiting on it). */
    int chunks_left = lg_progress_on_worker() ? LG_WORKER_RUN_CHUNKS : 1;
    for (;;) {
        if (!ts->tx.active) {
            if (chunks_left == 0) {
                hand_over(c, s);
                return;
            }
            if (!grab_chunk(c, s))
                return;
            chunks_left--;
        }
        struct iovec iov[2];
        int n = 0;
        if (ts->tx.done < LG_CHUNK_HDR_SIZE)
            iov[n++] = (struct iovec){ts->tx.hdr + ts->tx.done, LG_CHUNK_HDR_SIZE - ts->tx.done};
        size_t pdone = ts->tx.done > LG_CHUNK_HDR_SIZE ? ts->tx.done - LG_CHUNK_HDR_SIZE : 0;
        if (ts->tx.len > pdone)
            iov[n++] = (struct iovec){(void *)(ts->tx.payload + pdone), ts->tx.len - pdone};
        ssize_t w = lg_sock_writev(t->fd, iov, n);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                lg_conn_path_failed(p, errno, "data stream write");
            return; /* EAGAIN: edge-triggered EPOLLOUT brings us back */
        }
        ts->tx.done += (size_t)w;
        if (ts->tx.done == LG_CHUNK_HDR_SIZE + (size_t)ts->tx.len) {
            __atomic_store_n(&ts->tx.active, 0, __ATOMIC_RELAXED);
            /* A send completes only once no writer reads its buffer (test() checks this
             * count too): the ack alone can beat the writer's return. The slot cannot be
             * reused before this store, which completion waits for. */
            __atomic_sub_fetch(&ts->tx.req->writers, 1, __ATOMIC_RELEASE);
        }
    }
}

/* isend, under mu, r just took its window slot: wakes as many parked streams as the message
 * has chunks, from stream r->seq % nstreams on (busy streams take more chunks by themselves
 * when they finish their current one); none while a switch holds chunks back. */
uint32_t lg_tcp_send_queued(struct lg_conn *c, const struct lg_req *r)
{
    struct lg_tcp_conn *e = lg_tcp_ep(c->ep);
    uint64_t want = LG_MIN(lg_chunk_count(r->size, e->chunk_size), (uint64_t)c->nstreams);
    uint32_t wake = 0;
    for (int i = 0; i < c->nstreams && want && c->hold == LG_HOLD_NONE; i++) {
        int k = (int)((r->seq + (uint64_t)i) % (uint64_t)c->nstreams);
        if (e->parked & (1u << k)) {
            wake |= 1u << k;
            want--;
        }
    }
    e->parked &= ~wake;
    return wake;
}

/* The cursor (under mu): inside a message, and back to its start (transport.h). */
int lg_tcp_send_mid_message(const struct lg_conn *c)
{
    return lg_tcp_ep(c->ep)->cursor_chunk != 0;
}
int lg_tcp_send_to_boundary(struct lg_conn *c)
{
    struct lg_tcp_conn *e = lg_tcp_ep(c->ep);
    int mid = e->cursor_chunk != 0;
    e->cursor_chunk = 0;
    return mid;
}

/* Data may move again (a commit, a hold lifted): every stream counts as parked, so the next
 * post wakes it even if it was busy on the path left (the resume kicks them all anyway). */
void lg_tcp_send_resume(struct lg_conn *c)
{
    pthread_mutex_lock(&c->mu);
    lg_tcp_ep(c->ep)->parked = (uint32_t)((1ull << c->nstreams) - 1);
    pthread_mutex_unlock(&c->mu);
}

/* isend posted r and unparked the streams in `wake`: a small message is written from NCCL's
 * thread (saving a thread hand-off), the rest by the workers. */
void lg_tcp_send_posted(struct lg_conn *c, const struct lg_req *r, uint32_t wake)
{
    uint32_t ph = lg_conn_enter(c);
    struct lg_path *p = lg_conn_active_path(c);
    int inline_ok = r->size <= (size_t)lg_params.inline_send && !lg_progress_on_worker();
    for (int k = 0; p && k < c->nstreams; k++) {
        if (!(wake & (1u << k)))
            continue;
        if (inline_ok) {
            /* Small message: write it from NCCL's thread, saving a thread hand-off. */
            lg_task_run(&p->data[k].task, 0);
            inline_ok = 0;
        } else {
            lg_task_kick(&p->data[k].task);
        }
    }
    lg_conn_exit(c, ph);
}

/* A retired path's tasks are detached: a writer cut off mid-chunk gives its hold on the
 * message back (the replay on another path writes it whole). */
void lg_tcp_send_detached(struct lg_path *p)
{
    for (int k = 1; k <= p->nstreams; k++) {
        struct lg_tcp_stream *ts = lg_tcp_stream_at(p->tp, k);
        if (__atomic_load_n(&ts->tx.active, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&ts->tx.active, 0, __ATOMIC_RELAXED);
            __atomic_sub_fetch(&ts->tx.req->writers, 1, __ATOMIC_RELEASE);
        }
    }
}
