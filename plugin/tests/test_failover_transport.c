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

#include "conn.h"
#include "core.h"
#include "health.h"
#include "lg_test.h"
#include "lg_test_grouped.h"
#include "lg_test_pair.h"
#include "params.h"
#include "util.h"

#define DEPTH 8
#define MAXSZ 1100000u

/* ---- a fake daemon ------------------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    struct lg_shm_writer *w;
    uint32_t state[2];
    uint64_t epoch;
    int stop;
    pthread_t tid;
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void daemon_publish_locked(void)
{
    struct lg_shm_nic nics[2];
    memset(nics, 0, sizeof(nics));
    for (int i = 0; i < 2; i++) {
        snprintf(nics[i].name, sizeof(nics[i].name), "lgt%d", i);
        nics[i].state = fake.state[i];
        nics[i].epoch = fake.epoch;
        nics[i].backup_index = 1 - i;
    }
    lg_shm_writer_update(fake.w, nics, 2);
}

static void *daemon_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&fake.mu);
        int stop = fake.stop;
        if (!stop)
            lg_shm_writer_heartbeat(fake.w, lg_now_ns());
        pthread_mutex_unlock(&fake.mu);
        if (stop)
            return NULL;
        usleep(20000);
    }
}

static void daemon_start(const char *path)
{
    int err = 0;
    fake.w = lg_shm_writer_create(path, 8, 16, (uint32_t)getpid(), &err);
    CHECK(fake.w != NULL);
    fake.state[0] = fake.state[1] = LG_NIC_UP;
    pthread_mutex_lock(&fake.mu);
    daemon_publish_locked();
    pthread_mutex_unlock(&fake.mu);
    fake.stop = 0;
    pthread_create(&fake.tid, NULL, daemon_main, NULL);
}

/* Also from the test's own loops: a starved heartbeat thread (a loaded machine) must not
 * make the fake daemon look dead. */
static void daemon_beat(void)
{
    if (!fake.w || fake.stop || pthread_mutex_trylock(&fake.mu) != 0)
        return;
    if (!fake.stop)
        lg_shm_writer_heartbeat(fake.w, lg_now_ns());
    pthread_mutex_unlock(&fake.mu);
}

static void daemon_set(int nic, uint32_t state)
{
    pthread_mutex_lock(&fake.mu);
    fake.state[nic] = state;
    fake.epoch++;
    daemon_publish_locked();
    pthread_mutex_unlock(&fake.mu);
}

static void daemon_stop(void)
{
    pthread_mutex_lock(&fake.mu);
    fake.stop = 1;
    pthread_mutex_unlock(&fake.mu);
    pthread_join(fake.tid, NULL);
    lg_shm_writer_close(fake.w, 1);
    fake.w = NULL;
}

/* ---- flows --------------------------------------------------------------------------------- */

struct flow {
    void *s, *r;
    char *sb[DEPTH], *rb[DEPTH];
    void *sreq[DEPTH], *rreq[DEPTH];
    uint64_t posted_s, posted_r, done_s, done_r, count;
    int bad, errors;
    ncclResult_t last_rc;
};

static size_t msg_size(uint64_t i)
{
    static const size_t sizes[] = {0, 1, 100, 65536, 65537, 524288, 524289, 1048576 + 3,
                                   MAXSZ, 7, 300000};
    _Static_assert(1048576 + 3 <= MAXSZ, "sizes fit the buffers");
    return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

static uint8_t pattern(uint64_t i, size_t k) { return (uint8_t)(i * 131 + k * 7 + (k >> 9)); }

static void flow_init(struct flow *f)
{
    memset(f, 0, sizeof(*f));
    CHECK_EQ(pair_connect(&f->s, &f->r), 0);
    for (int i = 0; i < DEPTH; i++) {
        f->sb[i] = malloc(MAXSZ);
        f->rb[i] = malloc(MAXSZ);
    }
}

static void flow_close(struct flow *f)
{
    if (f->s)
        lg_core_close_send(f->s);
    if (f->r)
        lg_core_close_recv(f->r);
    for (int i = 0; i < DEPTH; i++) {
        free(f->sb[i]);
        free(f->rb[i]);
    }
}

static void note_rc(struct flow *f, ncclResult_t rc)
{
    if (rc != ncclSuccess) {
        f->errors++;
        f->last_rc = rc;
    }
}

/* One pass: post what the window allows, complete in order, verify. */
static void flow_step(struct flow *f)
{
    daemon_beat();
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
    while (f->posted_s < f->count && f->posted_s - f->done_s < DEPTH) {
        int k = (int)(f->posted_s % DEPTH);
        size_t sz = msg_size(f->posted_s);
        for (size_t b = 0; b < sz; b++)
            f->sb[k][b] = (char)pattern(f->posted_s, b);
        void *req = NULL;
        ncclResult_t rc = lg_core_isend(f->s, f->sb[k], sz, 0, NULL, &req);
        note_rc(f, rc);
        if (rc != ncclSuccess || !req)
            break;
        f->sreq[k] = req;
        f->posted_s++;
    }
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
        for (size_t k = 0; ok && k < want; k++)
            ok = b[k] == pattern(f->done_r, k);
        f->bad += !ok;
        f->done_r++;
    }
}

static int flow_done(const struct flow *f)
{
    return f->done_s == f->count && f->done_r == f->count;
}

/* Runs both flows until each has completed `until` more messages (or they are done). */
static void run_until(struct flow *a, struct flow *b, uint64_t until_a, uint64_t until_b,
                      double max_s)
{
    uint64_t t0 = lg_now_ns();
    while ((a->done_r < until_a || b->done_r < until_b || (until_a >= a->count && !flow_done(a)) ||
            (until_b >= b->count && !flow_done(b))) && !a->errors && !b->errors &&
           lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        flow_step(a);
        flow_step(b);
    }
}

/* Keeps traffic going until pred() holds (or max_s). */
static int run_while(struct flow *a, struct flow *b, int (*pred)(void *), void *arg, double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (!pred(arg) && !a->errors && !b->errors && lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        if (a->posted_s + DEPTH >= a->count)
            a->count += 16;
        if (b->posted_s + DEPTH >= b->count)
            b->count += 16;
        flow_step(a);
        flow_step(b);
        usleep(100);
    }
    return pred(arg);
}

static struct lg_conn *C(void *comm) { return (struct lg_conn *)comm; }

static int active_of(void *comm) { return __atomic_load_n(&C(comm)->active, __ATOMIC_ACQUIRE); }
static uint32_t epoch_of(void *comm) { return __atomic_load_n(&C(comm)->epoch, __ATOMIC_ACQUIRE); }

/* The sender's view decides; the receiver follows. */
static int on_backup(void *arg)
{
    struct flow *f = arg;
    return active_of(f->s) == 1 && active_of(f->r) == 1 && epoch_of(f->s) == epoch_of(f->r);
}
static int on_fresh_primary(void *arg)
{
    struct flow *f = arg;
    struct lg_path *p = __atomic_load_n(&C(f->s)->paths[0], __ATOMIC_ACQUIRE);
    return active_of(f->s) == 0 && active_of(f->r) == 0 && p && p->gen > 0 &&
           epoch_of(f->s) == epoch_of(f->r);
}
static int both_on_backup(void *arg)
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
static int both_moved(void *arg)
{
    struct moved_arg *m = arg;
    for (int i = 0; i < 2; i++)
        if (epoch_of(m->f[i]->s) <= m->epoch0[i] || epoch_of(m->f[i]->r) <= m->epoch0[i])
            return 0;
    return 1;
}
static int both_on_fresh_primary(void *arg)
{
    struct flow **f = arg;
    return on_fresh_primary(f[0]) && on_fresh_primary(f[1]);
}

/* shutdown() every socket of a comm's path (or one data stream): the peer sees EOF. */
static void kill_path(void *comm, int slot, int only_stream)
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
    } else {
        fds[n++] = p->ctrl.task.fd;
        for (int i = 0; i < p->nstreams; i++)
            fds[n++] = p->data[i].task.fd;
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            shutdown(fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&p->ctrl_mu);
}

static void finish(struct flow *a, struct flow *b, const char *what)
{
    a->count = a->posted_s > a->count ? a->posted_s : a->count;
    b->count = b->posted_s > b->count ? b->posted_s : b->count;
    a->count += 24;
    b->count += 24;
    run_until(a, b, a->count, b->count, 30);
    int ok = flow_done(a) && flow_done(b) && !a->bad && !b->bad && !a->errors && !b->errors;
    if (!ok)
        fprintf(stderr, "not ok: %s: a %llu/%llu bad %d err %d (rc %d); b %llu/%llu bad %d "
                "err %d (rc %d)\n", what, (unsigned long long)a->done_r,
                (unsigned long long)a->count, a->bad, a->errors, (int)a->last_rc,
                (unsigned long long)b->done_r, (unsigned long long)b->count, b->bad, b->errors,
                (int)b->last_rc);
    CHECK(ok);
}

/* ---- scenarios ---------------------------------------------------------------------------- */

/* A transport kill on either side, failover, then (no daemon opinion: a probe) rebuild and
 * reintegration. */
static void test_kill(int sender_side, int one_stream, const char *what)
{
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    struct flow *both[2] = {&a, &b};
    a.count = b.count = 40;
    run_until(&a, &b, 10, 10, 20);
    struct moved_arg mv = {both, {epoch_of(a.s), epoch_of(b.s)}};
    kill_path(sender_side ? a.s : a.r, 0, one_stream);
    kill_path(sender_side ? b.s : b.r, 0, one_stream);
    CHECK(run_while(&a, &b, both_moved, &mv, 10));
    run_until(&a, &b, a.done_r + 10, b.done_r + 10, 20);
    CHECK(run_while(&a, &b, both_on_fresh_primary, both, 10));
    finish(&a, &b, what);
    CHECK_EQ(a.errors + b.errors, 0);
    flow_close(&a);
    flow_close(&b);
}

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
        ssize_t w = write(p->ctrl.task.fd, junk, sizeof(junk));
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
    setenv("LINKGUARD_BIND_DEVICE", "0", 1);
    setenv("LINKGUARD_CONNECT_TIMEOUT_MS", "3000", 1);
    setenv("LINKGUARD_HEARTBEAT_MS", "20", 1);
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "500", 1);
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", "1500", 1);
    setenv("LINKGUARD_REJOIN_MS", "100", 1);
    setenv("LINKGUARD_REJOIN_MAX_MS", "400", 1);
    loopback_devices("lgt0", "lgt1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, logger), ncclSuccess);

    /* No daemon: transport errors alone, and rebuilds by probing. */
    test_kill(1, 0, "kill on the sender's side");
    test_kill(0, 0, "kill on the receiver's side");
    test_kill(1, 2, "one data stream killed");
    test_flaps(6);
    test_grouped_kill(1);
    test_grouped_kill(0);

    /* A daemon. */
    daemon_start(shm);
    usleep(300000); /* picked up at the next health tick */
    CHECK(lg_health_alive());
    test_daemon_states();
    test_kill(0, 0, "kill with a daemon");
    test_both_dead();
    daemon_stop();

    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    unlink(shm);
    LG_TEST_DONE();
}
