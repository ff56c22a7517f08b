/* Shared by the in-process failover tests: a flow is one send/recv pair on device 0
 * (lg_test_pair.h) carrying messages of many sizes (0 B to about 1 MB), DEPTH in flight,
 * posted and completed in order from one thread as NCCL's proxy does, every byte verified
 * against a pattern of the message's number. */
#ifndef LG_TEST_FLOW_H
#define LG_TEST_FLOW_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/conn.h"

#include "lg_test.h"
#include "lg_test_pair.h"
#include "runtime/util.h"

#define DEPTH 8
#define MAXSZ 1100000u

/* Called at every step (a test's fake daemon beats from here too). */
static void (*flow_beat)(void) __attribute__((unused));

/* ---- flows --------------------------------------------------------------------------------- */

struct flow {
    void *s, *r;
    char *sb[DEPTH], *rb[DEPTH];
    uint8_t *want; /* a message's pattern, this flow's thread's only (pattern_fill) */
    void *sreq[DEPTH], *rreq[DEPTH];
    uint64_t posted_s, posted_r, done_s, done_r, count;
    int bad, errors;
    ncclResult_t last_rc;
};

static __attribute__((unused)) size_t msg_size(uint64_t i)
{
    static const size_t sizes[] = {0, 1, 100, 65536, 65537, 524288, 524289, 1048576 + 3,
                                   MAXSZ, 7, 300000};
    _Static_assert(1048576 + 3 <= MAXSZ, "sizes fit the buffers");
    return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* Message i's bytes [0, n) into `out`, a buffer no other thread touches. Left out of TSan's
 * instrumentation, whose per-byte calls in this loop were most of the TSan tier's time: the
 * buffers the plugin shares are written and compared with memcpy and memcmp, which the
 * sanitizers check over their whole range. */
__attribute__((no_sanitize("thread"))) static __attribute__((unused)) void
pattern_fill(uint8_t *out, uint64_t i, size_t n)
{
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(i * 131 + k * 7 + (k >> 9));
}

static __attribute__((unused)) void flow_init(struct flow *f)
{
    memset(f, 0, sizeof(*f));
    CHECK_EQ(pair_connect(&f->s, &f->r), 0);
    for (int i = 0; i < DEPTH; i++) {
        f->sb[i] = malloc(MAXSZ);
        f->rb[i] = malloc(MAXSZ);
    }
    f->want = malloc(MAXSZ);
}

static __attribute__((unused)) void flow_close(struct flow *f)
{
    if (f->s)
        lg_core_close_send(f->s);
    if (f->r)
        lg_core_close_recv(f->r);
    for (int i = 0; i < DEPTH; i++) {
        free(f->sb[i]);
        free(f->rb[i]);
    }
    free(f->want);
}

static __attribute__((unused)) void note_rc(struct flow *f, ncclResult_t rc)
{
    if (rc != ncclSuccess) {
        f->errors++;
        f->last_rc = rc;
    }
}

/* Posts the sends the window allows (each message filled with its pattern). */
static __attribute__((unused)) void flow_post_sends(struct flow *f)
{
    while (f->posted_s < f->count && f->posted_s - f->done_s < DEPTH) {
        int k = (int)(f->posted_s % DEPTH);
        size_t sz = msg_size(f->posted_s);
        pattern_fill(f->want, f->posted_s, sz);
        memcpy(f->sb[k], f->want, sz);
        void *req = NULL;
        ncclResult_t rc = lg_core_isend(f->s, f->sb[k], sz, 0, NULL, &req);
        note_rc(f, rc);
        if (rc != ncclSuccess || !req)
            return;
        f->sreq[k] = req;
        f->posted_s++;
    }
}

/* One pass: post what the window allows, complete in order, verify. */
static __attribute__((unused)) void flow_step(struct flow *f)
{
    if (flow_beat)
        flow_beat();
    if (f->errors)
        return;
    while (f->posted_r < f->count && f->posted_r - f->done_r < DEPTH) {
        int k = (int)(f->posted_r % DEPTH);
        void *d = f->rb[k], *req = NULL;
        size_t sz = MAXSZ;
        memset(f->rb[k], 0xee, 64); /* a stale buffer must not pass for a new message */
        ncclResult_t rc = lg_core_irecv(f->r, 1, &d, &sz, NULL, NULL, &req);
        note_rc(f, rc);
        if (rc != ncclSuccess || !req)
            break;
        f->rreq[k] = req;
        f->posted_r++;
    }
    flow_post_sends(f);
    while (f->done_s < f->posted_s) {
        int done = 0, size = -1;
        ncclResult_t rc = lg_core_test(f->sreq[f->done_s % DEPTH], &done, &size);
        note_rc(f, rc);
        if (rc != ncclSuccess || !done)
            break;
        if ((size_t)size != msg_size(f->done_s))
            f->bad++;
        f->done_s++;
    }
    while (f->done_r < f->posted_r) {
        int done = 0, size = -1;
        ncclResult_t rc = lg_core_test(f->rreq[f->done_r % DEPTH], &done, &size);
        note_rc(f, rc);
        if (rc != ncclSuccess || !done)
            break;
        size_t want = msg_size(f->done_r);
        const uint8_t *b = (const uint8_t *)f->rb[f->done_r % DEPTH];
        int ok = (size_t)size == want;
        if (ok) {
            pattern_fill(f->want, f->done_r, want);
            ok = memcmp(b, f->want, want) == 0;
        }
        f->bad += !ok;
        f->done_r++;
    }
}

static __attribute__((unused)) int flow_done(const struct flow *f)
{
    return f->done_s == f->count && f->done_r == f->count;
}

/* Runs both flows until each has completed `until` more messages (or they are done). A flow
 * posts no message past its count, so a target beyond it raises the count (else the loop
 * would wait out max_s). */
static __attribute__((unused)) void run_until(struct flow *a, struct flow *b, uint64_t until_a, uint64_t until_b,
                      double max_s)
{
    a->count = until_a > a->count ? until_a : a->count;
    b->count = until_b > b->count ? until_b : b->count;
    uint64_t t0 = lg_now_ns();
    while ((a->done_r < until_a || b->done_r < until_b || (until_a >= a->count && !flow_done(a)) ||
            (until_b >= b->count && !flow_done(b))) && !a->errors && !b->errors &&
           lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        flow_step(a);
        flow_step(b);
    }
}

/* Keeps traffic going until pred() holds (or max_s). */
static __attribute__((unused)) int run_while(struct flow *a, struct flow *b, int (*pred)(void *), void *arg, double max_s)
{
    uint64_t t0 = lg_now_ns();
    for (;;) {
        if (pred(arg))
            return 1; /* what held once (a second look may see a newer change) */
        if (a->errors || b->errors || lg_now_ns() - t0 >= (uint64_t)(max_s * 1e9))
            return 0;
        if (a->posted_s + DEPTH >= a->count)
            a->count += 16;
        if (b->posted_s + DEPTH >= b->count)
            b->count += 16;
        flow_step(a);
        flow_step(b);
        usleep(100);
    }
}

/* ---- where a flow stands, and breaking its paths ---------------------------------------- */

static __attribute__((unused)) struct lg_conn *C(void *comm) { return (struct lg_conn *)comm; }

static __attribute__((unused)) int active_of(void *comm) { return __atomic_load_n(&C(comm)->active, __ATOMIC_ACQUIRE); }
static __attribute__((unused)) uint32_t epoch_of(void *comm) { return __atomic_load_n(&C(comm)->epoch, __ATOMIC_ACQUIRE); }

/* The sender's view decides; the receiver follows. */
static __attribute__((unused)) int on_backup(void *arg)
{
    struct flow *f = arg;
    return active_of(f->s) == 1 && active_of(f->r) == 1 && epoch_of(f->s) == epoch_of(f->r);
}
static __attribute__((unused)) int on_fresh_primary(void *arg)
{
    struct flow *f = arg;
    /* Inside the section the monitor waits out before it frees a replaced path. */
    uint32_t ph = lg_conn_enter(C(f->s));
    struct lg_path *p = __atomic_load_n(&C(f->s)->paths[0], __ATOMIC_ACQUIRE);
    int fresh = p && p->gen > 0;
    lg_conn_exit(C(f->s), ph);
    return active_of(f->s) == 0 && active_of(f->r) == 0 && fresh &&
           epoch_of(f->s) == epoch_of(f->r);
}
static __attribute__((unused)) int both_on_backup(void *arg)
{
    struct flow **f = arg;
    return on_backup(f[0]) && on_backup(f[1]);
}
/* Both flows committed an epoch above `epoch0` on both sides (a switch happened; under a
 * slow tool it may already be over by the time we look). */
struct moved_arg {
    struct flow **f;
    uint32_t epoch0[2];
};
static __attribute__((unused)) int both_moved(void *arg)
{
    struct moved_arg *m = arg;
    for (int i = 0; i < 2; i++)
        if (epoch_of(m->f[i]->s) <= m->epoch0[i] || epoch_of(m->f[i]->r) <= m->epoch0[i])
            return 0;
    return 1;
}
static __attribute__((unused)) int both_on_fresh_primary(void *arg)
{
    struct flow **f = arg;
    return on_fresh_primary(f[0]) && on_fresh_primary(f[1]);
}

/* shutdown() every data socket of a comm's path (or one data stream): the peer sees EOF. */
static __attribute__((unused)) void kill_path(void *comm, int slot, int only_stream)
{
    struct lg_path *p = __atomic_load_n(&C(comm)->paths[slot], __ATOMIC_ACQUIRE);
    if (!p)
        return;
    /* Under ctrl_mu the monitor cannot close (and the kernel reuse) any of the path's fds;
     * one it closed already reads -1. */
    int fds[LG_MAX_STREAMS + 1], n = 0;
    pthread_mutex_lock(&p->ctrl_mu);
    if (only_stream) {
        fds[n++] = p->data[only_stream - 1].task.fd;
    } else { /* its data sockets: the control session is shared with other connections */
        for (int i = 0; i < p->nstreams; i++)
            fds[n++] = p->data[i].task.fd;
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            shutdown(fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&p->ctrl_mu);
}

static __attribute__((unused)) void finish(struct flow *a, struct flow *b, const char *what)
{
    a->count = a->posted_s > a->count ? a->posted_s : a->count;
    b->count = b->posted_s > b->count ? b->posted_s : b->count;
    a->count += 24;
    b->count += 24;
    run_until(a, b, a->count, b->count, 120); /* a hang bound: TSan at nice 19 once took >30 s */
    int ok = flow_done(a) && flow_done(b) && !a->bad && !b->bad && !a->errors && !b->errors;
    if (!ok)
        fprintf(stderr, "not ok: %s: a %llu/%llu bad %d err %d (rc %d); b %llu/%llu bad %d "
                "err %d (rc %d)\n", what, (unsigned long long)a->done_r,
                (unsigned long long)a->count, a->bad, a->errors, (int)a->last_rc,
                (unsigned long long)b->done_r, (unsigned long long)b->count, b->bad, b->errors,
                (int)b->last_rc);
    CHECK(ok);
}

#endif
