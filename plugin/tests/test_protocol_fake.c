/* The failover protocol's real code (the window, SWITCH/RESYNC, replay, fences, epochs, the
 * monitor, rebuilds through the acceptor) over the fake transport (src/transport/fake/fake.h), with
 * path breaks at random: seeded runs of two flows (one comm pair each, messages of many
 * sizes, DEPTH in flight), and between bursts of traffic a random slot of the shared NICs is
 * broken (what is in flight on it is lost), the active one or the standby, while the other
 * stands. Every message must arrive exactly once, in order, every byte verified; no call may
 * fail while a path works; each break must be survived (both paths back, the connection
 * protected) before the next. The randomized model of test_failover.c, run as the real thing;
 * the transport contract (lg_test_contract.h) first. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/core.h"
#include "lg_test.h"
#include "lg_test_contract.h"
#include "lg_test_flow.h"
#include "lg_test_pair.h"
#include "lg_test_warn.h"
#include "proto/conn.h"
#include "proto/nic_gray.h"
#include "transport/fake/fake.h"
#include "transport/tcp/tcp.h"
#include "transport/transport_select.h"

#ifndef SEEDS
#define SEEDS 6 /* -DSEEDS=N for a longer run */
#endif
#define BURST 24    /* messages per flow between two faults */
#define MESSAGES 240 /* per flow and seed */

/* Both paths up, protected, nothing being rebuilt, and no break left unseen: right after a
 * break every path still counts as up until a pump or the monitor looks at it (read as
 * NCCL's thread may). */
static int conn_whole(void *comm)
{
    struct lg_conn *c = C(comm);
    uint32_t ph = lg_conn_enter(c);
    int whole = __atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE) && !lg_fake_unseen_break(c);
    for (int i = 0; i < LG_NPATHS; i++)
        whole = whole && lg_path_up(__atomic_load_n(&c->paths[i], __ATOMIC_ACQUIRE));
    lg_conn_exit(c, ph);
    return whole;
}

static void fake_break_path(void *comm, int slot)
{
    (void)comm; /* a dead NIC: every path in its slot */
    lg_fake_break(slot);
}

/* What keeps a connection from being whole, for the failure message. */
static void describe_conn(const char *name, void *comm)
{
    struct lg_conn *c = C(comm);
    uint32_t ph = lg_conn_enter(c);
    fprintf(stderr, "  %s conn %016llx: protected %d active %d epoch %u", name,
            (unsigned long long)c->nonce, __atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE),
            active_of(comm), epoch_of(comm));
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = __atomic_load_n(&c->paths[i], __ATOMIC_ACQUIRE);
        if (p)
            fprintf(stderr, "; path %d gen %u %s (%s)", i, p->gen,
                    lg_path_up(p) ? "up" : "failed",
                    __atomic_load_n(&p->fail_noted, __ATOMIC_ACQUIRE) ? p->why : "");
        else
            fprintf(stderr, "; path %d none", i);
    }
    fprintf(stderr, "\n");
    lg_conn_exit(c, ph);
}

static int all_whole(void *arg)
{
    struct flow **f = arg;
    return conn_whole(f[0]->s) && conn_whole(f[0]->r) && conn_whole(f[1]->s) &&
           conn_whole(f[1]->r);
}

/* Both flows back on the primary path (not a rebuilt one: a hold moves, nothing fails). */
static int on_primary_both(void *arg)
{
    struct flow **f = arg;
    for (int i = 0; i < 2; i++)
        if (active_of(f[i]->s) != 0 || active_of(f[i]->r) != 0 ||
            epoch_of(f[i]->s) != epoch_of(f[i]->r))
            return 0;
    return 1;
}


static unsigned rnd(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return (*state >> 16) & 0x7fff;
}

static int run_seed(unsigned seed, uint64_t *epochs)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = MESSAGES;
    int ok = 1, faults = 0;
    unsigned st = seed;
    /* Whole before the first fault: the backups come up right after connect. */
    CHECK(run_while(&a, &b, all_whole, both, 10.0) || (ok = 0));
    a.count = b.count = MESSAGES;
    while (ok && !(flow_done(&a) && flow_done(&b))) {
        run_until(&a, &b, LG_MIN(a.done_r + BURST, a.count), LG_MIN(b.done_r + BURST, b.count),
                  20.0);
        if (a.errors || b.errors || a.bad || b.bad)
            break;
        if (flow_done(&a) && flow_done(&b))
            break;
        unsigned pick = rnd(&st) % 4;
        if (pick == 3)
            continue; /* a quiet stretch */
        /* Sends on the wire that no receive has taken: the break loses them, and the protocol
         * must replay them from NCCL's buffers. */
        lg_fake_hold(1);
        for (int i = 0; i < 4; i++) {
            flow_step(&a);
            flow_step(&b);
        }
        int active = active_of(a.s);
        lg_fake_break(pick == 2 ? 1 - active : active); /* the standby one time in three */
        lg_fake_hold(0);
        faults++;
        /* Traffic meanwhile; then both paths back before the next fault (never both down:
         * that is the dead timeout's business, tested elsewhere). */
        uint64_t keep_a = a.count, keep_b = b.count;
        if (!run_while(&a, &b, all_whole, both, 30.0)) {
            fprintf(stderr, "seed %u, fault %d: not whole again: a %d/%d, b %d/%d (send/recv)\n",
                    seed, faults, conn_whole(a.s), conn_whole(a.r), conn_whole(b.s),
                    conn_whole(b.r));
            describe_conn("a send", a.s);
            describe_conn("a recv", a.r);
            describe_conn("b send", b.s);
            describe_conn("b recv", b.r);
            ok = 0;
        }
        CHECK(ok);
        a.count = LG_MAX(keep_a, a.posted_s);
        b.count = LG_MAX(keep_b, b.posted_s);
    }
    run_until(&a, &b, a.count, b.count, 20.0);
    *epochs += epoch_of(a.s) + epoch_of(b.s);
    if (!flow_done(&a) || !flow_done(&b) || a.bad || b.bad || a.errors || b.errors) {
        fprintf(stderr, "seed %u: a %llu/%llu (bad %d, errors %d, rc %d) b %llu/%llu (bad %d, "
                "errors %d, rc %d) after %d faults\n", seed, (unsigned long long)a.done_r,
                (unsigned long long)a.count, a.bad, a.errors, (int)a.last_rc,
                (unsigned long long)b.done_r, (unsigned long long)b.count, b.bad, b.errors,
                (int)b.last_rc, faults);
        ok = 0;
    }
    CHECK(ok);
    CHECK(faults > 0);
    flow_close(&a);
    flow_close(&b);
    return ok;
}

/* WARNs (a close with receives posted says so; nothing else should), and INFO lines with
 * LG_TEST_VERBOSE set. */
/* Another connection's goodput verdict on a NIC (nic_gray.h) moves every connection off it,
 * gracefully and without a loss, for as long as the hold lasts; then they come back. */
static void test_nic_hold(void)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = 40;
    CHECK(run_while(&a, &b, all_whole, both, 10.0));
    run_until(&a, &b, 8, 8, 20);
    /* Held far longer than the move takes on any machine (under ASan at nice 19 beside busy
     * loops, a 1.5 s hold once ran out before both had moved); then its time runs out. */
    lg_nic_gray_hold("lgf0", lg_now_ns() + 120000000000ull, "lossy, found by a test");
    char why[LG_NIC_GRAY_WHY];
    CHECK(lg_nic_gray_until("lgf0", why, sizeof(why)) > lg_now_ns());
    CHECK(strcmp(why, "lossy, found by a test") == 0);
    CHECK(run_while(&a, &b, both_on_backup, both, 30.0));
    lg_nic_gray_reset();
    lg_nic_gray_hold("lgf0", lg_now_ns(), "lossy, found by a test"); /* over as of now */
    CHECK(run_while(&a, &b, on_primary_both, both, 30.0)); /* the hold ended */
    finish(&a, &b, "a NIC held off by another connection's verdict");
    flow_close(&a);
    flow_close(&b);
    lg_nic_gray_reset();
}

int main(void)
{
    fast_failover_env("3000");
    setenv("LINKGUARD_SHM", "/nonexistent/lgtest-fake", 1); /* no daemon: rebuilds probe */
    loopback_devices("lgf0", "lgf1");
    lg_transport_test_force(lg_fake_transport(&lg_tcp_transport));
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, test_print_logger), ncclSuccess);
    /* The transport contract first (lg_test_contract.h; the fake matches no tags). */
    /* (the fake moves data only in its receiver's calls: its sends wait for the receiver) */
    lg_contract_run(&(struct lg_contract){.transport = "fake", .break_path = fake_break_path,
                                          .grouped = 0, .sends_wait_for_receiver = 1});
    test_nic_hold();
    uint64_t epochs = 0;
    int passed = 0;
    for (unsigned seed = 1; seed <= SEEDS; seed++)
        passed += run_seed(seed, &epochs);
    CHECK_EQ(passed, SEEDS);
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    /* The fake must actually have been the transport, and the faults real. */
    struct lg_fake_counts n = lg_fake_counts();
    printf("fake transport: %llu messages pushed, %llu placed, %llu stale dropped, %llu lost in "
           "%llu breaks, %llu path failures; %llu epochs\n",
           (unsigned long long)n.pushed, (unsigned long long)n.placed,
           (unsigned long long)n.stale, (unsigned long long)n.lost,
           (unsigned long long)n.breaks, (unsigned long long)n.fails,
           (unsigned long long)epochs);
    CHECK(n.placed >= 2ull * SEEDS * MESSAGES);
    CHECK(n.fails > 0 && n.breaks > 0 && n.lost > 0 && epochs > 0);
    lg_fake_reset();
    LG_TEST_DONE();
}
