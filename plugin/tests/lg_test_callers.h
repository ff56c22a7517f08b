/* Part of the transport contract (lg_test_contract.h): the call sequences of a third-party
 * plugin test suite (aws-ofi-nccl's tests/functional, which drive any ncclNet plugin as two MPI
 * ranks) that NCCL's own transports get right, rebuilt here through NCCL's calls, both ranks
 * in this process:
 *  - close before accept (grouped_recv's setup): two listen comms, a connect/accept loop, the
 *    connector closing everything while the second accept is still pending (its control
 *    sessions end with it): that accept completes, and its comm reports the close in test();
 *  - close before connect returns (nccl_connection's threads): the acceptor closes its comm
 *    as soon as accept gives it, while the peer's connect is still pending (wrap mode: its
 *    inner comms being built); that connect still gives its comm, whose test() reports it;
 *  - in-flight close (inflight_close): 32 x 1 MiB isends retried while NULL, 32 irecvs, the
 *    receiver deregistering and closing first; every later isend is taken (or NULL), never
 *    refused for the peer's departure, and deregMr and close with requests in flight are
 *    safe (the sanitizer builds check); also from 4 threads at once. */
#ifndef LG_TEST_CALLERS_H
#define LG_TEST_CALLERS_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "lg_test_pair.h"
#include "proto/conn.h"
#include "runtime/util.h"

#define CALLERS_BOUND_NS 20000000000ull /* only keeps a broken build from hanging */

static void contract_close_before_accept(const struct lg_contract *k)
{
    char h0[NCCL_NET_HANDLE_MAXSIZE], h1[NCCL_NET_HANDLE_MAXSIZE];
    void *l0 = NULL, *l1 = NULL, *s0 = NULL, *s1 = NULL, *r0 = NULL, *r1 = NULL;
    CHECK_EQ(lg_core_listen_ctx(NULL, 0, h0, &l0), ncclSuccess);
    CHECK_EQ(lg_core_listen_ctx(NULL, 0, h1, &l1), ncclSuccess);
    if (!l0 || !l1)
        return;
    /* The loop stops asking for the second accept once its connect returned (wrap mode needs
     * that accept asked before: the monitor builds the inner comms of a built connection). */
    ncclResult_t rc = ncclSuccess;
    uint64_t t0 = lg_now_ns();
    while (rc == ncclSuccess && (!s0 || !r0 || !s1) && lg_now_ns() - t0 < CALLERS_BOUND_NS) {
        if (!s0)
            rc = lg_core_connect_ctx(NULL, 0, h0, &s0);
        if (!r0 && rc == ncclSuccess)
            rc = lg_core_accept(l0, &r0);
        if (!s1 && !r1 && rc == ncclSuccess)
            rc = lg_core_accept(l1, &r1);
        if (!s1 && rc == ncclSuccess)
            rc = lg_core_connect_ctx(NULL, 0, h1, &s1);
    }
    CHECK(rc == ncclSuccess && s0 && r0 && s1);
    /* The connecting rank closes everything at once. */
    if (s0)
        lg_core_close_send(s0);
    if (s1)
        lg_core_close_send(s1);
    rc = ncclSuccess;
    t0 = lg_now_ns();
    while (rc == ncclSuccess && !r1 && lg_now_ns() - t0 < CALLERS_BOUND_NS)
        rc = lg_core_accept(l1, &r1);
    if (rc != ncclSuccess || !r1)
        fprintf(stderr, "contract %s: close before accept: accept rc %d, comm %p\n",
                k->transport, (int)rc, r1);
    CHECK_EQ(rc, ncclSuccess);
    CHECK(r1 != NULL);
    if (r1) { /* the close shows in test(), never as a hang */
        char b[64];
        void *d = b, *req = NULL;
        size_t sz = sizeof(b);
        int done = 0;
        CHECK_EQ(lg_core_irecv(r1, 1, &d, &sz, NULL, NULL, &req), ncclSuccess);
        rc = ncclSuccess;
        t0 = lg_now_ns();
        while (req && rc == ncclSuccess && !done && lg_now_ns() - t0 < CALLERS_BOUND_NS)
            rc = lg_core_test(req, &done, NULL);
        CHECK(req && rc != ncclSuccess && !done);
        CHECK_EQ(lg_core_close_recv(r1), ncclSuccess);
    }
    if (r0)
        lg_core_close_recv(r0);
    lg_core_close_listen(l0);
    lg_core_close_listen(l1);
}

static void contract_close_before_connect_returns(const struct lg_contract *k)
{
    char h[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL, *s = NULL, *r = NULL;
    CHECK_EQ(lg_core_listen_ctx(NULL, 0, h, &l), ncclSuccess);
    if (!l)
        return;
    ncclResult_t rc = ncclSuccess;
    uint64_t t0 = lg_now_ns();
    /* The connector stops calling once its handshake is done, as a rank busy elsewhere. */
    while (rc == ncclSuccess && !r && lg_now_ns() - t0 < CALLERS_BOUND_NS) {
        if (!s && !lg_core_connect_started(h))
            rc = lg_core_connect_ctx(NULL, 0, h, &s);
        if (rc == ncclSuccess)
            rc = lg_core_accept(l, &r);
    }
    CHECK(rc == ncclSuccess && r);
    if (r) /* at once: the connect may still be pending */
        CHECK_EQ(lg_core_close_recv(r), ncclSuccess);
    int pending = !s; /* wrap mode: it is; native mode gave the comm at its handshake */
    struct lg_conn *c = s;
    for (t0 = lg_now_ns(); rc == ncclSuccess && !s && lg_now_ns() - t0 < CALLERS_BOUND_NS;) {
        rc = lg_core_connect_ctx(NULL, 0, h, &s);
        c = s;
    }
    if (rc != ncclSuccess || !s)
        fprintf(stderr, "contract %s: close before connect returns (pending %d): connect rc %d, "
                "comm %p\n", k->transport, pending, (int)rc, s);
    CHECK_EQ(rc, ncclSuccess);
    CHECK(s != NULL);
    if (s) { /* the close shows in test(), never as a refused post or a hang */
        while (!__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) && lg_now_ns() - t0 < CALLERS_BOUND_NS)
            sched_yield();
        char b[64] = {0};
        void *req = NULL;
        int done = 0;
        rc = ncclSuccess;
        for (t0 = lg_now_ns(); !req && rc == ncclSuccess && lg_now_ns() - t0 < CALLERS_BOUND_NS;)
            rc = lg_core_isend(s, b, sizeof(b), 1, NULL, &req);
        CHECK_EQ(rc, ncclSuccess);
        rc = ncclSuccess;
        while (req && rc == ncclSuccess && !done && lg_now_ns() - t0 < CALLERS_BOUND_NS)
            rc = lg_core_test(req, &done, NULL);
        CHECK(req && rc != ncclSuccess && !done);
        CHECK_EQ(lg_core_close_send(s), ncclSuccess);
    }
    lg_core_close_listen(l);
}

enum { INFLIGHT_N = 32, INFLIGHT_SIZE = 1 << 20 };

struct inflight_run {
    int failures; /* what went wrong, counted (CHECK is not for other threads) */
    int refused;  /* isends that returned an error */
};

/* isend retried while NULL, as the suite's post_send does; 0 or -1 (refused, or no request). */
static int inflight_post(void *s, void *buf, void *mh, void **req)
{
    uint64_t t0 = lg_now_ns();
    *req = NULL;
    while (!*req && lg_now_ns() - t0 < CALLERS_BOUND_NS)
        if (lg_core_isend(s, buf, INFLIGHT_SIZE, 1, mh, req) != ncclSuccess)
            return -1;
    return *req ? 0 : -1;
}

static void inflight_once(struct inflight_run *out)
{
    void *s, *r;
    if (pair_connect(&s, &r) != 0) {
        out->failures++;
        return;
    }
    char *sb[INFLIGHT_N], *rb[INFLIGHT_N];
    void *smh[INFLIGHT_N], *rmh[INFLIGHT_N], *sreq[INFLIGHT_N], *rreq[INFLIGHT_N];
    for (int i = 0; i < INFLIGHT_N; i++) {
        sb[i] = calloc(1, INFLIGHT_SIZE);
        rb[i] = malloc(INFLIGHT_SIZE);
        out->failures += lg_core_reg_mr(s, sb[i], INFLIGHT_SIZE, NCCL_PTR_HOST, &smh[i]) != 0;
        out->failures += lg_core_reg_mr(r, rb[i], INFLIGHT_SIZE, NCCL_PTR_HOST, &rmh[i]) != 0;
    }
    /* The sender gets half of its sends in; the receiver posts all of its receives, then
     * deregisters and closes without a test(). */
    for (int i = 0; i < INFLIGHT_N / 2; i++)
        out->refused += inflight_post(s, sb[i], smh[i], &sreq[i]) != 0;
    for (int i = 0; i < INFLIGHT_N; i++) {
        void *d = rb[i];
        size_t sz = INFLIGHT_SIZE;
        int tag = 1;
        rreq[i] = NULL;
        out->failures += lg_core_irecv(r, 1, &d, &sz, &tag, &rmh[i], &rreq[i]) != ncclSuccess;
    }
    for (int i = 0; i < INFLIGHT_N; i++)
        out->failures += lg_core_dereg_mr(r, rmh[i]) != ncclSuccess;
    out->failures += lg_core_close_recv(r) != ncclSuccess;
    /* The sender goes on once it has seen the close (no call of ours needed for that), and
     * every later post is taken; the failure shows in test(). */
    struct lg_conn *c = s;
    uint64_t t0 = lg_now_ns();
    while (!__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) && lg_now_ns() - t0 < CALLERS_BOUND_NS)
        sched_yield();
    out->failures += !__atomic_load_n(&c->error, __ATOMIC_ACQUIRE);
    for (int i = INFLIGHT_N / 2; i < INFLIGHT_N; i++)
        out->refused += inflight_post(s, sb[i], smh[i], &sreq[i]) != 0;
    int done = 0;
    out->failures += lg_core_test(sreq[INFLIGHT_N - 1], &done, NULL) == ncclSuccess || done;
    for (int i = 0; i < INFLIGHT_N; i++)
        out->failures += lg_core_dereg_mr(s, smh[i]) != ncclSuccess;
    out->failures += lg_core_close_send(s) != ncclSuccess;
    for (int i = 0; i < INFLIGHT_N; i++) { /* no stream reads or writes them any more */
        free(sb[i]);
        free(rb[i]);
    }
}

static void *inflight_thread(void *arg)
{
    inflight_once(arg);
    return NULL;
}

static void contract_inflight_close(const struct lg_contract *k, int nthreads)
{
    enum { MAX_THREADS = 4 };
    struct inflight_run runs[MAX_THREADS] = {{0}};
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 0; i < nthreads && i < MAX_THREADS; i++)
        started[i] = pthread_create(&th[i], NULL, inflight_thread, &runs[i]) == 0;
    int failures = 0, refused = 0;
    for (int i = 0; i < nthreads && i < MAX_THREADS; i++) {
        CHECK(started[i]);
        if (started[i])
            pthread_join(th[i], NULL);
        failures += runs[i].failures;
        refused += runs[i].refused;
    }
    if (failures || refused)
        fprintf(stderr, "contract %s: in-flight close, %d thread(s): %d failure(s), %d isend(s) "
                "refused\n", k->transport, nthreads, failures, refused);
    CHECK_EQ(refused, 0);
    CHECK_EQ(failures, 0);
}

#endif
