/* The fake inner plugin's "loop" mode (tests/fake_inner.c): a real in-process transport, so
 * that wrap mode can run whole connections over it (tests/test_wrap.c). Listen, connect and
 * accept pair a send comm with a receive comm; messages match in posted order and are copied
 * into the posted buffer when both sides are there. A grouped receive (n buffers) takes the
 * sends in order by tag, as NCCL's IB transport does: a send goes to the free buffer of its
 * tag in the oldest receive not yet filled, and waits (with every send behind it) while that
 * receive has none; the receive completes once all its buffers are filled. A send completes
 * only once its data is copied, i.e. placed at the receiver, as RC queue pairs guarantee (so
 * a send can complete while the rest of its group is still to come), unless a test asks for
 * early completion (fake_inner.h: early_send); closing either comm
 * fences the pair (nothing is copied afterwards) and drops its requests. One mutex guards
 * everything: the tests run both sides of every connection in one process. */
#ifndef LG_FAKE_INNER_LOOP_H
#define LG_FAKE_INNER_LOOP_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_inner.h"
#include "nccl_net_abi.h"

#define LOOP_COMMS 256
#define LOOP_REQS 2048
#define LOOP_DEPTH 64
#define LOOP_MAGIC 0x4c4f4f50u /* "LOOP" */
#define LOOP_MAXN 8             /* buffers of a grouped receive */

enum { LOOP_LISTEN = 1, LOOP_SEND, LOOP_RECV };

struct loop_req {
    int used, done;
    int early, tested; /* an early send: buf is its own copy; test() saw it done */
    struct loop_comm *comm;
    void *buf;
    size_t size; /* send: bytes */
    /* its n buffers (a send: 1), tags and sizes (a receive's: capacities, then bytes placed) */
    int n;
    unsigned filled; /* bit i: buffer i holds a message */
    void *bufs[LOOP_MAXN];
    size_t sizes[LOOP_MAXN];
    int tags[LOOP_MAXN];
};

struct loop_comm {
    int used, kind, dev;
    uint64_t ctx_id;           /* commId of the context it was made in */
    struct loop_comm *peer;    /* send <-> receive */
    struct loop_comm *pending; /* listen: a receive comm connect made, for accept */
    struct loop_req *q[LOOP_DEPTH];
    int head, tail;            /* q[head % DEPTH] is the oldest unmatched request */
};

static pthread_mutex_t loop_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_inner_stats *loop_st; /* fake_inner.c's */
static struct loop_comm loop_comms[LOOP_COMMS];
static struct loop_req loop_reqs[LOOP_REQS];

/* A comm handle from linkguard, or NULL if it is not one of ours (the other modes' tokens). */
static struct loop_comm *loop_comm_of(void *p)
{
    struct loop_comm *c = p;
    if (c < loop_comms || c >= loop_comms + LOOP_COMMS || !c->used)
        return NULL;
    return c;
}

static struct loop_comm *loop_comm_new(int kind, int dev, uint64_t ctx_id)
{
    for (int i = 0; i < LOOP_COMMS; i++)
        if (!loop_comms[i].used) {
            memset(&loop_comms[i], 0, sizeof(loop_comms[i]));
            loop_comms[i] = (struct loop_comm){.used = 1, .kind = kind, .dev = dev,
                                               .ctx_id = ctx_id};
            return &loop_comms[i];
        }
    return NULL;
}

/* An early send is freed by whichever comes last, its placement or its test(); its copy
 * goes with its placement (or its comm's close). Under loop_mu. */
static void loop_req_free_early(struct loop_req *a)
{
    free(a->buf);
    a->buf = NULL;
    a->early = 0;
    if (a->tested)
        a->used = 0;
}

/* Copies matching messages of a pair while both comms are open (under loop_mu). */
static void loop_match(struct loop_comm *s)
{
    struct loop_comm *r = s ? s->peer : NULL;
    if (s && __atomic_load_n(&loop_st->stall_dev, __ATOMIC_RELAXED) == s->dev + 1)
        return; /* hung */
    while (s && r && s->head < s->tail && r->head < r->tail) {
        struct loop_req *a = s->q[s->head % LOOP_DEPTH], *b = r->q[r->head % LOOP_DEPTH];
        int i = 0;
        while (i < b->n && ((b->filled >> i & 1) || b->tags[i] != a->tags[0]))
            i++;
        if (i == b->n)
            return; /* no free buffer of its tag in the oldest receive: the send waits */
        s->head++;
        size_t n = a->size <= b->sizes[i] ? a->size : b->sizes[i];
        memcpy(b->bufs[i], a->buf, n);
        b->sizes[i] = n;
        b->filled |= 1u << i;
        a->done = 1;
        if (a->early)
            loop_req_free_early(a);
        if (b->filled == (1u << b->n) - 1) {
            b->done = 1;
            r->head++;
        }
        __atomic_store_n(&loop_st->placed_dev, r->dev, __ATOMIC_RELAXED);
    }
}

static ncclResult_t loop_listen(int dev, uint64_t ctx_id, void *handle, void **l)
{
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *c = loop_comm_new(LOOP_LISTEN, dev, ctx_id);
    pthread_mutex_unlock(&loop_mu);
    if (!c)
        return ncclSystemError;
    uint32_t magic = LOOP_MAGIC, idx = (uint32_t)(c - loop_comms);
    memcpy(handle, &magic, 4);
    memcpy((char *)handle + 4, &idx, 4);
    *l = c;
    return ncclSuccess;
}

static ncclResult_t loop_connect(int dev, uint64_t ctx_id, void *handle, void **s)
{
    uint32_t magic, idx;
    memcpy(&magic, handle, 4);
    memcpy(&idx, (char *)handle + 4, 4);
    if (magic != LOOP_MAGIC || idx >= LOOP_COMMS)
        return ncclInvalidUsage;
    ncclResult_t rc = ncclSuccess;
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *l = &loop_comms[idx];
    *s = NULL;
    if (!l->used || l->kind != LOOP_LISTEN) {
        rc = ncclSystemError; /* closed meanwhile */
    } else if (!l->pending) {
        struct loop_comm *a = loop_comm_new(LOOP_SEND, dev, ctx_id);
        struct loop_comm *b = a ? loop_comm_new(LOOP_RECV, l->dev, l->ctx_id) : NULL;
        if (b) {
            a->peer = b;
            b->peer = a;
            l->pending = b;
            *s = a;
        } else {
            if (a)
                a->used = 0;
            rc = ncclSystemError;
        }
    } /* else: accept has not taken the previous one yet; try again */
    pthread_mutex_unlock(&loop_mu);
    return rc;
}

static ncclResult_t loop_accept(void *lp, void **r)
{
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *l = loop_comm_of(lp);
    *r = l ? l->pending : NULL;
    if (l)
        l->pending = NULL;
    pthread_mutex_unlock(&loop_mu);
    return l ? ncclSuccess : ncclInternalError;
}

static struct loop_req *loop_req_new(struct loop_comm *c, void *buf, size_t size)
{
    for (int i = 0; i < LOOP_REQS; i++)
        if (!loop_reqs[i].used) {
            loop_reqs[i] = (struct loop_req){.used = 1, .comm = c, .buf = buf, .size = size};
            return &loop_reqs[i];
        }
    return NULL;
}

/* One request of `kind`: a send of (buf[0], size[0], tag[0]), or a receive of n buffers. */
static ncclResult_t loop_post(void *comm, int kind, int n, void **buf, const size_t *size,
                              const int *tag, void **request)
{
    if (n < 1 || n > LOOP_MAXN || (kind == LOOP_SEND && n != 1))
        return ncclInternalError;
    ncclResult_t rc = ncclSuccess;
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *c = loop_comm_of(comm);
    *request = NULL;
    if (!c || c->kind != kind) {
        rc = ncclInternalError;
    } else if (c->tail - c->head < LOOP_DEPTH &&
               (*request = loop_req_new(c, buf[0], size[0]))) {
        struct loop_req *q = *request;
        q->n = n;
        for (int i = 0; i < n; i++) {
            q->bufs[i] = buf[i];
            q->sizes[i] = size[i];
            q->tags[i] = tag ? tag[i] : 0;
        }
        char *copy = kind == LOOP_SEND && __atomic_load_n(&loop_st->early_send, __ATOMIC_RELAXED)
                         ? malloc(size[0] ? size[0] : 1) : NULL;
        if (copy) { /* else (no memory) an ordinary send */
            memcpy(copy, buf[0], size[0]);
            q->buf = copy;
            q->early = q->done = 1;
        }
        c->q[c->tail++ % LOOP_DEPTH] = *request;
        loop_match(kind == LOOP_SEND ? c : c->peer);
    }
    pthread_mutex_unlock(&loop_mu);
    return rc;
}

/* 1 when `request` is a loop request: *done (and *size, for receives) filled in. */
static int loop_test(void *request, int *done, int *size)
{
    struct loop_req *q = request;
    if (q < loop_reqs || q >= loop_reqs + LOOP_REQS)
        return 0;
    pthread_mutex_lock(&loop_mu);
    *done = q->used && q->done;
    if (*done) {
        for (int i = 0; size && i < q->n; i++)
            size[i] = (int)q->sizes[i];
        q->tested = 1;
        if (!q->early) /* an early send not placed yet stays queued */
            q->used = 0;
    }
    pthread_mutex_unlock(&loop_mu);
    return 1;
}

/* A flush request: done at once; the device of its comm is recorded. */
static ncclResult_t loop_flush(void *comm, void **request, struct fake_inner_stats *st)
{
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *c = loop_comm_of(comm);
    struct loop_req *q = c && c->kind == LOOP_RECV ? loop_req_new(c, NULL, 0) : NULL;
    if (q) {
        q->done = 1;
        __atomic_store_n(&st->flush_dev, c->dev, __ATOMIC_RELAXED);
    }
    *request = q;
    pthread_mutex_unlock(&loop_mu);
    return q ? ncclSuccess : ncclInternalError;
}

/* Closing a comm fences its pair: nothing is copied from then on, and its requests are gone
 * (linkguard tests none of them after a close). */
static void loop_close(void *comm)
{
    pthread_mutex_lock(&loop_mu);
    struct loop_comm *c = loop_comm_of(comm);
    if (c) {
        for (int i = 0; i < LOOP_REQS; i++)
            if (loop_reqs[i].used && loop_reqs[i].comm == c) {
                if (loop_reqs[i].early)
                    free(loop_reqs[i].buf); /* never placed: lost with the comm */
                loop_reqs[i] = (struct loop_req){0};
            }
        if (c->peer)
            c->peer->peer = NULL;
        if (c->pending) { /* never accepted */
            if (c->pending->peer)
                c->pending->peer->peer = NULL;
            c->pending->used = 0;
        }
        c->used = 0;
    }
    pthread_mutex_unlock(&loop_mu);
}

#endif
