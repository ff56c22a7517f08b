/* The message window of a connection, as the transports and test() see it: a receive placed
 * (lg_recv_complete) and its acks, an ack taken by the sender, and completion (see window.h). */
#include "proto/window.h"

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/resync.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "runtime/wake.h"

/* Acks are cumulative, so a stream that places several messages in one run sends one ack
 * when it is about to sleep; big messages (or a long run) are acked at once so that the
 * sender's window keeps moving. Messages the sender kept a copy of (LG_CHUNK_F_KEPT) are
 * already complete there: their ack only frees the copy and the window slot, so it waits for
 * LG_ACK_LAZY_MSGS of them (a quarter of the window), the sender's POSTED asking for it, or
 * the monitor's next run (failover.c). */
#define LG_ACK_NOW_BYTES (256u << 10)
#define LG_ACK_NOW_MSGS 4
#define LG_ACK_LAZY_MSGS (LG_WINDOW / 4)

int lg_recv_oldest(struct lg_conn *c, uint64_t *base, uint64_t *placed)
{
    pthread_mutex_lock(&c->mu);
    uint64_t b = c->win.base, later = c->win.bits;
    pthread_mutex_unlock(&c->mu);
    const struct lg_req *r = &c->reqs[b % LG_WINDOW];
    uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    *base = b;
    *placed = (st & LG_REQ_POSTED) && !(st & LG_REQ_DONE) && r->seq == b
                  ? __atomic_load_n(&r->placed, __ATOMIC_RELAXED) : 0;
    return b < __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE) && (later || *placed);
}

void lg_recv_flush_ack(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    uint64_t placed = __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE);
    uint64_t sent = __atomic_load_n(&c->ack_sent, __ATOMIC_ACQUIRE);
    while (placed > sent) {
        if (__atomic_compare_exchange_n(&c->ack_sent, &sent, placed, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            struct lg_ctrl ack = {.type = LG_CTRL_ACK, .value = placed};
            lg_path_ctrl_send(p, &ack);
            return;
        }
    }
}

void lg_recv_flush_due(struct lg_path *p)
{
    struct lg_conn *c = p->conn;
    uint64_t placed = __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE);
    uint64_t sent = __atomic_load_n(&c->ack_sent, __ATOMIC_ACQUIRE);
    if (placed > sent && (__atomic_load_n(&c->ack_need, __ATOMIC_ACQUIRE) > sent ||
                          placed - sent >= LG_ACK_LAZY_MSGS))
        lg_recv_flush_ack(p);
}

/* Under mu: acks up to n are awaited. */
static void need_ack_locked(struct lg_conn *c, uint64_t n)
{
    if (n > __atomic_load_n(&c->ack_need, __ATOMIC_RELAXED))
        __atomic_store_n(&c->ack_need, n, __ATOMIC_RELEASE);
}

void lg_recv_ack_asked(struct lg_path *p, uint64_t n)
{
    pthread_mutex_lock(&p->conn->mu);
    need_ack_locked(p->conn, n);
    pthread_mutex_unlock(&p->conn->mu);
    lg_recv_flush_due(p);
}

/* A receive slot is free once its post was reported and its message placed, whichever of
 * the two comes last (they may belong to different groups): the one that finds the other's
 * bit frees the slot, else it sets its own. */
static void slot_settle(struct lg_req *r, uint32_t other, uint32_t mine)
{
    uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    while (!__atomic_compare_exchange_n(&r->state, &st, (st & other) ? 0 : st | mine, 1,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Inside a placement step. -1 on a protocol error (the path failed). */
int lg_recv_complete(struct lg_path *p, struct lg_req *r, uint64_t size, int kept)
{
    struct lg_conn *c = p->conn;
    uint64_t seq = r->seq; /* read before DONE: the slot may be reused right after */
    /* Counted as placed before NCCL can see it done: a caller that closes right after its
     * last receive says in its BYE that it holds everything it saw complete. */
    pthread_mutex_lock(&c->mu);
    int adv = lg_seqwin_mark(&c->win, seq);
    uint64_t placed = c->win.base;
    if (adv > 0)
        __atomic_store_n(&c->placed, placed, __ATOMIC_RELEASE);
    if (adv >= 0 && !kept)
        need_ack_locked(c, seq + 1); /* the sender's request waits for this ack */
    pthread_mutex_unlock(&c->mu);
    if (adv < 0) {
        lg_conn_path_failed(p, 0, "message completed twice");
        return -1;
    }
    /* What test() reports for the buffer the message filled (bound before any placement),
     * then the slot: free if its own post was reported already, else placed. */
    struct lg_subrecv *sub = &lg_req_bound_group(c, r)->sub[__atomic_load_n(&r->g_sub,
                                                                              __ATOMIC_ACQUIRE)];
    sub->size = size;
    __atomic_store_n(&sub->done, 1, __ATOMIC_RELEASE);
    slot_settle(r, LG_REQ_REPORTED, LG_REQ_DONE);
    if (adv > 0 && (size >= LG_ACK_NOW_BYTES ||
                    placed - __atomic_load_n(&c->ack_sent, __ATOMIC_ACQUIRE) >=
                        (kept ? LG_ACK_LAZY_MSGS : LG_ACK_NOW_MSGS)))
        lg_recv_flush_ack(p);
    return 0;
}

int lg_conn_take_ack(struct lg_conn *c, uint64_t n)
{
    /* Acks are cumulative and may be read by a worker or by test() (and, with failover, on
     * either path): keep the maximum. Only messages wholly handed to the transport can have
     * been placed: an ack beyond the cursor would complete a send whose buffer is still to
     * be read. Checked and raised under mu, like the cursor's rewind, so neither can slip
     * between the other's check and store. */
    pthread_mutex_lock(&c->mu);
    uint64_t sent = c->cursor_seq > c->sent_hi ? c->cursor_seq : c->sent_hi;
    int ok = lg_ack_plausible(n, sent);
    if (ok && n > __atomic_load_n(&c->acked, __ATOMIC_RELAXED))
        __atomic_store_n(&c->acked, n, __ATOMIC_RELEASE);
    if (ok && c->tr->chunks && n > c->cursor_seq) {
        /* After a rewind: the receiver held these (completed out of order before the
         * switch); nothing below n is sent again. */
        c->cursor_seq = n;
        lg_conn_to_boundary(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (!ok) {
        lg_conn_peer_lied(c, "ACK of %llu messages, but only %llu were sent",
                          (unsigned long long)n, (unsigned long long)sent);
        return -1;
    }
    return 0;
}


/* ---- sends kept in a copy (LINKGUARD_SEND_COPY) --------------------------------------------- */

int lg_send_slot_free(struct lg_conn *c, const struct lg_req *r)
{
    uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    /* A kept send NCCL saw complete holds its slot (and copy) until acked and written out:
     * a replay starts at the receiver's count, never below acked. */
    return st == 0 || (st == LG_REQ_KEPT && __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) > r->seq &&
                       __atomic_load_n(&r->writers, __ATOMIC_ACQUIRE) == 0);
}

void lg_send_keep(struct lg_conn *c, struct lg_req *r, const void *data, size_t size,
                  const struct lg_inner_mr *mr)
{
    r->kept = 0;
    __atomic_store_n(&r->released, 0, __ATOMIC_RELAXED);
    int how = c->tr->sends_copies;
    if (!lg_params.send_copy || size > (size_t)lg_params.send_copy || how == LG_COPY_NONE ||
        (c->tr->may_keep && !c->tr->may_keep(c, mr)))
        return;
    /* A transport that registers the copy for its replays gets it at full size once, so
     * that it never moves under a registration. */
    size_t want = how == LG_COPY_REPLAYS ? (size_t)lg_params.send_copy : size;
    if (want > r->copy_cap || !r->copy) {
        char *m = realloc(r->copy, want ? want : 1);
        if (!m)
            return; /* no copy: the send waits for its ack, as a big one does */
        r->copy = m;
        r->copy_cap = want;
    }
    memcpy(r->copy, data, size);
    r->kept = 1;
    if (how == LG_COPY_SENDS) {
        r->data = r->copy;
        __atomic_store_n(&r->released, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&c->kept_hi, r->seq + 1, __ATOMIC_RELEASE);
}

void lg_send_ask_ack(struct lg_conn *c)
{
    /* Only kept sends have their acks batched, unless the transport asks for others. */
    if (__atomic_load_n(&c->kept_hi, __ATOMIC_ACQUIRE) <= __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE))
        return;
    lg_send_ask_ack_upto(c, __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE));
}

void lg_send_ask_ack_upto(struct lg_conn *c, uint64_t n)
{
    uint64_t asked = __atomic_load_n(&c->ack_asked, __ATOMIC_ACQUIRE);
    do {
        if (asked >= n)
            return; /* asked for this much already */
    } while (!__atomic_compare_exchange_n(&c->ack_asked, &asked, n, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    struct lg_ctrl ask = {.type = LG_CTRL_POSTED, .value = n};
    lg_conn_ctrl_out(c, &ask);
}

/* How often a closing sender looks for the acks of its kept sends. */
#define LG_SETTLE_POLL_MS 1

void lg_send_settle(struct lg_conn *c)
{
    uint64_t hi = __atomic_load_n(&c->kept_hi, __ATOMIC_ACQUIRE);
    if (c->kind != LG_CONN_SEND || __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) >= hi)
        return;
    lg_send_ask_ack(c);
    /* The monitor still runs the connection: a failover meanwhile replays from the copies.
     * Bounded like any delivery: a connection that cannot deliver fails by then. */
    uint64_t end = lg_now_ns() + LG_MS(lg_params.dead_timeout_ms);
    while (__atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) < hi &&
           !__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&c->peer_closed, __ATOMIC_ACQUIRE) && lg_now_ns() < end) {
        lg_conn_poll_ctrl(c);
        poll(NULL, 0, LG_SETTLE_POLL_MS);
    }
}

static int req_complete(struct lg_req *r)
{
    if (r->conn->kind == LG_CONN_SEND) {
        if (r->kept && __atomic_load_n(&r->released, __ATOMIC_ACQUIRE))
            return 1; /* NCCL's buffer is not read again: the copy is */
        /* Placed at the receiver (acked), and no writer reads its buffer any more (so NCCL
         * may reuse it as soon as we say done), or the writer's hold is a transport request
         * nobody tests once the peer closed (hold_is_request, transport.h). */
        return __atomic_load_n(&r->conn->acked, __ATOMIC_ACQUIRE) > r->seq &&
               (__atomic_load_n(&r->writers, __ATOMIC_ACQUIRE) == 0 ||
                (r->conn->tr->hold_is_request &&
                 __atomic_load_n(&r->conn->peer_closed, __ATOMIC_ACQUIRE)));
    }
    /* A grouped receive: each of its buffers holds its message. */
    for (int i = 0; i < r->g_n; i++)
        if (!__atomic_load_n(&r->sub[i].done, __ATOMIC_ACQUIRE))
            return 0;
    return 1;
}

ncclResult_t lg_req_test(struct lg_req *r, int *done, int *sizes)
{
    struct lg_conn *c = r->conn;
    lg_monitor_health_poll();
    /* One load per poll (a store only after the monitor cleared it): no clock on this path. */
    if (c->kind == LG_CONN_RECV && !__atomic_load_n(&c->polled, __ATOMIC_RELAXED))
        __atomic_store_n(&c->polled, 1, __ATOMIC_RELAXED);
    int complete = req_complete(r);
    if (!complete) {
        c->tr->progress(c, r); /* the transport moves data on NCCL's thread, bounded */
        complete = req_complete(r);
    }
    if (complete) {
        *done = 1;
        if (c->kind == LG_CONN_SEND) {
            if (sizes)
                sizes[0] = (int)r->size;
            /* A kept send not yet acked keeps its slot (lg_send_slot_free). */
            int held = r->kept && (__atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) <= r->seq ||
                                   __atomic_load_n(&r->writers, __ATOMIC_ACQUIRE) != 0);
            __atomic_store_n(&r->state, held ? LG_REQ_KEPT : 0, __ATOMIC_RELEASE);
            return ncclSuccess;
        }
        /* sizes[i]: what the sender sent into buffer i (never more than posted). */
        for (int i = r->g_n - 1; i >= 0; i--) {
            if (sizes)
                sizes[i] = (int)r->sub[i].size;
            slot_settle(&c->reqs[(r->seq + (uint64_t)i) % LG_WINDOW], LG_REQ_DONE,
                        LG_REQ_REPORTED);
        }
        return ncclSuccess;
    }
    *done = 0;
    return (ncclResult_t)__atomic_load_n(&c->error, __ATOMIC_ACQUIRE);
}
