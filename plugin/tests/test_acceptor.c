/* The shared listener (acceptor.h) through the real listen/connect/accept over loopback: every
 * listen comm of the process gets the same port and no descriptor of its own; connections
 * started together and accepted in another order each reach the listen comm they named;
 * strangers, and hellos naming a closed listen comm, are closed without harming the
 * connections around them; the listener closes once nothing holds it. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/connect.h"
#include "abi/core.h"
#include "abi/listen.h"
#include "lg_test.h"
#include "lg_test_pair.h"
#include "runtime/util.h"
#include "session/handle.h"
#include "session/wire.h"
#include "transport/transport.h"

#define N 16

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int wait_done(void *req)
{
    int done = 0, size = 0;
    uint64_t t0 = lg_now_ns();
    while (!done && lg_now_ns() - t0 < 10000000000ull)
        if (lg_core_test(req, &done, &size) != ncclSuccess)
            return -1;
    return done ? 0 : -1;
}

/* A raw TCP socket to 127.0.0.1:port that writes `len` bytes. -1 if it cannot connect. */
static int raw_send(uint16_t port, const void *buf, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = inet_addr("127.0.0.1")};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the peer closed fd within 10 s (EOF or reset), else 0. Accepts are progressed by
 * the monitor thread and by `l` (a live listen comm), as NCCL would. */
static int closed_by_peer(int fd, void *l)
{
    uint64_t t0 = lg_now_ns();
    while (lg_now_ns() - t0 < 10000000000ull) {
        void *r = NULL;
        if (l)
            lg_core_accept(l, &r);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) == 1) {
            char b;
            ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
            return n == 0 || (n < 0 && errno == ECONNRESET);
        }
    }
    return 0;
}

static void test_shared_port_and_routing(void)
{
    char handle[N][NCCL_NET_HANDLE_MAXSIZE];
    void *l[N] = {0}, *s[N] = {0}, *r[N] = {0};
    struct lg_handle h[N];
    int fds1 = -1;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(lg_core_listen(0, handle[i], &l[i]), ncclSuccess);
        CHECK_EQ(lg_handle_decode(handle[i], &h[i]), LG_HANDLE_OK);
        if (i == 0)
            fds1 = open_fds();
    }
    CHECK_EQ(open_fds(), fds1); /* listen comms 2..N opened no descriptor */
    for (int i = 1; i < N; i++) {
        CHECK_EQ(h[i].port[0], h[0].port[0]);
        CHECK_EQ(h[i].port[1], h[0].port[1]);
        CHECK(h[i].listen_id != h[0].listen_id);
    }
    /* A stranger on the shared port, then every connect started before any accept; accepts
     * in reverse order. */
    char junk[LG_HELLO_SIZE];
    memset(junk, 0x5a, sizeof(junk));
    int stranger = raw_send(h[0].port[0], junk, sizeof(junk));
    CHECK(stranger >= 0);
    uint64_t t0 = lg_now_ns();
    int left = 2 * N;
    while (left > 0 && lg_now_ns() - t0 < 10000000000ull) {
        for (int i = 0; i < N; i++)
            if (!s[i] && lg_core_connect(0, handle[i], &s[i]) == ncclSuccess && s[i])
                left--;
        for (int i = N - 1; i >= 0; i--)
            if (!r[i] && lg_core_accept(l[i], &r[i]) == ncclSuccess && r[i])
                left--;
    }
    CHECK_EQ(left, 0);
    if (stranger >= 0) {
        CHECK(closed_by_peer(stranger, l[0]));
        close(stranger);
    }
    /* Each connection carries its own index: connection i reached listen comm i. */
    for (int i = 0; i < N && !left; i++) {
        uint32_t out = 0xc0de0000u + (uint32_t)i, in = 0;
        void *sd = &out, *rd = &in, *sr = NULL, *rr = NULL;
        size_t sz = sizeof(in);
        CHECK_EQ(lg_core_irecv(r[i], 1, &rd, &sz, NULL, NULL, &rr), ncclSuccess);
        CHECK_EQ(lg_core_isend(s[i], sd, sizeof(out), 0, NULL, &sr), ncclSuccess);
        CHECK_EQ(wait_done(rr), 0);
        CHECK_EQ(wait_done(sr), 0);
        CHECK_EQ(in, out);
    }
    /* A hello naming a listen comm that is closed is refused; the others go on. */
    CHECK_EQ(lg_core_close_listen(l[N - 1]), ncclSuccess);
    struct lg_hello hello = {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 1,
                             .transport = LG_TRANSPORT_TCP, .blob = 4096,
                             .listen_id = h[N - 1].listen_id,
                             .conn_nonce = 42};
    uint8_t buf[LG_HELLO_SIZE];
    lg_hello_encode(buf, &hello);
    int late = raw_send(h[0].port[0], buf, sizeof(buf));
    CHECK(late >= 0);
    if (late >= 0) {
        CHECK(closed_by_peer(late, l[0]));
        close(late);
    }
    for (int i = 0; i < N - 1; i++)
        CHECK_EQ(lg_core_close_listen(l[i]), ncclSuccess);
    /* The connections hold the listener (rebuilt paths come to it) ... */
    int still = raw_send(h[0].port[0], junk, 1);
    CHECK(still >= 0);
    if (still >= 0)
        close(still);
    for (int i = 0; i < N; i++) {
        if (s[i])
            CHECK_EQ(lg_core_close_send(s[i]), ncclSuccess);
        if (r[i])
            CHECK_EQ(lg_core_close_recv(r[i]), ncclSuccess);
    }
    /* ... and once nothing does, it is closed. */
    CHECK_EQ(raw_send(h[0].port[0], junk, 1), -1);
}

int main(void)
{
    setenv("LINKGUARD_CONNECT_TIMEOUT_MS", "3000", 1);
    loopback_devices("lo", "lo");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    test_shared_port_and_routing();
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
