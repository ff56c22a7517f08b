/* Control sessions (src/session/session.h) inside one process over loopback, no daemon: many
 * connections share one session per NIC pair and direction of set-up, and cost only their
 * data sockets; a session that dies fails every path on it at once, and every connection
 * fails over losslessly and gets a fresh session for its rebuilt path; a session ended on
 * purpose (garbage from the peer) says so, so the peer does not take it for a death; frames
 * for a channel nobody has harm nothing, and those for a channel attached later (a connect
 * completes before its accept) reach it then, in order; a monitor tick that read the clock
 * before a session was opened does not take it for one connecting too long. */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/core.h"
#include "lg_test.h"
#include "lg_test_flow.h"
#include "lg_test_pair.h"
#include "proto/conn.h"
#include "runtime/util.h"
#include "session/acceptor.h"
#include "session/session.h"

#define NFLOWS 6

static struct flow flows[NFLOWS];

static void step_all(void)
{
    for (int i = 0; i < NFLOWS; i++) {
        if (flows[i].posted_s + DEPTH >= flows[i].count)
            flows[i].count += 16;
        flow_step(&flows[i]);
    }
}

/* Read as NCCL's thread reads a path: inside a section the monitor waits out before it frees
 * a replaced one (lg_conn_enter). */
static int path_settled(struct lg_conn *c, int slot, const struct lg_session *not_this,
                        uint32_t min_gen)
{
    uint32_t ph = lg_conn_enter(c);
    struct lg_path *p = __atomic_load_n(&c->paths[slot], __ATOMIC_ACQUIRE);
    int ok = p && lg_path_up(p) && lg_path_sess(p) != not_this && p->gen >= min_gen;
    lg_conn_exit(c, ph);
    return ok;
}

static int all_settled(int slot, const struct lg_session *not_this)
{
    for (int i = 0; i < NFLOWS; i++)
        if (!path_settled(C(flows[i].s), slot, not_this, 0) || active_of(flows[i].s) != 0 ||
            epoch_of(flows[i].s) != epoch_of(flows[i].r))
            return 0;
    return 1;
}

static int run_until_settled(int slot, const struct lg_session *not_this, double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (!all_settled(slot, not_this) && lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        step_all();
        usleep(100);
    }
    return all_settled(slot, not_this);
}

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

/* Every connection between the two "processes" (here one) uses one session per NIC and
 * direction: 2 NICs x (outgoing + accepted) = 4, however many connections there are. */
static void test_shared(void)
{
    int fds0 = open_fds();
    for (int i = 0; i < NFLOWS; i++) {
        flow_init(&flows[i]);
        flows[i].count = 40;
    }
    CHECK_EQ(lg_sessions_count(), 4);
    for (int slot = 0; slot < LG_NPATHS; slot++)
        for (int i = 1; i < NFLOWS; i++) {
            CHECK(C(flows[i].s)->paths[slot]->ch.sess == C(flows[0].s)->paths[slot]->ch.sess);
            CHECK(C(flows[i].r)->paths[slot]->ch.sess == C(flows[0].r)->paths[slot]->ch.sess);
            CHECK(C(flows[i].s)->paths[slot]->ch.id != C(flows[0].s)->paths[slot]->ch.id);
        }
    /* Both sides of every connection: its data sockets only (2 paths x nstreams each). */
    int per_conn = 2 * LG_NPATHS * C(flows[0].s)->nstreams;
    CHECK_EQ(open_fds() - fds0, NFLOWS * per_conn + 4 + 2); /* + the 2 listening sockets */
    for (int k = 0; k < 200 && !flow_done(&flows[0]); k++)
        for (int i = 0; i < NFLOWS; i++)
            flow_step(&flows[i]);
}

/* The primary NIC pair's session dies (its socket shut down under it): every connection's
 * primary path fails at once, each moves to its backup without losing a message, and each
 * rebuilds its primary on a fresh session and moves back. */
static void test_session_dies(void)
{
    struct lg_session *s = lg_path_sess(C(flows[0].s)->paths[0]);
    CHECK(lg_session_up(s));
    for (int k = 0; k < 50; k++)
        step_all();
    shutdown(s->task.fd, SHUT_RDWR);
    CHECK(run_until_settled(0, s, 20.0));
    for (int i = 0; i < NFLOWS; i++) {
        CHECK(path_settled(C(flows[i].s), 0, s, 1)); /* rebuilt */
        CHECK(epoch_of(flows[i].s) >= 2);          /* away and back */
    }
    for (int i = 0; i < NFLOWS; i++) {
        flows[i].count = flows[i].posted_s + 8;
        uint64_t t0 = lg_now_ns();
        while (!flow_done(&flows[i]) && !flows[i].errors && lg_now_ns() - t0 < 10000000000ull)
            flow_step(&flows[i]);
        if (!flow_done(&flows[i]))
            fprintf(stderr, "flow %d: %llu/%llu sent %llu/%llu received of %llu\n", i,
                    (unsigned long long)flows[i].posted_s, (unsigned long long)flows[i].done_s,
                    (unsigned long long)flows[i].posted_r, (unsigned long long)flows[i].done_r,
                    (unsigned long long)flows[i].count);
        CHECK(flow_done(&flows[i]));
        CHECK_EQ(flows[i].bad, 0);
        CHECK_EQ(flows[i].errors, 0);
    }
}

/* Frames for a channel nobody has (a closed path's, a stranger's) are dropped; the session
 * and its paths go on. */
static void test_unknown_channel(void)
{
    struct lg_path *p = C(flows[0].s)->paths[1];
    struct lg_session *s = lg_path_sess(p);
    uint8_t b[LG_CTRL_SIZE];
    lg_ctrl_encode(b, &(struct lg_ctrl){.type = LG_CTRL_ACK, .value = 1u << 30,
                                         .chan = 0x7fffffffu});
    /* Written on the receiver's end of the same session: it reaches our sender's side. */
    struct lg_path *rp = C(flows[0].r)->paths[1];
    CHECK_EQ(write(lg_path_ctrl_fd(rp), b, sizeof(b)), (ssize_t)sizeof(b));
    for (int k = 0; k < 200; k++)
        step_all();
    CHECK(lg_session_up(s));
    CHECK(lg_path_up(p));
    CHECK_EQ(__atomic_load_n(&C(flows[0].s)->error, __ATOMIC_ACQUIRE), 0);
}

/* The monitor reads the clock, then takes the registry's lock: a session opened between the
 * two is younger than its now. Such a tick must not fail it as connecting too long (now - t0
 * wrapped), which a connect under load once met as "Operation now in progress". */
static void test_tick_older_than_a_session(void)
{
    uint64_t before = lg_now_ns();
    uint16_t port = 0;
    uint32_t lo = inet_addr("127.0.0.1");
    struct lg_listener *l = lg_listener_get(lo, &port);
    CHECK(l != NULL);
    /* From 127.0.0.3: no session of the other tests' is reused. */
    struct lg_session *s = l ? lg_session_open("lgs0", inet_addr("127.0.0.3"), lo, port) : NULL;
    CHECK(s != NULL);
    if (!s) {
        lg_listener_put(l);
        return;
    }
    usleep(1000); /* t0 is in the past, but after `before` */
    lg_sessions_tick(before);
    int rc = 1;
    uint64_t t0 = lg_now_ns();
    while ((rc = lg_session_connect_check(s)) == 1 && lg_now_ns() - t0 < 10000000000ull)
        usleep(100);
    CHECK_EQ(rc, 0);
    CHECK(lg_session_up(s));
    lg_session_put(s);
    lg_listener_put(l);
}

/* A channel that records what it is handed (on a worker thread). */
static uint64_t got_value[LG_SESS_HELD + 8];
static int got_n;

static void rec_frame(struct lg_chan *ch, const struct lg_ctrl *f, uint64_t now)
{
    (void)ch, (void)now;
    int i = __atomic_load_n(&got_n, __ATOMIC_RELAXED);
    if (i < (int)(sizeof(got_value) / sizeof(got_value[0])))
        got_value[i] = f->value;
    __atomic_store_n(&got_n, i + 1, __ATOMIC_RELEASE);
}
static void rec_lost(struct lg_chan *ch, int err, int eof, const char *why)
{
    (void)ch, (void)err, (void)eof, (void)why;
}
static void rec_bye(struct lg_chan *ch) { (void)ch; }
static const struct lg_chan_ops rec_ops = {.frame = rec_frame, .lost = rec_lost, .bye = rec_bye};

static void send_frame(int fd, uint32_t chan, uint8_t type, uint64_t value)
{
    uint8_t b[LG_CTRL_SIZE];
    lg_ctrl_encode(b, &(struct lg_ctrl){.type = type, .value = value, .chan = chan});
    CHECK_EQ(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
}

static int wait_got(int n)
{
    uint64_t t0 = lg_now_ns();
    while (__atomic_load_n(&got_n, __ATOMIC_ACQUIRE) < n && lg_now_ns() - t0 < 10000000000ull)
        usleep(1000);
    return __atomic_load_n(&got_n, __ATOMIC_ACQUIRE);
}

/* The peer's frames for channel 7 come before we attach it (its connect returned before our
 * accept): they are held, and handed over once it is attached, oldest first and before any
 * newer frame of it; beyond LG_SESS_HELD the oldest are the ones dropped. A frame for
 * another channel still held harms nothing. */
static void test_frames_before_attach(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct lg_session *s = lg_session_adopt(sv[0], 0x5e55);
    CHECK(s != NULL);
    if (!s)
        return;
    enum { SENT = LG_SESS_HELD + 4 };
    for (int i = 0; i < SENT; i++)
        send_frame(sv[1], 7, LG_CTRL_ACK, (uint64_t)i);
    send_frame(sv[1], 9, LG_CTRL_ACK, 999); /* nobody's: held too, pushes out one more */
    /* A worker reads them meanwhile: wait until it has read them all and found nothing more
     * (drained_ns is set after the frames before it were handed on), then attach. */
    uint64_t t0 = lg_now_ns();
    int left = 1;
    while ((ioctl(sv[0], FIONREAD, &left) != 0 || left > 0 ||
            __atomic_load_n(&s->drained_ns, __ATOMIC_ACQUIRE) <= t0) &&
           lg_now_ns() - t0 < 10000000000ull)
        usleep(1000);
    CHECK_EQ(left, 0);
    CHECK_EQ(__atomic_load_n(&got_n, __ATOMIC_ACQUIRE), 0);
    struct lg_chan ch = {0};
    CHECK_EQ(lg_session_attach(s, &ch, 7, &rec_ops), 0);
    /* The attach itself has the reader hand them over: no newer frame is needed. */
    CHECK_EQ(wait_got(LG_SESS_HELD - 1), LG_SESS_HELD - 1);
    send_frame(sv[1], 7, LG_CTRL_ACK, 1000);
    int want = LG_SESS_HELD - 1 + 1; /* the held ones of channel 7, then the newer one */
    CHECK_EQ(wait_got(want), want);
    int in_order = 1;
    for (int i = 0; i < LG_SESS_HELD - 1; i++) /* the first SENT - 63 went to make room */
        in_order &= got_value[i] == (uint64_t)(SENT - (LG_SESS_HELD - 1) + i);
    CHECK(in_order);
    CHECK_EQ(got_value[LG_SESS_HELD - 1], 1000);
    CHECK(lg_session_up(s));
    lg_session_detach(&ch);
    lg_session_put(s);
    close(sv[1]);
}

int main(void)
{
    fast_failover_env("3000");
    setenv("LINKGUARD_REINTEGRATE", "1", 1);
    loopback_devices("lgs0", "lgs1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    test_shared();
    test_session_dies();
    test_unknown_channel();
    test_tick_older_than_a_session();
    test_frames_before_attach();
    /* Every flow delivers what its sender posted before it closes: a sender's close waits for
     * the acks of its kept sends (up to the dead timeout), and a receiver that posts no more
     * receives sends none. */
    for (int i = 0; i < NFLOWS; i++) {
        flows[i].count = flows[i].posted_s > flows[i].count ? flows[i].posted_s : flows[i].count;
        uint64_t t0 = lg_now_ns();
        while (!flow_done(&flows[i]) && !flows[i].errors && lg_now_ns() - t0 < 10000000000ull)
            flow_step(&flows[i]);
        CHECK(flow_done(&flows[i]));
        CHECK_EQ(flows[i].bad, 0);
    }
    for (int i = 0; i < NFLOWS; i++)
        flow_close(&flows[i]);
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
