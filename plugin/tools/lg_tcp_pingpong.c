/* lg_tcp_pingpong: the plain TCP baseline for lg_nccl_driver --pingpong, between the same two
 * addresses (a lab rail): one blocking TCP connection with TCP_NODELAY, no plugin.
 *
 *   server: lg_tcp_pingpong --role server --addr 198.18.1.2:7400 [options]
 *   client: lg_tcp_pingpong --role client --addr 198.18.1.2:7400 [same options]
 *
 * The client sends message i (--size bytes) and blocks until the server's reply i of the same
 * size has arrived; the server replies as soon as message i is whole. Like the driver's mode:
 * --warmup unrecorded round trips, then --count recorded ones; each message carries the
 * driver's pattern for its index and direction and is checked (the client outside its timed
 * window, the server after sending its reply); --corrupt flips a byte of the client's message
 * count/2 so a test can prove the check fails. Receives block in recv() (a sleeping reader
 * woken by the kernel, like netperf's TCP_RR); --spin polls a non-blocking socket instead,
 * yielding now and then, the way the driver polls test() (NCCL's proxy), to tell what spinning
 * itself costs on a machine with few CPUs. Every call is bounded by --timeout (the whole run's
 * deadline). One JSON report on stdout with rtt_us (driver_rtt.h); exit 0 only for a clean
 * run, 2 for bad arguments. */
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "driver_rtt.h"
#include "driver_util.h"

#define TCP_PP_MAX_SIZE (1u << 30)

static struct {
    const char *addr;
    int server, corrupt, no_verify, spin;
    uint64_t size, count, warmup;
    double timeout;
} O = {.server = -1, .size = 8, .count = 1000, .warmup = 100, .timeout = 60};

static struct rtt_series tcp_rtt;

static void usage(const char *why)
{
    fprintf(stderr, "lg_tcp_pingpong: %s\n"
            "usage: lg_tcp_pingpong --role server|client --addr IP:PORT [--size BYTES (8)]\n"
            "  [--count N (1000)] [--warmup N (100)] [--timeout SEC (60)] [--corrupt]\n"
            "  [--no-verify] [--spin]\n", why);
    exit(2);
}

/* A whole number with an optional K/M/G suffix, nothing after it. */
static uint64_t arg_size(const char *name, const char *s)
{
    char *e;
    strtoull(s, &e, 10);
    if (e == s || (*e && (strchr("kKmMgG", *e) == NULL || e[1])))
        usage(name);
    return parse_size(s);
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"role", 1, 0, 'r'}, {"addr", 1, 0, 'a'}, {"size", 1, 0, 's'}, {"count", 1, 0, 'n'},
        {"warmup", 1, 0, 'w'}, {"timeout", 1, 0, 't'}, {"corrupt", 0, 0, 'C'},
        {"no-verify", 0, 0, 'N'}, {"spin", 0, 0, 'S'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            O.server = !strcmp(optarg, "server") ? 1 : !strcmp(optarg, "client") ? 0 : -2;
            break;
        case 'a': O.addr = optarg; break;
        case 's': O.size = arg_size("--size must be a byte count (8, 64K, 1M)", optarg); break;
        case 'n': O.count = arg_size("--count must be a whole number", optarg); break;
        case 'w': O.warmup = arg_size("--warmup must be a whole number", optarg); break;
        case 't': O.timeout = atof(optarg); break;
        case 'C': O.corrupt = 1; break;
        case 'N': O.no_verify = 1; break;
        case 'S': O.spin = 1; break;
        default: usage("unknown option");
        }
    }
    struct sockaddr_in sa;
    const char *port = O.addr ? strrchr(O.addr, ':') : NULL;
    if (O.server < 0)
        usage("--role must be server or client");
    if (!port || drv_parse_addr(O.addr, &sa) != 0 || strspn(port + 1, "0123456789") !=
        strlen(port + 1) || atoi(port + 1) < 1 || atoi(port + 1) > 65535)
        usage("--addr must be IPv4:PORT (port 1..65535)");
    if (O.size < 1 || O.size > TCP_PP_MAX_SIZE)
        usage("--size must be 1 byte .. 1G");
    if (O.count < 1 || O.count > RTT_MAX_SAMPLES || O.warmup > 1000000)
        usage("--count must be 1..1048576 and --warmup at most 1000000");
    if (!(O.timeout > 0 && O.timeout <= 3600))
        usage("--timeout must be 0..3600 seconds");
}

/* The whole buffer, blocking (SO_RCVTIMEO/SO_SNDTIMEO end a stuck call); --spin: receives
 * poll, yielding every 256 empty polls and giving up at the deadline. */
static int xfer(int fd, char *p, size_t len, int wr, double deadline)
{
    unsigned empty = 0;
    while (len) {
        ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL)
                       : recv(fd, p, len, O.spin ? MSG_DONTWAIT : MSG_WAITALL);
        if (n < 0 && O.spin && !wr && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if ((++empty & 255) == 0) {
                sched_yield();
                if (drv_now() > deadline)
                    return -1;
            }
            continue;
        }
        if (n < 0 && errno == EINTR && drv_now() < deadline)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    double t_start = drv_now(), deadline = t_start + O.timeout;
    const char *failure = NULL;
    uint64_t corrupt = 0, done = 0, total = O.warmup + O.count;
    struct drv_pattern pat;
    char *out = calloc(1, O.size), *in = calloc(1, O.size);
    int fd = -1;
    if (!out || !in || drv_pattern_init(&pat, O.size) != 0) {
        failure = "out of memory";
        goto report;
    }
    fd = drv_mgmt_open(O.addr, O.server, deadline);
    if (fd < 0) {
        failure = O.server ? "no client connected" : "cannot connect";
        goto report;
    }
    int one = 1;
    struct timeval tv = {.tv_sec = (time_t)O.timeout, .tv_usec = 0};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    /* Direction 0: client -> server; 1: the replies. */
    int out_dir = O.server, in_dir = !O.server;
    tcp_rtt.warmup = O.warmup;
    for (uint64_t i = 0; i < total; i++) {
        if (drv_now() > deadline) {
            failure = "timed out";
            break;
        }
        if (!O.no_verify && (!O.server || i == 0))
            drv_fill(&pat, out, O.size, drv_key(0, out_dir, i));
        if (O.corrupt && !O.server && i == O.count / 2)
            out[O.size / 2] ^= 0x5a;
        double t0 = drv_now();
        if (O.server ? xfer(fd, in, O.size, 0, deadline) || xfer(fd, out, O.size, 1, deadline)
                     : xfer(fd, out, O.size, 1, deadline) || xfer(fd, in, O.size, 0, deadline)) {
            failure = "connection broke off";
            break;
        }
        if (!O.server && i >= O.warmup)
            rtt_add(&tcp_rtt, drv_now() - t0);
        done++;
        if (!O.no_verify) {
            long long bad = drv_verify(&pat, in, O.size, drv_key(0, in_dir, i));
            if (bad >= 0 && corrupt++ < 5)
                fprintf(stderr, "lg_tcp_pingpong: round trip %llu: wrong byte at %lld\n",
                        (unsigned long long)i, bad);
            if (O.server && i + 1 < total)
                drv_fill(&pat, out, O.size, drv_key(0, out_dir, i + 1));
        }
    }
report:;
    char rtt[256];
    rtt_json(&tcp_rtt, rtt, sizeof(rtt));
    int ok = !failure && !corrupt && done == total;
    printf("{\"tool\": \"tcp\", \"role\": \"%s\", \"address\": \"%s\", \"spin\": %s, \"size\": %llu, "
           "\"count\": %llu, \"warmup\": %llu, \"round_trips\": %llu, \"verified\": %s, "
           "\"corrupt_messages\": %llu, \"seconds\": %.6f, \"failure\": %s%s%s, "
           "\"rtt_us\": %s, \"ok\": %s}\n",
           O.server ? "server" : "client", O.addr, O.spin ? "true" : "false",
           (unsigned long long)O.size,
           (unsigned long long)O.count, (unsigned long long)O.warmup, (unsigned long long)done,
           O.no_verify ? "false" : "true", (unsigned long long)corrupt, drv_now() - t_start,
           failure ? "\"" : "", failure ? failure : "null", failure ? "\"" : "", rtt,
           ok ? "true" : "false");
    if (fd >= 0)
        close(fd);
    free(out);
    free(in);
    free(pat.base);
    return ok ? 0 : 1;
}
