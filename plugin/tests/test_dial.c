/* The dialer (src/session/dial.h) against plain listening sockets of the test: a path's
 * control session says its hello first, every data socket's hello names that session and the
 * path's channel, the held stream's hello comes only when asked for; a refused connect fails
 * as a connect, and one still in progress fails with ETIMEDOUT only once the caller's time is
 * up. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/core.h"
#include "lg_test.h"
#include "lg_test_pair.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "session/dial.h"
#include "session/session.h"
#include "transport/transport.h"

#define NSTREAMS 3
#define WAIT_NS 5000000000ull /* every wait here ends within 5 s */

static void no_frame(struct lg_chan *ch, const struct lg_ctrl *f, uint64_t now)
{
    (void)ch, (void)f, (void)now;
}
static void no_lost(struct lg_chan *ch, int err, int eof, const char *why)
{
    (void)ch, (void)err, (void)eof, (void)why;
}
static void no_bye(struct lg_chan *ch) { (void)ch; }
static const struct lg_chan_ops quiet_ops = {.frame = no_frame, .lost = no_lost, .bye = no_bye};

static int accept_one(int l)
{
    struct pollfd p = {.fd = l, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1)
        return -1;
    return accept4(l, NULL, NULL, SOCK_CLOEXEC);
}

/* The hello waiting on fd, or -1 if none came within 200 ms. */
static int read_hello(int fd, struct lg_hello *h)
{
    uint8_t buf[LG_HELLO_SIZE];
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got < sizeof(buf) && poll(&p, 1, 200) == 1) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - got, MSG_DONTWAIT);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return got == sizeof(buf) ? lg_hello_decode(buf, h) : -1;
}

/* Steps d until it is done or failed (or 5 s passed): its last answer. */
static int step_until_done(struct lg_dial *d)
{
    int rc = 0;
    uint64_t t0 = lg_now_ns();
    while ((rc = lg_dial_step(d, 0)) == 0 && lg_now_ns() - t0 < WAIT_NS)
        usleep(1000);
    return rc;
}

struct dialed {
    struct lg_chan ch;
    int fds[NSTREAMS + 1];
    struct lg_dial d;
};

/* A dial of NSTREAMS data sockets to port, on a session to sess_port; 0 or -1. */
static int dial(struct dialed *x, uint16_t sess_port, uint16_t port)
{
    uint32_t lo = inet_addr("127.0.0.1");
    memset(x, 0, sizeof(*x));
    struct lg_session *s = lg_session_open("", lo, lo, sess_port);
    if (!s || lg_session_attach(s, &x->ch, 0, &quiet_ops) != 0)
        return -1;
    x->d.ch = &x->ch;
    x->d.nstreams = NSTREAMS;
    x->d.held = 1;
    for (int k = 1; k <= NSTREAMS; k++) {
        x->fds[k] = -1;
        x->d.fd[k] = &x->fds[k];
    }
    x->d.hello = (struct lg_hello){.path = 1, .nstreams = NSTREAMS, .paths_mask = 3,
                                   .transport = LG_TRANSPORT_TCP, .blob = 1 << 20,
                                   .listen_id = 0x1157, .conn_nonce = 42,
                                   .flags = LG_HELLO_F_REJOIN, .gen = 5};
    return lg_dial_start(&x->d, "", lo, lo, port);
}

static void undial(struct dialed *x)
{
    for (int k = 1; k <= NSTREAMS; k++)
        if (x->fds[k] >= 0)
            close(x->fds[k]);
    lg_session_detach(&x->ch);
    lg_session_put(x->ch.sess);
}

static void test_hellos(void)
{
    uint16_t port;
    int l = lg_sock_listen(inet_addr("127.0.0.1"), &port);
    CHECK(l >= 0);
    struct dialed x;
    CHECK_EQ(dial(&x, port, port), 0);
    CHECK_EQ(step_until_done(&x.d), 1);
    int seen[NSTREAMS + 1] = {0}, held_fd = -1, sessions = 0;
    for (int i = 0; i < NSTREAMS + 1; i++) {
        int fd = accept_one(l);
        CHECK(fd >= 0);
        struct lg_hello h;
        if (fd >= 0 && read_hello(fd, &h) == 0) {
            if (h.flags & LG_HELLO_F_SESSION) {
                sessions++;
                CHECK_EQ(h.conn_nonce, x.ch.sess->id);
            } else {
                CHECK(h.stream >= 1 && h.stream <= NSTREAMS);
                seen[h.stream % (NSTREAMS + 1)]++;
                CHECK_EQ(h.session, x.ch.sess->id);
                CHECK_EQ(h.chan, x.ch.id);
                CHECK_EQ(h.conn_nonce, 42);
                CHECK_EQ(h.gen, 5);
                CHECK_EQ(h.path, 1);
                CHECK_EQ(h.paths_mask, 3);
                CHECK_EQ(h.flags, LG_HELLO_F_REJOIN);
            }
            close(fd);
        } else if (fd >= 0) {
            held_fd = fd; /* the held stream's: nothing said yet */
        }
    }
    CHECK_EQ(sessions, 1);
    CHECK_EQ(seen[1], 0);
    for (int k = 2; k <= NSTREAMS; k++)
        CHECK_EQ(seen[k], 1);
    CHECK(held_fd >= 0);
    CHECK_EQ(lg_dial_hello(&x.d, 1), 1);
    struct lg_hello h = {0};
    CHECK_EQ(read_hello(held_fd, &h), 0);
    CHECK_EQ(h.stream, 1);
    CHECK_EQ(h.chan, x.ch.id);
    close(held_fd);
    undial(&x);
    close(l);
}

static void test_refused(void)
{
    uint16_t sess_port, port;
    int ls = lg_sock_listen(inet_addr("127.0.0.1"), &sess_port);
    int gone = lg_sock_listen(inet_addr("127.0.0.1"), &port);
    CHECK(ls >= 0 && gone >= 0);
    close(gone); /* nothing listens on port now */
    struct dialed x;
    CHECK_EQ(dial(&x, sess_port, port), 0);
    CHECK_EQ(step_until_done(&x.d), -1);
    CHECK_EQ(errno, ECONNREFUSED);
    CHECK_EQ(x.d.part, LG_DIAL_CONNECT);
    undial(&x);
    close(ls);
}

/* A listener whose accept queue is full drops the SYNs: the dial's connects stay in progress
 * until the caller says its time is up. */
static void test_expired(void)
{
    uint16_t sess_port, port;
    int ls = lg_sock_listen(inet_addr("127.0.0.1"), &sess_port);
    int full = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = inet_addr("127.0.0.1")};
    socklen_t len = sizeof(a);
    CHECK(ls >= 0 && full >= 0);
    CHECK_EQ(bind(full, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(listen(full, 0), 0);
    CHECK_EQ(getsockname(full, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    int filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EQ(connect(filler, (struct sockaddr *)&a, sizeof(a)), 0); /* fills the queue */
    struct dialed x;
    CHECK_EQ(dial(&x, sess_port, port), 0);
    uint64_t t0 = lg_now_ns();
    while (!lg_dial_connected(&x.d) && !x.d.connected[0] && lg_now_ns() - t0 < WAIT_NS)
        CHECK_EQ(lg_dial_step(&x.d, 0), 0);
    usleep(100000);
    CHECK_EQ(lg_dial_step(&x.d, 0), 0); /* the session is up, the data sockets are not */
    CHECK_EQ(x.d.connected[0], 1);
    CHECK_EQ(lg_dial_step(&x.d, 1), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    CHECK_EQ(x.d.part, LG_DIAL_CONNECT);
    undial(&x);
    close(filler);
    close(full);
    close(ls);
}

int main(void)
{
    loopback_devices("lgd0", "lgd1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    test_hellos();
    test_refused();
    test_expired();
    LG_TEST_DONE();
}
