/* The TCP transport, send side: the data stream writers that take chunks from the
 * connection's cursor, and the transport ops of a sending connection (tcp.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "proto/upcall.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "transport/tcp/tcp.h"
#include "transport/tcp/tcp_conn.h"

#define LG_WORKER_RUN_CHUNKS 16

/* What a data stream asks of the cursor (lg_send_cut): its next chunk, or (peek) only
 * whether one waits; either way it parks if none does. */
struct cut {
    struct lg_tcp_conn *e;
    struct lg_tcp_stream *ts;
    int index; /* the stream's, 1..nstreams */
    int peek;
    struct lg_chunk_hdr h;
};

/* Under the connection's lock (lg_send_cut). */
static int cut_chunk(void *arg, const struct lg_out_cut *m)
{
    struct cut *a = arg;
    struct lg_tcp_conn *e = a->e;
    if (!m) {
        e->parked |= 1u << (a->index - 1);
        return LG_CUT_PEEK;
    }
    if (a->peek)
        return LG_CUT_PEEK;
    uint64_t off = e->cursor_chunk * e->chunk_size;
    uint64_t len = m->size - off < e->chunk_size ? m->size - off : e->chunk_size;
    a->h = (struct lg_chunk_hdr){.epoch = (uint16_t)m->epoch, .len = (uint32_t)len,
                                 .seq = m->seq, .offset = off, .total = m->size, .tag = m->tag,
                                 .flags = m->kept ? LG_CHUNK_F_KEPT : 0};
    a->ts->tx.payload = m->data + off;
    a->ts->tx.req = m->req;
    if (++e->cursor_chunk < lg_chunk_count(m->size, e->chunk_size))
        return LG_CUT_MORE;
    e->cursor_chunk = 0;
    return LG_CUT_LAST;
}

/* Takes the next chunk for stream `index` of path p, or parks the stream. Returns 1 if it
 * has a chunk. */
static int grab_chunk(struct lg_conn *c, struct lg_path *p, struct lg_tcp_stream *ts, int index)
{
    struct cut a = {.e = lg_tcp_ep(lg_conn_ep(c)), .ts = ts, .index = index};
    if (!lg_send_cut(c, p, cut_chunk, &a))
        return 0;
    lg_chunk_encode(ts->tx.hdr, &a.h);
    ts->tx.len = a.h.len;
    ts->tx.done = 0;
    __atomic_store_n(&ts->tx.active, 1, __ATOMIC_RELEASE);
    return 1;
}

/* A run has written its share: a worker (again) takes over if more chunks wait, else the
 * stream parks (same lock as isend's look at `parked`: no lost wake-up). */
static void hand_over(struct lg_conn *c, struct lg_path *p, struct lg_task *t, int index)
{
    struct cut a = {.e = lg_tcp_ep(lg_conn_ep(c)), .index = index, .peek = 1};
    if (lg_send_cut(c, p, cut_chunk, &a))
        lg_task_kick(t);
}

/* Anything readable on a send-side data stream is EOF or an error: the peer never writes. */
static int check_peer(struct lg_path *p, struct lg_task *t, uint32_t events)
{
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return 0;
    char b[64];
    struct iovec iov = {b, sizeof(b)};
    ssize_t n = lg_sock_readv(t->fd, &iov, 1);
    if (n == 0) {
        lg_conn_path_eof(p, "data stream closed by peer");
        return -1;
    }
    if (n > 0) {
        lg_conn_path_failed(p, 0, "unexpected bytes on a send stream");
        return -1;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        lg_conn_path_failed(p, errno, "data stream");
        return -1;
    }
    return 0;
}

void lg_tcp_send_handler(struct lg_task *t, uint32_t events)
{
    int index;
    struct lg_path *p = lg_stream_path(t, &index);
    struct lg_tcp_stream *ts = lg_tcp_stream_at(lg_path_tp(p), index);
    struct lg_conn *c = lg_path_conn(p);
    if (check_peer(p, t, events) != 0)
        return;
    /* A failed path's chunk is given back when the monitor retires the path; a path that
     * stops being active still finishes the chunk it is writing (TCP framing), which the
     * receiver drops by its epoch. */
    if (!lg_path_is_up(p))
        return;
    /* From NCCL's thread (inline send) write one chunk at most, then hand over; a worker
     * yields too after a few (its other tasks, a detach waiting on it). */
    int chunks_left = lg_progress_on_worker() ? LG_WORKER_RUN_CHUNKS : 1;
    for (;;) {
        if (!ts->tx.active) {
            if (chunks_left == 0) {
                hand_over(c, p, t, index);
                return;
            }
            if (!grab_chunk(c, p, ts, index))
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
            lg_req_writer_done(ts->tx.req);
        }
    }
}

/* isend, under mu, message seq just took its window slot: wakes as many parked streams as
 * the message has chunks, from stream seq % nstreams on (busy streams take more chunks by
 * themselves when they finish their current one). */
uint32_t lg_tcp_send_queued(struct lg_conn *c, uint64_t seq, size_t size)
{
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    uint64_t want = LG_MIN(lg_chunk_count(size, e->chunk_size), (uint64_t)e->nstreams);
    uint32_t wake = 0;
    for (int i = 0; i < e->nstreams && want; i++) {
        int k = (int)((seq + (uint64_t)i) % (uint64_t)e->nstreams);
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
    return lg_tcp_ep(lg_conn_ep(c))->cursor_chunk != 0;
}
int lg_tcp_send_to_boundary(struct lg_conn *c)
{
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    int mid = e->cursor_chunk != 0;
    e->cursor_chunk = 0;
    return mid;
}

/* Data may move again (a commit, a hold lifted): every stream counts as parked, so the next
 * post wakes it even if it was busy on the path left (the resume kicks them all anyway). */
static void park_all(void *arg)
{
    struct lg_tcp_conn *e = arg;
    e->parked = (uint32_t)((1ull << e->nstreams) - 1);
}
void lg_tcp_send_resume(struct lg_conn *c)
{
    lg_conn_locked(c, park_all, lg_tcp_ep(lg_conn_ep(c)));
}

/* isend posted r and unparked the streams in `wake`: a small message is written from NCCL's
 * thread (saving a thread hand-off), the rest by the workers. */
void lg_tcp_send_posted(struct lg_conn *c, size_t size, uint32_t wake)
{
    uint32_t ph;
    struct lg_path *p = lg_conn_enter_active(c, &ph);
    int inline_ok = size <= (size_t)lg_params.inline_send && !lg_progress_on_worker();
    for (int k = 0; p && k < lg_tcp_ep(lg_conn_ep(c))->nstreams; k++) {
        if (!(wake & (1u << k)))
            continue;
        if (inline_ok) {
            /* Small message: write it from NCCL's thread, saving a thread hand-off. */
            lg_task_run(lg_path_stream(p, k), 0);
            inline_ok = 0;
        } else {
            lg_task_kick(lg_path_stream(p, k));
        }
    }
    lg_conn_leave_active(c, ph);
}

/* A retired path's tasks are detached: a writer cut off mid-chunk gives its hold on the
 * message back (the replay on another path writes it whole). */
void lg_tcp_send_detached(struct lg_path *p)
{
    int n = lg_tcp_ep(lg_conn_ep(lg_path_conn(p)))->nstreams;
    for (int k = 1; k <= n; k++) {
        struct lg_tcp_stream *ts = lg_tcp_stream_at(lg_path_tp(p), k);
        if (__atomic_load_n(&ts->tx.active, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&ts->tx.active, 0, __ATOMIC_RELAXED);
            lg_req_writer_done(ts->tx.req);
        }
    }
}
