/* The transport contract: what every path transport (transport.h) must give the failover
 * protocol, as scenarios through NCCL's calls only, run by one test binary per transport
 * with its own way of breaking a path: test_failover_transport.c (linkguard's TCP streams),
 * test_wrap.c (the inner plugin, the fake inner in loop mode) and test_protocol_fake.c (the
 * fake transport). Each scenario checks every byte and the order; none measures time (the
 * bounds only keep a broken build from hanging).
 *  - sizes: every message size (0 B to about 1 MB) arrives whole, in order;
 *  - window: LG_WINDOW sends wait for a receiver, the next gets *request = NULL, then all
 *    complete once it posts;
 *  - grouped: grouped receives (n = 1..8, tags) come back whole (transports that match tags);
 *  - break: a path breaks under traffic with sends in flight, on either side: the traffic
 *    moves without a loss, the path is rebuilt and the traffic comes back to it;
 *  - close: a sender closes with sends in flight; every receive then completes with its bytes
 *    or fails, none hangs; a sender that closes once its sends completed: every receive
 *    completes whole;
 *  - callers: a third-party suite's call sequences (lg_test_callers.h): a close before the
 *    peer's accept, a close with requests in flight (also from 4 threads). */
#ifndef LG_TEST_CONTRACT_H
#define LG_TEST_CONTRACT_H

#include "lg_test_flow.h"
#include "lg_test_grouped.h"

struct lg_contract {
    const char *transport;
    /* a transport failure on path `slot` of `comm`, as seen from that end */
    void (*break_path)(void *comm, int slot);
    int grouped; /* grouped receives are matched by tag */
    /* a send completes only once the receiver's test() saw its receive complete (wrap mode,
     * acknowledged completion: the receiver's inner completions are seen only there) */
    int sends_wait_for_receiver;
};

#include "lg_test_callers.h"

static void contract_sizes(const struct lg_contract *k)
{
    struct flow a;
    flow_init(&a);
    a.count = 66; /* six times every size of msg_size() */
    uint64_t t0 = lg_now_ns();
    while (!flow_done(&a) && !a.errors && lg_now_ns() - t0 < 30000000000ull)
        flow_step(&a);
    if (!flow_done(&a) || a.bad || a.errors)
        fprintf(stderr, "contract %s: sizes: %llu/%llu, bad %d, errors %d\n", k->transport,
                (unsigned long long)a.done_r, (unsigned long long)a.count, a.bad, a.errors);
    CHECK(flow_done(&a) && !a.bad && !a.errors);
    flow_close(&a);
}

static void contract_window(const struct lg_contract *k)
{
    void *s, *r;
    CHECK_EQ(pair_connect(&s, &r), 0);
    static char sb[LG_WINDOW + 1][64], rb[LG_WINDOW][64];
    void *sreq[LG_WINDOW + 1] = {0}, *rreq[LG_WINDOW] = {0};
    int posted = 0;
    for (int i = 0; i <= LG_WINDOW; i++) {
        memset(sb[i], 'a' + i % 26, sizeof(sb[i]));
        CHECK_EQ(lg_core_isend(s, sb[i], sizeof(sb[i]), 0, NULL, &sreq[i]), ncclSuccess);
        if (!sreq[i])
            break;
        posted++;
    }
    if (posted != LG_WINDOW)
        fprintf(stderr, "contract %s: window: %d sends taken without a receiver\n",
                k->transport, posted);
    CHECK_EQ(posted, LG_WINDOW);
    int ok = 1;
    for (int i = 0; i < LG_WINDOW && ok; i++) {
        void *d = rb[i];
        size_t sz = sizeof(rb[i]);
        CHECK_EQ(lg_core_irecv(r, 1, &d, &sz, NULL, NULL, &rreq[i]), ncclSuccess);
        ok = rreq[i] != NULL;
    }
    CHECK(ok);
    int left = 2 * LG_WINDOW, size;
    uint64_t t0 = lg_now_ns();
    while (ok && left && lg_now_ns() - t0 < 20000000000ull) {
        for (int i = 0; i < LG_WINDOW; i++) {
            int done = 0;
            if (sreq[i] && lg_core_test(sreq[i], &done, &size) == ncclSuccess && done)
                sreq[i] = NULL, left--;
            done = 0;
            if (rreq[i] && lg_core_test(rreq[i], &done, &size) == ncclSuccess && done) {
                rreq[i] = NULL, left--;
                ok = size == (int)sizeof(rb[i]) && memcmp(rb[i], sb[i], sizeof(rb[i])) == 0;
            }
        }
    }
    CHECK(ok && left == 0);
    lg_core_close_send(s);
    lg_core_close_recv(r);
}

static void contract_grouped(const struct lg_contract *k)
{
    if (!k->grouped)
        return;
    void *s, *r;
    CHECK_EQ(pair_connect(&s, &r), 0);
    struct gflow g;
    gflow_init(&g, s, r, 24);
    uint64_t t0 = lg_now_ns();
    while (!gflow_done(&g) && !g.errors && lg_now_ns() - t0 < 30000000000ull)
        gflow_step(&g);
    CHECK(gflow_done(&g) && !g.bad && !g.errors);
    gflow_free(&g);
    lg_core_close_send(s);
    lg_core_close_recv(r);
}

static void contract_break(const struct lg_contract *k, int sender_side)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = 40;
    run_until(&a, &b, 10, 10, 20);
    flow_post_sends(&a); /* in flight when the path breaks */
    flow_post_sends(&b);
    struct moved_arg mv = {both, {epoch_of(a.s), epoch_of(b.s)}};
    k->break_path(sender_side ? a.s : a.r, active_of(a.s));
    k->break_path(sender_side ? b.s : b.r, active_of(b.s));
    CHECK(run_while(&a, &b, both_moved, &mv, 10));
    run_until(&a, &b, a.done_r + 10, b.done_r + 10, 20);
    CHECK(run_while(&a, &b, both_on_fresh_primary, both, 15));
    char what[64];
    snprintf(what, sizeof(what), "contract %s: break on the %s's side", k->transport,
             sender_side ? "sender" : "receiver");
    finish(&a, &b, what);
    flow_close(&a);
    flow_close(&b);
}

static void contract_close(const struct lg_contract *k)
{
    void *s, *r;
    CHECK_EQ(pair_connect(&s, &r), 0);
    enum { N = 4 };
    static char sb[N][4096], rb[N][4096];
    void *sreq[N], *rreq[N];
    for (int i = 0; i < N; i++) {
        memset(sb[i], 'k' + i, sizeof(sb[i]));
        CHECK_EQ(lg_core_isend(s, sb[i], sizeof(sb[i]), 0, NULL, &sreq[i]), ncclSuccess);
    }
    CHECK_EQ(lg_core_close_send(s), ncclSuccess);
    int settled = 0, bad = 0;
    for (int i = 0; i < N; i++) { /* a receive NCCL cannot even post has failed */
        void *d = rb[i];
        size_t sz = sizeof(rb[i]);
        rreq[i] = NULL;
        if (lg_core_irecv(r, 1, &d, &sz, NULL, NULL, &rreq[i]) != ncclSuccess)
            rreq[i] = NULL;
    }
    uint64_t t0 = lg_now_ns();
    for (int i = 0; i < N && lg_now_ns() - t0 < 20000000000ull;) {
        int done = 0, size = -1;
        ncclResult_t rc = rreq[i] ? lg_core_test(rreq[i], &done, &size) : ncclRemoteError;
        if (rc != ncclSuccess || done) { /* completed whole, or failed: settled either way */
            bad += rc == ncclSuccess && (size != (int)sizeof(rb[i]) ||
                                         memcmp(rb[i], sb[i], sizeof(rb[i])) != 0);
            settled++;
            i++;
        }
    }
    if (settled != N || bad)
        fprintf(stderr, "contract %s: close: %d of %d receives settled, %d wrong\n",
                k->transport, settled, N, bad);
    CHECK(settled == N && bad == 0);
    lg_core_close_recv(r);
}

/* Whether receive i is done (once), keeping its size; 0 while not, -1 failed. */
static int recv_settle(void *req, int *done, int *size)
{
    if (*done)
        return 1;
    if (!req || lg_core_test(req, done, size) != ncclSuccess)
        return -1;
    return *done;
}

/* The sender closes right after its last send completed, before the receiver ever called
 * test() (where its sends can complete without one): a completed send was delivered, so every
 * receive completes whole (wrap mode with placed completion: the receiver has not seen the
 * inner completions when the BYE comes). */
static void contract_close_after_sends_complete(const struct lg_contract *k)
{
    void *s, *r;
    CHECK_EQ(pair_connect(&s, &r), 0);
    enum { N = 4 };
    static char sb[N][4096], rb[N][4096];
    void *sreq[N] = {0}, *rreq[N] = {0};
    int rdone[N] = {0}, rsize[N] = {0};
    for (int i = 0; i < N; i++) {
        void *d = rb[i];
        size_t sz = sizeof(rb[i]);
        memset(rb[i], 0, sizeof(rb[i]));
        CHECK_EQ(lg_core_irecv(r, 1, &d, &sz, NULL, NULL, &rreq[i]), ncclSuccess);
    }
    for (int i = 0; i < N; i++) {
        memset(sb[i], 'K' + i, sizeof(sb[i]));
        uint64_t t0 = lg_now_ns();
        while (!sreq[i] && lg_now_ns() - t0 < 20000000000ull)
            CHECK_EQ(lg_core_isend(s, sb[i], sizeof(sb[i]), 0, NULL, &sreq[i]), ncclSuccess);
    }
    int sent = 0, failed = 0;
    uint64_t t0 = lg_now_ns();
    for (int i = 0; i < N && !failed && lg_now_ns() - t0 < 20000000000ull;) {
        int done = 0;
        if (!sreq[i] || lg_core_test(sreq[i], &done, NULL) != ncclSuccess)
            break;
        if (done) {
            sent++;
            i++;
        }
        for (int j = 0; j < N && k->sends_wait_for_receiver; j++)
            failed |= recv_settle(rreq[j], &rdone[j], &rsize[j]) < 0;
    }
    CHECK_EQ(sent, N);
    CHECK_EQ(lg_core_close_send(s), ncclSuccess);
    int good = 0;
    for (int i = 0; i < N && lg_now_ns() - t0 < 20000000000ull;) {
        int st = recv_settle(rreq[i], &rdone[i], &rsize[i]);
        if (st < 0)
            break;
        if (st > 0) {
            good += rsize[i] == (int)sizeof(rb[i]) && memcmp(rb[i], sb[i], sizeof(rb[i])) == 0;
            i++;
        }
    }
    if (good != N)
        fprintf(stderr, "contract %s: close after sends complete: %d of %d receives whole\n",
                k->transport, good, N);
    CHECK_EQ(good, N);
    lg_core_close_recv(r);
}

static __attribute__((unused)) void lg_contract_run(const struct lg_contract *k)
{
    contract_sizes(k);
    contract_window(k);
    contract_grouped(k);
    contract_break(k, 1);
    contract_break(k, 0);
    contract_close(k);
    contract_close_after_sends_complete(k);
    contract_close_before_accept(k);
    contract_close_before_connect_returns(k);
    contract_inflight_close(k, 1);
    contract_inflight_close(k, 4);
}

/* The common way to break a path: shutdown() of every socket of it (the transports whose data
 * goes elsewhere lose the path with its control channel). */
static __attribute__((unused)) void contract_shutdown_path(void *comm, int slot)
{
    kill_path(comm, slot, 0);
}

#endif
