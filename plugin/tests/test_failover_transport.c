/* Failover end to end inside one process, over loopback: device 0 is the pair lgt0
 * (127.0.0.1) / lgt1 (127.0.0.2), a fake daemon (the C shm writer) speaks for both NICs, and
 * two flows (one comm pair each way) keep messages of many sizes in flight while paths are
 * killed (shutdown() of their sockets, on the sender's or the receiver's side), marked DOWN,
 * DRAINED or RECOVERING, flapped, and brought back; grouped receives across a kill and the
 * reintegration (groups partly placed at the switch). Every message must arrive exactly once,
 * in order, every byte verified, and no call may return an error while a path works; with
 * both paths gone the error must come within the dead timeout. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "abi/core.h"
#include "daemon/health.h"
#include "lg_test.h"
#include "lg_test_contract.h"
#include "lg_test_daemon.h"
#include "lg_test_flow.h"
#include "lg_test_grouped.h"
#include "lg_test_pair.h"
#include "proto/conn.h"
#include "runtime/params.h"
#include "runtime/util.h"


/* ---- scenarios ---------------------------------------------------------------------------- */

/* A transport kill of one data stream only (the sender's watchdog or the EOF), as the
 * contract's path break (lg_test_contract.h). */
static void kill_one_stream(void *comm, int slot) { kill_path(comm, slot, 2); }

static const struct lg_contract tcp_contract = {
    .transport = "tcp", .break_path = contract_shutdown_path, .grouped = 1};

/* Grouped receives (lg_test_grouped.h) across a kill, the failover, the rebuild and the
 * reintegration: a group partly placed when its path dies is completed on the other one. */
static int grouped_run(struct gflow *g, int (*pred)(struct gflow *), double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (!pred(g) && !g->errors && lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        daemon_beat();
        gflow_step(g);
    }
    return pred(g);
}
static uint32_t g_epoch0;
static int g_some_done(struct gflow *g) { return g->done_r >= 6; }
static int g_moved(struct gflow *g)
{
    return epoch_of(g->s) > g_epoch0 && epoch_of(g->r) == epoch_of(g->s);
}
static int g_back(struct gflow *g)
{
    struct lg_path *p = __atomic_load_n(&C(g->s)->paths[0], __ATOMIC_ACQUIRE);
    return active_of(g->s) == 0 && active_of(g->r) == 0 && p && p->gen > 0 &&
           epoch_of(g->s) == epoch_of(g->r);
}
static int g_done(struct gflow *g) { return gflow_done(g); }

static void test_grouped_kill(int sender_side)
{
    void *s, *r;
    CHECK_EQ(pair_connect(&s, &r), 0);
    struct gflow g;
    gflow_init(&g, s, r, 100000);
    CHECK(grouped_run(&g, g_some_done, 20));
    g_epoch0 = epoch_of(s);
    kill_path(sender_side ? s : r, 0, 0);
    CHECK(grouped_run(&g, g_moved, 10));
    CHECK(grouped_run(&g, g_back, 10));
    g.count = g.posted_r + 12;
    CHECK(grouped_run(&g, g_done, 30));
    CHECK_EQ(g.errors, 0);
    CHECK_EQ(g.bad, 0);
    gflow_free(&g);
    lg_core_close_send(s);
    lg_core_close_recv(r);
}

/* The daemon's verdicts: DOWN (urgent), RECOVERING (stays out), UP (back), DRAINED (graceful),
 * then the backup NIC DOWN while on the primary (no switch, no error). */
static void test_daemon_states(void)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = 40;
    run_until(&a, &b, 8, 8, 20);
    daemon_set(0, LG_NIC_DOWN);
    CHECK(run_while(&a, &b, both_on_backup, both, 5));
    daemon_set(0, LG_NIC_RECOVERING);
    uint32_t e = epoch_of(a.s);
    usleep(300000); /* kept out: no rebuild, no switch */
    run_until(&a, &b, a.done_r + 8, b.done_r + 8, 20);
    CHECK_EQ(active_of(a.s), 1);
    CHECK_EQ(epoch_of(a.s), e);
    daemon_set(0, LG_NIC_UP);
    CHECK(run_while(&a, &b, both_on_fresh_primary, both, 10));
    /* Operator drain: a graceful move, then undrain brings it back. */
    daemon_set(0, LG_NIC_DRAINED);
    CHECK(run_while(&a, &b, both_on_backup, both, 5));
    daemon_set(0, LG_NIC_UP);
    CHECK(run_while(&a, &b, both_on_fresh_primary, both, 10));
    /* The backup NIC going down while on the primary changes nothing for the data. */
    e = epoch_of(a.s);
    daemon_set(1, LG_NIC_DOWN);
    run_until(&a, &b, a.done_r + 16, b.done_r + 16, 20);
    CHECK_EQ(active_of(a.s), 0);
    CHECK_EQ(epoch_of(a.s), e);
    daemon_set(1, LG_NIC_UP);
    finish(&a, &b, "daemon states");
    flow_close(&a);
    flow_close(&b);
}

/* Repeated kills of the primary, each right after it was rebuilt and reintegrated. */
static void test_flaps(int n)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = 24;
    int back = 0;
    for (int i = 0; i < n; i++) {
        run_until(&a, &b, a.done_r + 4, b.done_r + 4, 20);
        struct moved_arg mv = {both, {epoch_of(a.s), epoch_of(b.s)}};
        kill_path(i & 1 ? a.r : a.s, 0, 0);
        kill_path(i & 1 ? b.s : b.r, 0, 0);
        if (!run_while(&a, &b, both_moved, &mv, 10))
            break;
        /* the failover and the way back: two epochs */
        mv.epoch0[0]++, mv.epoch0[1]++;
        back += run_while(&a, &b, both_moved, &mv, 10) &&
                run_while(&a, &b, both_on_fresh_primary, both, 10);
    }
    CHECK_EQ(back, n);
    finish(&a, &b, "flaps");
    flow_close(&a);
    flow_close(&b);
}

/* Both paths broken (garbage on both control channels, so no EOF: the peer is not "gone")
 * while the daemon keeps both NICs DOWN (no rebuild): an error within the dead timeout. */
static void test_both_dead(void)
{
    struct flow a;
    memset(&a, 0, sizeof(a));
    flow_init(&a);
    a.count = 1000000;
    for (int i = 0; i < 50; i++)
        flow_step(&a);
    daemon_set(0, LG_NIC_DOWN);
    daemon_set(1, LG_NIC_DOWN);
    /* No rebuild: were the fake daemon's heartbeat late on a loaded machine, its NICs would
     * read UNKNOWN (usable) and the paths would come back, which is right but not this test. */
    int64_t rejoin = lg_params.rejoin_ms;
    lg_params.rejoin_ms = 600000;
    usleep(100000);
    static const uint8_t junk[LG_CTRL_SIZE] = {0xee, 0xee, 0xee, 0xee};
    for (int i = 0; i < 2; i++) {
        struct lg_path *p = C(a.s)->paths[i];
        ssize_t w = write(lg_path_ctrl_fd(p), junk, sizeof(junk)); /* its session */
        CHECK_EQ(w, (ssize_t)sizeof(junk));
    }
    uint64_t t0 = lg_now_ns();
    while (!a.errors && lg_now_ns() - t0 < 10000000000ull)
        flow_step(&a);
    double took = (lg_now_ns() - t0) / 1e9;
    CHECK(a.errors > 0);
    CHECK_EQ(a.last_rc, ncclRemoteError);
    if (!(took < 6.0))
        fprintf(stderr, "both dead: error after %.2f s\n", took);
    /* LINKGUARD_DEAD_TIMEOUT_MS=1500, plus detection; time this process spends starved on a
     * loaded machine does not count against the paths (dead_check), hence the slack. */
    CHECK(took < 6.0);
    CHECK(took > 1.0);
    CHECK_EQ(a.bad, 0);
    lg_params.rejoin_ms = rejoin;
    daemon_set(0, LG_NIC_UP);
    daemon_set(1, LG_NIC_UP);
    flow_close(&a);
}

/* LG_TEST_VERBOSE=1: the plugin's INFO lines (failovers, switch times) on stderr. */
static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    if (level > NCCL_LOG_INFO || (level == NCCL_LOG_INFO && !getenv("LG_TEST_VERBOSE")))
        return;
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", buf);
}

int main(void)
{
    char shm[128];
    snprintf(shm, sizeof(shm), "/dev/shm/lgtest-failover-%d", (int)getpid());
    unlink(shm);
    setenv(LG_SHM_PATH_ENV, shm, 1);
    fast_failover_env("1500");
    loopback_devices("lgt0", "lgt1");
    flow_beat = daemon_beat;
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, logger), ncclSuccess);

    /* The transport contract (lg_test_contract.h), then the TCP transport's own cases. No
     * daemon: transport errors alone, and rebuilds by probing. */
    lg_contract_run(&tcp_contract);
    contract_break(&(struct lg_contract){.transport = "tcp, one data stream killed",
                                         .break_path = kill_one_stream}, 1);
    test_flaps(6);
    test_grouped_kill(1);
    test_grouped_kill(0);

    /* A daemon. */
    daemon_start(shm);
    usleep(300000); /* picked up at the next health tick */
    CHECK(lg_health_alive());
    test_daemon_states();
    contract_break(&tcp_contract, 0); /* with a daemon */
    test_both_dead();
    daemon_stop();

    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    unlink(shm);
    LG_TEST_DONE();
}
