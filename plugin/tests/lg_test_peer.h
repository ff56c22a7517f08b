/* A connection whose peer is the test itself: the plugin's real connection code on one side of
 * loopback TCP socket pairs, raw wire bytes (chunk headers, control frames) written and read
 * by the test on the other. The scripted peer may lie; used by the regression tests of the
 * peer-input checks and by the connection fuzz harness. Needs lg_core_init() and a device 0
 * (loopback_devices() in lg_test_pair.h). */
#ifndef LG_TEST_PEER_H
#define LG_TEST_PEER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/core.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "runtime/util.h"
#include "session/wire.h"
#include "transport/tcp/tcp.h"

#define LG_PEER_CHAN 7 /* the channel every scripted path has on its session */

struct lg_peer {
    struct lg_conn *c;
    int npaths, nstreams;
    int ctrl[LG_NPATHS];                    /* the peer's ends: each path's control session */
    int data[LG_NPATHS][LG_MAX_STREAMS];
    uint8_t crx[LG_NPATHS][LG_CTRL_SIZE];   /* a control frame being read */
    size_t crx_got[LG_NPATHS];
};

/* A blocking connect that a signal does not break: interrupted, it goes on in the kernel, and
 * its outcome is waited for. 0 or -1. */
static __attribute__((unused)) int peer_connect(int fd, const struct sockaddr_in *a)
{
    if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0)
        return 0;
    if (errno != EINTR)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int rc, err = 0;
    socklen_t len = sizeof(err);
    while ((rc = poll(&p, 1, 5000)) < 0 && errno == EINTR)
        ;
    return rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
}

/* A connected loopback TCP pair: sv[0] ours (non-blocking), sv[1] the peer's (blocking, with a
 * receive timeout so that no read can hang a test). 0 or -1. */
static __attribute__((unused)) int peer_tcp_pair(int sv[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int reuse = 1; /* a port whose last connection is in TIME_WAIT may serve again (fuzz_conn
                    * makes thousands of connections a minute) */
    sv[0] = sv[1] = -1;
    if (l >= 0)
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) != 0)
        goto out;
    sv[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sv[1] < 0 || peer_connect(sv[1], &a) != 0)
        goto out;
    do /* a signal (libFuzzer's timer) may interrupt the wait */
        sv[0] = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    while (sv[0] < 0 && errno == EINTR);
    struct timeval tv = {.tv_sec = 2};
    int one = 1;
    setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(sv[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
out:
    if (l >= 0)
        close(l);
    if (sv[0] < 0 && sv[1] >= 0) {
        close(sv[1]);
        sv[1] = -1;
    }
    return sv[0] >= 0 ? 0 : -1;
}

/* Our side of a connection of `kind` on device 0 with `npaths` paths (1: unprotected, 2: a
 * primary and a standing backup) of `nstreams` data streams, cutting messages into `chunk`
 * bytes. 0 or -1. */
static __attribute__((unused)) int peer_open(struct lg_peer *pe, enum lg_conn_kind kind, int npaths, int nstreams,
                     uint32_t chunk)
{
    memset(pe, 0, sizeof(*pe));
    pe->npaths = npaths;
    pe->nstreams = nstreams;
    struct lg_conn *c = lg_conn_new(kind, 0, &lg_tcp_transport, nstreams, chunk, lg_now_ns());
    if (!c)
        return -1;
    lg_fo_init(c);
    const struct lg_device *d = lg_core_device(0);
    for (int i = 0; i < npaths; i++) {
        struct lg_path *p = lg_path_new(c, i, d ? d->nic[i].name : "lo", "scripted-peer");
        int sv[2];
        if (!p || peer_tcp_pair(sv) != 0)
            return -1;
        /* A session of its own per path, the path on its channel LG_PEER_CHAN. */
        struct lg_session *s = lg_session_adopt(sv[0], c->nonce + (uint64_t)i);
        if (!s || lg_path_attach(p, s, LG_PEER_CHAN) != 0)
            return -1;
        pe->ctrl[i] = sv[1];
        for (int k = 0; k < nstreams; k++) {
            if (peer_tcp_pair(sv) != 0)
                return -1;
            p->data[k].task.fd = sv[0];
            pe->data[i][k] = sv[1];
        }
    }
    if (lg_core_conn_ready(c) != 0)
        return -1;
    pe->c = c;
    return 0;
}

static __attribute__((unused)) void peer_close(struct lg_peer *pe)
{
    if (pe->c)
        pe->c->kind == LG_CONN_SEND ? lg_core_close_send(pe->c) : lg_core_close_recv(pe->c);
    for (int i = 0; i < pe->npaths; i++) {
        close(pe->ctrl[i]);
        for (int k = 0; k < pe->nstreams; k++)
            close(pe->data[i][k]);
    }
    memset(pe, 0, sizeof(*pe));
}

static __attribute__((unused)) int peer_write(int fd, const void *buf, size_t len)
{
    const char *b = buf;
    while (len) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static __attribute__((unused)) int peer_frame(struct lg_peer *pe, int path, struct lg_ctrl f)
{
    uint8_t b[LG_CTRL_SIZE];
    f.chan = f.chan ? f.chan : LG_PEER_CHAN;
    lg_ctrl_encode(b, &f);
    return peer_write(pe->ctrl[path], b, sizeof(b));
}

/* A chunk header and `len` payload bytes from `payload` (NULL: zeros), on one data stream. */
static __attribute__((unused)) int peer_chunk(struct lg_peer *pe, int path, int stream, struct lg_chunk_hdr h,
                      const void *payload, size_t len)
{
    static const char zeros[1 << 16];
    uint8_t b[LG_CHUNK_HDR_SIZE];
    lg_chunk_encode(b, &h);
    if (peer_write(pe->data[path][stream], b, sizeof(b)) != 0)
        return -1;
    return len ? peer_write(pe->data[path][stream], payload ? payload : zeros, len) : 0;
}

/* The next control frame of `type` from our side on `path`, skipping others (heartbeats,
 * acks), waiting at most timeout_ms. 0 or -1. */
static __attribute__((unused)) int peer_expect(struct lg_peer *pe, int path, int type, struct lg_ctrl *out, int timeout_ms)
{
    uint64_t end = lg_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (lg_now_ns() < end) {
        struct pollfd pfd = {.fd = pe->ctrl[path], .events = POLLIN};
        if (poll(&pfd, 1, 10) <= 0)
            continue;
        ssize_t n = recv(pe->ctrl[path], pe->crx[path] + pe->crx_got[path],
                         LG_CTRL_SIZE - pe->crx_got[path], MSG_DONTWAIT);
        if (n <= 0)
            return -1;
        pe->crx_got[path] += (size_t)n;
        if (pe->crx_got[path] < LG_CTRL_SIZE)
            continue;
        pe->crx_got[path] = 0;
        if (lg_ctrl_decode(pe->crx[path], out) == 0 && out->type == type)
            return 0;
    }
    return -1;
}

/* Polls test() on r until it completes or fails, at most timeout_ms; reads and throws away
 * whatever our side sends on the data streams meanwhile (a sender must not stall). Returns 1
 * done, -1 failed (the result in *rc), 0 neither in time. */
static __attribute__((unused)) int peer_poll(struct lg_peer *pe, void *r, int timeout_ms, ncclResult_t *rc)
{
    uint64_t end = lg_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    char sink[1 << 16];
    while (lg_now_ns() < end) {
        int done = 0, size = 0;
        *rc = lg_core_test(r, &done, &size);
        if (*rc != ncclSuccess)
            return -1;
        if (done)
            return 1;
        for (int i = 0; i < pe->npaths; i++)
            for (int k = 0; k < pe->nstreams; k++)
                while (recv(pe->data[i][k], sink, sizeof(sink), MSG_DONTWAIT) > 0)
                    ;
        usleep(200);
    }
    return 0;
}

#endif
