/* lg_nccl_driver helpers: the per-message byte pattern, the management socket, timing. */
#ifndef LG_DRIVER_UTIL_H
#define LG_DRIVER_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double drv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t drv_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Pattern: word i of message m on connection c, direction d = base[i] ^ key(c, d, m), where
 * base is random per position. Misplaced, stale, mixed-up or flipped bytes all fail, and
 * filling/verifying costs one XOR per word (the check must not be the bottleneck). */
struct drv_pattern {
    uint64_t *base;
    size_t words;
};

static int drv_pattern_init(struct drv_pattern *p, size_t bytes)
{
    p->words = (bytes + 7) / 8 + 1;
    p->base = malloc(p->words * 8);
    if (!p->base)
        return -1;
    for (size_t i = 0; i < p->words; i++)
        p->base[i] = drv_mix(i * 0x2545f4914f6cdd1dull + 1);
    return 0;
}

static uint64_t drv_key(int conn, int dir, uint64_t msg)
{
    return drv_mix(((uint64_t)conn << 40) ^ ((uint64_t)dir << 39) ^ msg) | 1;
}

static void drv_fill(const struct drv_pattern *p, void *buf, size_t size, uint64_t key)
{
    uint64_t *w = buf;
    size_t n = size / 8;
    for (size_t i = 0; i < n; i++)
        w[i] = p->base[i] ^ key;
    if (size % 8) {
        uint64_t last = p->base[n] ^ key;
        memcpy((char *)buf + n * 8, &last, size % 8);
    }
}

/* Offset of the first wrong byte, or -1. */
static long long drv_verify(const struct drv_pattern *p, const void *buf, size_t size,
                            uint64_t key)
{
    const uint64_t *w = buf;
    size_t n = size / 8;
    for (size_t i = 0; i < n; i++)
        if (w[i] != (p->base[i] ^ key))
            return (long long)(i * 8);
    if (size % 8) {
        uint64_t last = p->base[n] ^ key;
        if (memcmp((const char *)buf + n * 8, &last, size % 8))
            return (long long)(n * 8);
    }
    return -1;
}

/* "4096", "64K", "1M", "2G" (binary units). */
static uint64_t parse_size(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    switch (*e) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

/* ---- management socket: a plain TCP connection for handle exchange and the barrier ---- */

static int drv_parse_addr(const char *s, struct sockaddr_in *a)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || colon - s >= (long)sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(colon + 1));
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

/* Server: accept one peer; client: connect, retrying until the deadline. */
static int drv_mgmt_open(const char *addr, int server, double deadline)
{
    struct sockaddr_in a;
    if (drv_parse_addr(addr, &a) != 0)
        return -1;
    if (server) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0) {
            close(l);
            return -1;
        }
        struct pollfd pfd = {.fd = l, .events = POLLIN};
        int ms = (int)((deadline - drv_now()) * 1000);
        int fd = poll(&pfd, 1, ms > 0 ? ms : 0) == 1 ? accept(l, NULL, NULL) : -1;
        close(l);
        return fd;
    }
    while (drv_now() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        close(fd);
        usleep(50000);
    }
    return -1;
}

static inline int drv_io(int fd, void *buf, size_t len, int wr, double deadline)
{
    char *p = buf;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
        int ms = (int)((deadline - drv_now()) * 1000);
        int r = ms > 0 ? poll(&pfd, 1, ms) : 0;
        if (r < 0 && errno == EINTR)
            continue; /* a signal (SIGUSR1 of a timed run): not an error */
        if (r != 1)
            return -1;
        ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#endif
