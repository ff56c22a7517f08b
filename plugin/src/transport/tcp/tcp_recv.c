/* The TCP transport, receive side: the data stream readers that place chunks straight into
 * posted buffers (completion by coverage, epochs checked at every placement step), and the
 * transport ops of a receiving connection (tcp.h). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

#define LG_WORKER_RUN_BYTES (8u << 20) /* a worker yields after placing this much */

/* The connector's chunk size (its hello's word), which cuts every message of the connection. */
static inline uint32_t chunk_size_of(const struct lg_conn *c)
{
    return lg_tcp_ep(c->ep)->chunk_size;
}

static uint32_t waiter_bit(const struct lg_stream *s)
{
    return 1u << (s->path->index * LG_MAX_STREAMS + s->index - 1);
}

static void kick_waiters(struct lg_conn *c);

/* Under mu, slot free: a cleared coverage map for up to `nchunks` chunks (the heap array is
 * kept for the slot's next posts: no allocation in steady state). */
static int cover_prepare(struct lg_req *r, uint64_t nchunks)
{
    uint64_t words = (nchunks + 63) / 64;
    if (words <= 1) {
        r->cover = &r->cover_one;
    } else {
        if (words > r->cover_heap_words) {
            uint64_t *m = realloc(r->cover_heap, words * sizeof(*m));
            if (!m)
                return -1;
            r->cover_heap = m;
            r->cover_heap_words = words;
        }
        r->cover = r->cover_heap;
    }
    r->cover_words = words ? words : 1;
    memset(r->cover, 0, r->cover_words * sizeof(*r->cover));
    return 0;
}

/* Wakes the data streams waiting for a receive to be posted (from NCCL's thread: irecv) or
 * for an earlier message to be bound (bind_message). */
static void kick_waiters(struct lg_conn *c)
{
    uint32_t waiting = __atomic_exchange_n(&c->rx_waiting, 0, __ATOMIC_SEQ_CST);
    if (!waiting)
        return;
    uint32_t ph = lg_conn_enter(c);
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        struct lg_path *p = __atomic_load_n(&c->paths[pi], __ATOMIC_ACQUIRE);
        for (int i = 0; p && i < p->nstreams; i++)
            if (waiting & waiter_bit(&p->data[i]))
                lg_task_kick(&p->data[i].task);
    }
    lg_conn_exit(c, ph);
}

/* A placement step (a socket read into a posted buffer, or the accounting of a chunk) is
 * bracketed by `placing`: busy (UINT32_MAX) before the epoch is read, then that epoch + 1.
 * The monitor's commit stores the new epoch, then waits until no stream is busy in an older
 * epoch before it resets partial receives (Dekker: both sides store, then load, seq_cst). A
 * step that sees another epoch than its chunk's drops the chunk instead. */
static inline uint32_t gate_enter(struct lg_tcp_stream *ts, const struct lg_conn *c)
{
    __atomic_store_n(&ts->placing, UINT32_MAX, __ATOMIC_SEQ_CST);
    uint32_t e = __atomic_load_n(&c->epoch, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ts->placing, e + 1, __ATOMIC_RELEASE);
    return e;
}
static inline void gate_exit(struct lg_tcp_stream *ts)
{
    __atomic_store_n(&ts->placing, 0, __ATOMIC_RELEASE);
}

enum { MATCH_WAIT = 0, MATCH_PLACE = 1, MATCH_DROP = 2, MATCH_FAILED = -1 };

/* Under mu: binds message slot r (tag `tag`) to the earliest posted free buffer with its tag,
 * in whichever group (conn.h, "Grouped receives"). 1 once bound, 0 while no posted buffer
 * expects the tag, -1 without memory for the message's coverage of that buffer. Every slot
 * from unbound_lo to next_seq is held: a group with a free buffer is not reported, so the
 * window cannot have moved past it. */
static int bind_to_posted(struct lg_conn *c, struct lg_req *r, int tag)
{
    int lead = 1; /* every group before this one has all its buffers bound */
    for (uint64_t g = c->unbound_lo; g < c->next_seq;) {
        struct lg_req *h = &c->reqs[g % LG_WINDOW];
        int open = 0, hit = -1;
        for (int i = 0; i < h->g_n; i++) {
            if (h->sub[i].bound)
                continue;
            open++;
            if (hit < 0 && h->sub[i].tag == tag)
                hit = i;
        }
        if (hit >= 0) {
            /* coverage of this buffer's size: the group posted at r may have had smaller ones */
            if (cover_prepare(r, lg_chunk_count(h->sub[hit].cap, chunk_size_of(c))) != 0)
                return -1;
            h->sub[hit].bound = 1;
            open--;
            r->buf = h->sub[hit].buf;
            r->cap = h->sub[hit].cap;
            r->b_head = g;
            __atomic_store_n(&r->g_sub, hit, __ATOMIC_RELEASE); /* after buf, cap, tag */
        }
        if (lead && open == 0)
            c->unbound_lo = g + (uint64_t)h->g_n;
        else
            lead = 0;
        if (hit >= 0)
            return 1;
        g += (uint64_t)h->g_n;
    }
    return 0;
}

/* Inside a placement step: binds the message of the chunk in ts->rx.h to a posted buffer
 * (once; the binding outlives a resync, a replay brings the same tags). Messages are bound in
 * seq order, so a tag posted twice fills its buffers in the order the sender sent it. */
static int bind_message(struct lg_stream *s, struct lg_req *r, const struct lg_chunk_hdr *h)
{
    struct lg_conn *c = s->path->conn;
    int tag = (int)h->tag;
    /* Bound already (by an earlier chunk: its buffer and tag were written before g_sub; or
     * at post, by a transport that matches tags itself): no lock on the hot path. */
    if (__atomic_load_n(&r->g_sub, __ATOMIC_ACQUIRE) >= 0 &&
        (c->tr->matches_tags || r->g_tag == tag))
        return MATCH_PLACE;
    pthread_mutex_lock(&c->mu);
    if (r->g_tag_known && r->g_tag != tag) {
        int was = r->g_tag;
        pthread_mutex_unlock(&c->mu);
        lg_conn_peer_lied(c, "chunks of message #%llu carry tags %d and %d",
                          (unsigned long long)h->seq, was, tag);
        return MATCH_FAILED;
    }
    if (!r->g_tag_known) { /* written once per post: the lock-free path above reads it */
        r->g_tag = tag;
        r->g_tag_known = 1;
    }
    int bound = r->g_sub >= 0;
    if (!bound && c->bind_next == r->seq) {
        bound = bind_to_posted(c, r, tag);
        if (bound > 0)
            c->bind_next++;
    }
    if (!bound) /* an earlier message is not bound yet, or no posted buffer has the tag */
        __atomic_fetch_or(&c->rx_waiting, waiter_bit(s), __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    if (bound < 0) {
        lg_conn_fail(c, LG_FAIL_OTHER, ncclSystemError,
                     "no memory to track message #%llu in its receive buffer",
                     (unsigned long long)h->seq);
        __atomic_store_n(&s->path->state, LG_PATH_FAILED, __ATOMIC_RELEASE);
        return MATCH_FAILED;
    }
    if (!bound)
        return MATCH_WAIT;
    if (__atomic_load_n(&c->rx_waiting, __ATOMIC_SEQ_CST))
        kick_waiters(c); /* the next message may wait for this one's binding */
    return MATCH_PLACE;
}

/* Inside a placement step: what to do with the chunk in ts->rx.h. */
static int match_chunk(struct lg_stream *s, struct lg_tcp_stream *ts, uint32_t epoch)
{
    struct lg_conn *c = s->path->conn;
    const struct lg_chunk_hdr *h = &ts->rx.h;
    if (!lg_epoch_matches(h->epoch, epoch))
        return MATCH_DROP; /* from before a switch: no need to wait for its receive */
    /* Committed but its partial receives not reset yet: an honest sender sends nothing of
     * this epoch before our RESYNC, so this is a liar's, and placing it would race the reset. */
    if (__atomic_load_n(&c->rx_open, __ATOMIC_SEQ_CST) != epoch)
        return MATCH_DROP;
    if (__atomic_load_n(&c->posted, __ATOMIC_SEQ_CST) <= h->seq) {
        __atomic_fetch_or(&c->rx_waiting, waiter_bit(s), __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&c->posted, __ATOMIC_SEQ_CST) <= h->seq)
            return MATCH_WAIT;
    }
    struct lg_req *r = &c->reqs[h->seq % LG_WINDOW];
    uint32_t state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE); /* before r->seq */
    uint64_t rseq = (state & LG_REQ_POSTED) && !(state & LG_REQ_DONE)
                        ? __atomic_load_n(&r->seq, __ATOMIC_RELAXED) : h->seq;
    switch (lg_resync_chunk_verdict(h->epoch, epoch, h->seq, rseq, state)) {
    case LG_CHUNK_PLACE:
        break;
    case LG_CHUNK_STALE:
    case LG_CHUNK_DUP:
        return MATCH_DROP;
    default:
        lg_conn_path_failed(s->path, 0, "chunk for a message outside the window");
        return MATCH_FAILED;
    }
    int b = bind_message(s, r, h);
    if (b != MATCH_PLACE)
        return b;
    if (h->total > r->cap) {
        lg_conn_fail(c, LG_FAIL_OTHER, ncclInternalError,
                     "message %llu is %llu bytes, larger than its posted receive (%zu bytes)",
                     (unsigned long long)h->seq, (unsigned long long)h->total, r->cap);
        LG_WARN("recv conn %016llx: message %llu is %llu bytes, larger than its posted "
                "receive (%zu bytes)",
                (unsigned long long)c->nonce, (unsigned long long)h->seq,
                (unsigned long long)h->total, r->cap);
        __atomic_store_n(&s->path->state, LG_PATH_FAILED, __ATOMIC_RELEASE);
        return MATCH_FAILED;
    }
    uint64_t unknown = LG_TOTAL_UNKNOWN;
    if (!__atomic_compare_exchange_n(&r->total, &unknown, h->total, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        unknown != h->total) {
        lg_conn_path_failed(s->path, 0, "chunks disagree on the message size");
        return MATCH_FAILED;
    }
    /* The sender cuts every message the same way (chunk k at k * chunk_size, full length
     * but the last): anything else, or a chunk claimed twice, is a lie. */
    uint64_t k = lg_chunk_index(h, chunk_size_of(c));
    if (k == UINT64_MAX || k >= r->cover_words * 64) {
        lg_conn_peer_lied(c, "chunk at offset %llu, %u bytes, of message #%llu (%llu bytes) "
                          "is not one the sender cuts", (unsigned long long)h->offset, h->len,
                          (unsigned long long)h->seq, (unsigned long long)h->total);
        return MATCH_FAILED;
    }
    uint64_t bit = 1ull << (k % 64);
    if (__atomic_fetch_or(&r->cover[k / 64], bit, __ATOMIC_ACQ_REL) & bit) {
        lg_conn_peer_lied(c, "chunk %llu of message #%llu sent twice in epoch %u",
                          (unsigned long long)k, (unsigned long long)h->seq, epoch);
        return MATCH_FAILED;
    }
    ts->rx.epoch = epoch;
    return MATCH_PLACE;
}

static int read_failed(struct lg_stream *s, ssize_t n)
{
    if (n == 0) {
        lg_conn_path_eof(s->path, "data stream closed by peer");
        return 1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
    lg_conn_path_failed(s->path, errno, "data stream read");
    return 1;
}

/* Epoll events for a data stream: test() places small chunks of the active path inline. */
static void set_mode(struct lg_stream *s, int big)
{
    int inline_path = lg_params.poll_inline && lg_conn_active_path(s->path->conn) == s->path;
    lg_task_set_events(&s->task, inline_path ? EPOLLOUT | (big ? EPOLLIN : 0)
                                             : EPOLLIN | EPOLLOUT);
}

/* Inside a placement step of the chunk in ts->rx.h: takes what the header's read brought of its
 * payload (into the buffer, or dropped), then keeps the rest as the next header's start. */
static void take_ahead(struct lg_tcp_stream *ts, char *dst)
{
    size_t k = LG_MIN(ts->rx.ahead_len - ts->rx.ahead_used, ts->rx.h.len - ts->rx.done);
    if (dst && k) /* k 0: an empty message, whose buffer may be NULL */
        memcpy(dst + ts->rx.done, ts->rx.ahead + ts->rx.ahead_used, k);
    ts->rx.done += k;
    ts->rx.ahead_used += k;
    if (ts->rx.done == ts->rx.h.len) {
        size_t rest = ts->rx.ahead_len - ts->rx.ahead_used; /* < a header: it began in ahead[] */
        memcpy(ts->rx.hdr, ts->rx.ahead + ts->rx.ahead_used, rest);
        ts->rx.hgot = rest;
        ts->rx.ahead_used = ts->rx.ahead_len;
    }
    if (ts->rx.ahead_used == ts->rx.ahead_len)
        ts->rx.ahead_len = ts->rx.ahead_used = 0;
}

static void recv_stream_run(struct lg_task *t)
{
    struct lg_stream *s = lg_stream_of(t);
    struct lg_tcp_stream *ts = lg_tcp_stream_at(s->path->tp, s->index);
    struct lg_path *p = s->path;
    struct lg_conn *c = p->conn;
    /* On NCCL's thread (test() polling) place at most inline_send bytes, then hand over. */
    int on_app = !lg_progress_on_worker();
    /* A worker yields too after a while (its other tasks, a detach waiting on it). */
    size_t budget = on_app ? (size_t)lg_params.inline_send : LG_WORKER_RUN_BYTES;
    /* A read that brought less than it asked for emptied the socket: the next would only say
     * EAGAIN (new bytes raise a new edge, and test() polls again), so this run ends there. */
    int drained = 0;
    while (lg_path_up(p)) {
        if (!ts->rx.have_hdr) {
            if (ts->rx.hgot < LG_CHUNK_HDR_SIZE) {
                if (drained)
                    return;
                /* The header, and as much again ahead: a small chunk comes in one read. */
                size_t want = LG_CHUNK_HDR_SIZE - ts->rx.hgot;
                struct iovec iov[2] = {{ts->rx.hdr + ts->rx.hgot, want},
                                       {ts->rx.ahead, sizeof(ts->rx.ahead)}};
                ssize_t n = lg_sock_readv(t->fd, iov, 2);
                if (n <= 0) {
                    read_failed(s, n);
                    return;
                }
                drained = (size_t)n < want + sizeof(ts->rx.ahead);
                ts->rx.hgot += LG_MIN((size_t)n, want);
                ts->rx.ahead_len = (size_t)n > want ? (size_t)n - want : 0;
                ts->rx.ahead_used = 0;
                continue;
            }
            if (lg_chunk_decode(ts->rx.hdr, chunk_size_of(c), &ts->rx.h) != 0) {
                lg_conn_path_failed(p, 0, "bad chunk header");
                return;
            }
            lg_path_note_rx(p, lg_now_ns());
            ts->rx.have_hdr = 1;
            ts->rx.checked = 0;
            ts->rx.drop = 0;
            ts->rx.done = 0;
            ts->rx.hgot = 0;
            /* Small chunks are placed by test() on NCCL's thread; a big one is worth a worker
             * that wakes on every arrival (and reads in parallel with the other streams). */
            if (lg_params.poll_inline) {
                int big = ts->rx.h.len > lg_params.inline_send;
                __atomic_store_n(&ts->rx.big, big, __ATOMIC_RELEASE);
                set_mode(s, big);
            }
        }
        if (!ts->rx.checked) {
            uint32_t epoch = gate_enter(ts, c);
            int m = match_chunk(s, ts, epoch);
            gate_exit(ts);
            if (m == MATCH_WAIT || m == MATCH_FAILED)
                return;
            ts->rx.checked = 1;
            ts->rx.drop = m == MATCH_DROP;
        }
        const struct lg_chunk_hdr *h = &ts->rx.h;
        struct lg_req *r = &c->reqs[h->seq % LG_WINDOW];
        if (ts->rx.ahead_used < ts->rx.ahead_len) {
            if (!ts->rx.drop && gate_enter(ts, c) != ts->rx.epoch)
                ts->rx.drop = 1; /* a switch happened: its replay will bring this again */
            take_ahead(ts, ts->rx.drop ? NULL : r->buf + h->offset);
            gate_exit(ts);
        }
        if (ts->rx.done < h->len) {
            /* A big chunk belongs to the worker its header armed (see above). */
            if (on_app && h->len > lg_params.inline_send) {
                lg_task_kick(t); /* this run may have absorbed the worker's wake-up */
                return;
            }
            if (budget == 0) {
                lg_task_kick(t);
                return;
            }
            size_t rem = h->len - ts->rx.done;
            if (drained)
                return;
            if (ts->rx.drop) {
                /* MSG_TRUNC on TCP discards the bytes without copying them (the buffer is
                 * never written: it only has to exist, for checkers like valgrind). */
                static char sink[1 << 16];
                size_t ask = LG_MIN(rem, sizeof(sink));
                ssize_t n = recv(t->fd, sink, ask, MSG_TRUNC | MSG_DONTWAIT);
                if (n <= 0) {
                    read_failed(s, n);
                    return;
                }
                drained = (size_t)n < ask;
                budget -= LG_MIN(budget, (size_t)n);
                ts->rx.done += (size_t)n;
                continue;
            }
            /* Payload straight into the posted buffer, plus whatever of the next chunk's
             * header is already there: one syscall per chunk in steady state. */
            if (gate_enter(ts, c) != ts->rx.epoch) {
                gate_exit(ts);
                ts->rx.drop = 1; /* a switch happened: its replay will bring this again */
                continue;
            }
            struct iovec iov[2] = {{r->buf + h->offset + ts->rx.done, rem},
                                   {ts->rx.hdr, LG_CHUNK_HDR_SIZE}};
            ssize_t n = lg_sock_readv(t->fd, iov, 2);
            gate_exit(ts);
            if (n <= 0) {
                read_failed(s, n);
                return;
            }
            drained = (size_t)n < rem + LG_CHUNK_HDR_SIZE;
            budget -= LG_MIN(budget, (size_t)n);
            if ((size_t)n < rem) {
                ts->rx.done += (size_t)n;
                continue;
            }
            ts->rx.done = h->len;
            ts->rx.hgot = (size_t)n - rem;
        }
        ts->rx.have_hdr = 0;
        __atomic_store_n(&ts->rx.big, 0, __ATOMIC_RELEASE);
        if (ts->rx.drop)
            continue;
        int rc = 0;
        if (gate_enter(ts, c) == ts->rx.epoch) {
            __atomic_add_fetch(&r->placed, h->len, __ATOMIC_RELAXED);
            uint64_t done = __atomic_add_fetch(&r->chunks, 1, __ATOMIC_ACQ_REL);
            if (done == lg_chunk_count(h->total, chunk_size_of(c)))
                rc = lg_recv_complete(p, r, h->total, (h->flags & LG_CHUNK_F_KEPT) != 0);
        }
        gate_exit(ts);
        if (rc < 0)
            return;
    }
}

void lg_tcp_recv_handler(struct lg_task *t, uint32_t events)
{
    (void)events; /* errors and EOF surface through the reads */
    struct lg_stream *s = lg_stream_of(t);
    struct lg_tcp_stream *ts = lg_tcp_stream_at(s->path->tp, s->index);
    if (lg_params.poll_inline && !ts->rx.have_hdr)
        set_mode(s, 0); /* after a switch: the active path's streams go inline, others not */
    recv_stream_run(t);
    lg_recv_flush_due(s->path);
}

int lg_tcp_recv_prepare(struct lg_conn *c, struct lg_req *r, size_t maxcap)
{
    /* Covers the group's largest buffer; a message bound to a buffer of another group is
     * covered again for that buffer at its binding (bind_to_posted). */
    return cover_prepare(r, lg_chunk_count(maxcap, chunk_size_of(c)));
}

/* Monitor, a receiver's commit to epoch c->epoch (just stored): every reader drops what is not
 * of it from here; waits for those inside a placement step that began before (seq_cst pairs
 * with gate_enter), so that nothing late lands after the RESYNC. */
void lg_tcp_recv_commit_end(struct lg_conn *c)
{
    uint32_t epoch = __atomic_load_n(&c->epoch, __ATOMIC_SEQ_CST);
    for (int pi = 0; pi < LG_NPATHS; pi++) {
        struct lg_path *q = c->paths[pi];
        for (int k = 1; q && !q->retired && k <= q->nstreams; k++) {
            struct lg_tcp_stream *ts = lg_tcp_stream_at(q->tp, k);
            uint32_t st;
            while ((st = __atomic_load_n(&ts->placing, __ATOMIC_SEQ_CST)) != 0 && st != epoch + 1)
                sched_yield();
        }
    }
}

/* Streams that hold a chunk header for a receive not posted yet sleep until it is. */
void lg_tcp_recv_posted(struct lg_conn *c) { kick_waiters(c); }

/* NCCL's thread polls test() while receives are outstanding: it places the small chunks of
 * the active path itself instead of waking a worker (bounded; see recv_stream_run). The
 * stream the sender starts r's message on comes first (tcp_send.c: message k on stream
 * k % nstreams when it is free), and a single receive placed ends the look: test() answers
 * at once instead of after a read of every other stream. */
void lg_tcp_recv_progress(struct lg_conn *c, const struct lg_req *r)
{
    uint32_t ph = lg_conn_enter(c);
    struct lg_path *p = lg_conn_active_path(c);
    int n = lg_path_up(p) ? p->nstreams : 0;
    int first = n ? (int)(r->seq % (uint64_t)n) : 0;
    for (int i = 0; i < n && lg_path_up(p); i++) {
        struct lg_stream *s = &p->data[(first + i) % n];
        struct lg_tcp_stream *ts = lg_tcp_stream_at(p->tp, s->index);
        if (!__atomic_load_n(&ts->rx.big, __ATOMIC_ACQUIRE))
            lg_task_run(&s->task, 0);
        if (r->g_n == 1 && __atomic_load_n(&r->sub[0].done, __ATOMIC_ACQUIRE))
            break;
    }
    lg_conn_exit(c, ph);
}
