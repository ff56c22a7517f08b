/* lg_nccl_driver: drives an ncclNet plugin the way NCCL's proxy does, between two processes
 * (two lab hosts), and checks every byte.
 *
 *   server: lg_nccl_driver --role server --mgmt 198.19.0.1:7000 [options]
 *   client: lg_nccl_driver --role client --mgmt 198.19.0.1:7000 [same options]
 *
 * dlopen the plugin, take the newest ncclNetPlugin_vN (or --version N), init, devices,
 * getProperties, listen on the receiving side, exchange the handles over the management TCP
 * connection, non-blocking connect/accept polling, regMr, then up to --depth (NCCL_STEPS = 8)
 * messages in flight per connection, a buffer reused only after its request completed, and
 * every received byte checked against a per-message pattern. Data flows client -> server
 * (--bidir: both ways). A JSON report goes to stdout; the exit status is 0 only for a clean
 * run. --corrupt flips one byte on the sender so a test can prove the check fails.
 *
 * --duration-s S: continuous traffic for S seconds (capped by --count), with completion gaps
 * per connection in CLOCK_MONOTONIC ns and a progress line on stderr (driver_stream.h). A wrong
 * message is also classified: duplicated, reordered (or lost), or never written. */
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "driver_net.h"
#include "grouped_shape.h"
#include "runtime/params.h" /* --list-params: the plugin's tunables (linked from liblinkguard.a) */
#include "driver_util.h"

#define DRV_MAX_CONNS 512
#define DRV_MAX_DEPTH 32
#define DRV_MAGIC 0x4c474456u
#define DRV_MAX_ERRORS 16
#define DRV_GROUPS 2 /* --grouped: groups in flight per connection (x 8 buffer slots) */
#define OPT_WARMUP 0x100 /* long options without a short letter */

struct drv_opts {
    const char *plugin, *mgmt;
    int version, server, dev, conns, depth, bidir, corrupt, close_inflight, optional, props;
    int no_verify; /* benchmark mode: no per-message fill/check (reported) */
    int eager_close; /* no barrier: close as soon as this side's own requests are done */
    int rounds;      /* connect, move, close this many times in one process (plugin kept) */
    int pingpong;  /* round trips through the plugin (driver_pingpong.h) */
    uint64_t warmup; /* --pingpong: round trips before the recorded ones */
    int grouped;   /* grouped receives (driver_grouped.h) */
    size_t size, recv_extra;
    uint64_t count, bytes;
    double timeout;
    /* driver_stream.h */
    double duration;    /* > 0: stream mode, seconds of traffic */
    double pace_us;     /* stream mode: a send comm's k-th post is due k * pace_us after the start */
    double gap_list_ms; /* list every gap at least this long (< 0: none) */
    int progress_ms;    /* progress line on stderr every N ms (0: none) */
    int idle_us;        /* stream mode: sleep this long after a pass without progress */
    const char *gap_file; /* stream mode: every gap >= gap_list_ms, one line each */
    double idle_s;      /* stream mode: >= 0: connections idle this long first (driver_idle.h) */
    int top_gaps;       /* how many of the largest gaps the report lists */
    uint64_t corrupt_at; /* --corrupt: the message index that gets a flipped byte */
    /* --corrupt-kind: 1 byte (flip one byte), 2 dup (send the previous message again),
     * 3 swap (exchange two messages), 4 drop (skip one message index) */
};

/* The part both sides must agree on, sent by the client and checked by the server. */
struct drv_config {
    uint32_t magic;
    int32_t conns, depth, bidir, close_inflight, reserved;
    uint64_t size, recv_extra, count;
    uint64_t warmup, pingpong;
};

struct drv_error {
    const char *call;
    int code, conn;
};

struct drv_comm {
    int send; /* 1: send comm, 0: recv comm */
    int conn, dir;
    void *comm, *mh;
    char *buf;
    size_t slot_bytes;
    void *req[DRV_MAX_DEPTH];
    int filled; /* the next slot holds a filled message that isend refused (back-pressure) */
    uint64_t posted, completed;
    uint64_t limit; /* post and complete up to this many (count; stream mode lowers it) */
    double t_first_c, t_last_c, max_gap_c; /* this comm's completions and largest gap */
};

static struct {
    struct drv_net net;
    struct drv_opts o;
    struct drv_pattern pat;
    struct drv_comm comms[2 * DRV_MAX_CONNS];
    int ncomms;
    struct drv_error errors[DRV_MAX_ERRORS];
    int nerrors;
    uint64_t corrupt, mismatched, bytes_sent, bytes_recv, completions;
    uint64_t duplicated, reordered, unwritten; /* kinds of corrupt messages */
    double t_start, t_last, max_gap;
    const char *failure; /* a driver-level failure (setup, timeout), not a plugin error */
    int rounds_ok; /* rounds whose comms connected and moved their share without an error */
} D;

static void record_error(const char *call, ncclResult_t rc, int conn)
{
    if (D.nerrors < DRV_MAX_ERRORS)
        D.errors[D.nerrors] = (struct drv_error){call, (int)rc, conn};
    D.nerrors++;
    fprintf(stderr, "lg_nccl_driver: %s returned %d (conn %d)\n", call, (int)rc, conn);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: lg_nccl_driver --role server|client --mgmt IP:PORT [--plugin PATH]\n"
            "  [--version 8..12] [--dev N] [--conns N] [--size BYTES] [--depth N<=32]\n"
            "  [--count N | --bytes TOTAL] [--bidir] [--recv-extra BYTES] [--optional]\n"
            "  [--timeout SEC] [--corrupt] [--close-inflight] [--props] [--verbose]\n"
            "  [--rounds N]     connect, move --count (--close-inflight: half of it), close, N\n"
            "                   times over in one process; reports rounds_ok\n"
            "  [--eager-close]  no barrier: close send, receive and listen comms as soon as\n"
            "                   this side's requests are done (a receiver that closes right\n"
            "                   after its last receive; the peer may still be completing)\n"
            "  [--no-verify]   (benchmarks only: skip the per-message fill and check)\n"
            "  [--pingpong [--warmup N]]  --count round trips of --size bytes each way, one\n"
            "                   at a time, after N unrecorded ones (default 100); the client\n"
            "                   reports rtt_us and reply_us (min/p50/p99 µs); payload checked\n"
            "                   unless --no-verify (plain TCP baseline: lg_tcp_pingpong)\n"
            "  [--list-params]  the plugin's environment variables (Markdown)\n"
            "  [--duration-s S]  continuous traffic for S seconds (--count: hard cap,\n"
            "                    default 100000000 per comm; SIGUSR1 ends it early);\n"
            "                    the peer needs it too\n"
            "  [--pace-us N]     stream mode: one post per send comm every N us (post k is\n"
            "                    due k * N us after the start; late ones go as the window\n"
            "                    allows)\n"
            "  [--idle-us N]     stream mode: sleep N us after a pass without progress\n"
            "                    instead of sched_yield (NCCL's proxy spins; on a few\n"
            "                    shared CPUs spinning drivers starve the daemon)\n"
            "  [--progress-ms N] a progress line on stderr every N ms\n"
            "  [--top-gaps N<=64] [--gap-list-ms T]  largest gaps / every gap >= T ms\n"
            "  [--idle-s S]      stream mode: connections set up and idle for up to S s\n"
            "                    before the traffic (SIGUSR2 ends it; stderr lines\n"
            "                    'connected t=..', 'traffic t=..')\n"
            "  [--gap-file PATH] stream mode: also write every gap >= T ms to PATH, one\n"
            "                    line each: comm start_ns end_ns open (no cap)\n"
            "  [--timestamps]    stamp the plugin's log lines with CLOCK_MONOTONIC seconds\n"
            "  [--corrupt-kind byte|dup|swap|drop]  what the sender breaks (implies\n"
            "                    --corrupt): a byte, a duplicate, a reorder, a lost message\n"
            "  [--grouped]       --count grouped receives of 1..8 buffers (sizes up to\n"
            "                    --size, mixed tags), sends out of buffer order; --pace-us:\n"
            "                    at most one group every N us\n");
    exit(2);
}

/* The plugin's tunables as a Markdown table (generated from params.def). */
static void list_params(void)
{
    static const char *const kinds[] = {"int", "size", "bool", "string"};
    printf("| variable | type | default | range | meaning |\n|---|---|---|---|---|\n");
    for (int i = 0; i < lg_param_count; i++) {
        const struct lg_param_info *p = &lg_param_table[i];
        char range[64] = "";
        if (p->kind == LG_PK_INT || p->kind == LG_PK_SIZE)
            snprintf(range, sizeof(range), "%lld..%lld", (long long)p->lo, (long long)p->hi);
        printf("| `%s` | %s | `%s` | %s | %s |\n", p->env, kinds[p->kind], p->def, range,
               p->doc);
    }
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"plugin", 1, 0, 'p'}, {"version", 1, 0, 'V'}, {"role", 1, 0, 'r'},
        {"mgmt", 1, 0, 'm'}, {"dev", 1, 0, 'd'}, {"conns", 1, 0, 'c'},
        {"size", 1, 0, 's'}, {"depth", 1, 0, 'D'}, {"count", 1, 0, 'n'},
        {"bytes", 1, 0, 'b'}, {"bidir", 0, 0, 'B'}, {"recv-extra", 1, 0, 'x'},
        {"timeout", 1, 0, 't'}, {"corrupt", 0, 0, 'C'}, {"close-inflight", 0, 0, 'I'},
        {"optional", 0, 0, 'O'}, {"props", 0, 0, 'P'}, {"verbose", 0, 0, 'v'},
        {"no-verify", 0, 0, 'N'}, {"list-params", 0, 0, 'L'}, {"pingpong", 0, 0, 'R'}, {"warmup", 1, 0, OPT_WARMUP},
        {"duration-s", 1, 0, 'S'}, {"pace-us", 1, 0, 'A'}, {"progress-ms", 1, 0, 'G'},
        {"top-gaps", 1, 0, 'K'}, {"gap-list-ms", 1, 0, 'M'}, {"timestamps", 0, 0, 'Z'},
        {"corrupt-kind", 1, 0, 'Y'}, {"eager-close", 0, 0, 'E'}, {"rounds", 1, 0, 'W'}, {"idle-us", 1, 0, 'U'}, {"gap-file", 1, 0, 'F'},
        {"grouped", 0, 0, 'g'}, {"idle-s", 1, 0, 'J'},
        {0, 0, 0, 0}};
    struct drv_opts *o = &D.o;
    *o = (struct drv_opts){.plugin = "libnccl-net-linkguard.so", .conns = 1, .depth = 8,
                           .size = 1 << 20, .count = 0, .timeout = 120, .server = -1,
                           .top_gaps = 10, .gap_list_ms = 5, .warmup = 100, .idle_s = -1};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p': o->plugin = optarg; break;
        case 'V': o->version = atoi(optarg); break;
        case 'r': o->server = !strcmp(optarg, "server") ? 1 : !strcmp(optarg, "client") ? 0 : -2; break;
        case 'm': o->mgmt = optarg; break;
        case 'd': o->dev = atoi(optarg); break;
        case 'c': o->conns = atoi(optarg); break;
        case 's': o->size = parse_size(optarg); break;
        case 'D': o->depth = atoi(optarg); break;
        case 'n': o->count = strtoull(optarg, NULL, 10); break;
        case 'b': o->bytes = parse_size(optarg); break;
        case 'B': o->bidir = 1; break;
        case 'x': o->recv_extra = parse_size(optarg); break;
        case 't': o->timeout = atof(optarg); break;
        case 'C': o->corrupt = o->corrupt ? o->corrupt : 1; break;
        case 'Y':
            o->corrupt = !strcmp(optarg, "byte") ? 1 : !strcmp(optarg, "dup") ? 2
                         : !strcmp(optarg, "swap") ? 3 : !strcmp(optarg, "drop") ? 4 : -1;
            if (o->corrupt < 0)
                usage();
            break;
        case 'I': o->close_inflight = 1; break;
        case 'E': o->eager_close = 1; break;
        case 'W': o->rounds = atoi(optarg); break;
        case 'O': o->optional = 1; break;
        case 'P': o->props = 1; break;
        case 'v': drv_log_level = NCCL_LOG_INFO; break;
        case 'N': o->no_verify = 1; break;
        case 'L': list_params(); exit(0);
        case 'R': o->pingpong = o->bidir = 1, o->conns = 1, o->depth = 2; break;
        case OPT_WARMUP: o->warmup = strtoull(optarg, NULL, 10); break;
        case 'S': o->duration = atof(optarg); break;
        case 'A': o->pace_us = atof(optarg); break;
        case 'G': o->progress_ms = atoi(optarg); break;
        case 'K': o->top_gaps = atoi(optarg); break;
        case 'M': o->gap_list_ms = atof(optarg); break;
        case 'Z': drv_log_times = 1; break;
        case 'U': o->idle_us = atoi(optarg); break;
        case 'F': o->gap_file = optarg; break;
        case 'g': o->grouped = 1; break;
        case 'J': o->idle_s = atof(optarg); break;
        default: usage();
        }
    }
    if (o->version && (o->version < 8 || o->version > 12))
        usage();
    if (o->props)
        return;
    if (o->server < 0 || !o->mgmt || o->conns < 1 || o->conns > DRV_MAX_CONNS || o->depth < 1 ||
        o->depth > DRV_MAX_DEPTH)
        usage();
    if (o->duration < 0 || o->pace_us < 0 || o->progress_ms < 0 || o->top_gaps < 0 ||
        o->idle_us < 0 || o->idle_us > 100000 ||
        o->top_gaps > 64 || (o->duration > 0 && (o->pingpong || o->close_inflight)) ||
        o->rounds < 0 || o->rounds > 1000 ||
        (o->idle_s >= 0 && (o->duration <= 0 || o->idle_s > 3600)) ||
        (o->rounds > 1 && (o->duration > 0 || o->pingpong || o->eager_close)) ||
        (o->grouped && (o->duration > 0 || o->pingpong || o->close_inflight || o->rounds > 1)))
        usage();
    if (o->grouped)
        o->depth = DRV_GROUPS * LG_GROUP_MAXN; /* buffer slots: whole groups in flight */
    if (o->pingpong && (o->conns != 1 || o->depth != 2 || o->warmup > 1000000))
        usage(); /* --conns / --depth after --pingpong */
    if (o->duration > 0 && !o->count && !o->bytes)
        o->count = 100000000; /* the hard cap of a timed run */
    if (!o->rounds)
        o->rounds = 1;
    if (!o->count)
        o->count = o->bytes ? (o->bytes / o->conns + (o->size ? o->size : 1) - 1) /
                                  (o->size ? o->size : 1)
                            : 64;
    o->corrupt_at = o->duration > 0 ? (o->count / 2 < 64 ? o->count / 2 : 64) : o->count / 2;
}

static void print_props(void)
{
    int n = 0;
    ncclResult_t rc = drv_devices(&D.net, &n);
    printf("{\"plugin\": \"%s\", \"version\": %d, \"devices_rc\": %d, \"devices\": [", D.net.name,
           D.net.version, (int)rc);
    for (int i = 0; i < n; i++) {
        ncclNetProperties_v12_t p;
        rc = drv_props(&D.net, i, &p);
        printf("%s{\"rc\": %d, \"name\": \"%s\", \"pciPath\": %s%s%s, \"guid\": %llu, "
               "\"ptrSupport\": %d, \"speed\": %d, \"maxComms\": %d, \"maxRecvs\": %d, "
               "\"netDeviceType\": %d, \"maxP2pBytes\": %llu, \"vdevs\": %d}",
               i ? ", " : "", (int)rc, p.name ? p.name : "", p.pciPath ? "\"" : "",
               p.pciPath ? p.pciPath : "null", p.pciPath ? "\"" : "",
               (unsigned long long)p.guid, p.ptrSupport, p.speed, p.maxComms, p.maxRecvs,
               (int)p.netDeviceType, (unsigned long long)p.maxP2pBytes, p.vProps.ndevs);
    }
    printf("]}\n");
}

/* Handle exchange and non-blocking connect/accept, like NCCL's proxy setup. */
static int setup(int mfd, double deadline)
{
    struct drv_opts *o = &D.o;
    int nconn = o->conns;
    /* Which directions this process receives: dir 0 = client->server, dir 1 = back. */
    int recv_dir = o->server ? 0 : 1, send_dir = o->server ? 1 : 0;
    int do_recv = o->server || o->bidir, do_send = !o->server || o->bidir;
    static char local[DRV_MAX_CONNS][NCCL_NET_HANDLE_MAXSIZE];
    static char remote[DRV_MAX_CONNS][NCCL_NET_HANDLE_MAXSIZE];
    static void *lcomm[DRV_MAX_CONNS];
    size_t hsz = (size_t)nconn * NCCL_NET_HANDLE_MAXSIZE;
    ncclResult_t rc;
    for (int c = 0; do_recv && c < nconn; c++)
        if ((rc = drv_listen(&D.net, o->dev, local[c], &lcomm[c])) != ncclSuccess) {
            record_error("listen", rc, c);
            return -1;
        }
    /* The server's handles go first, then (bidir) the client's. */
    for (int turn = 0; turn < 2; turn++) {
        int i_send = (turn == 0) == (o->server == 1);
        if (i_send && do_recv && drv_io(mfd, local, hsz, 1, deadline) != 0)
            return D.failure = "handle exchange (send)", -1;
        if (!i_send && do_send && drv_io(mfd, remote, hsz, 0, deadline) != 0)
            return D.failure = "handle exchange (recv)", -1;
    }
    struct drv_comm *sc = &D.comms[0], *rcm = &D.comms[do_send ? nconn : 0];
    D.ncomms = (do_send ? nconn : 0) + (do_recv ? nconn : 0);
    for (int c = 0; c < nconn; c++) {
        if (do_send)
            sc[c] = (struct drv_comm){.send = 1, .conn = c, .dir = send_dir};
        if (do_recv)
            rcm[c] = (struct drv_comm){.send = 0, .conn = c, .dir = recv_dir};
    }
    int pending = D.ncomms;
    while (pending) {
        if (drv_now() > deadline)
            return D.failure = "connect/accept timed out", -1;
        for (int c = 0; c < nconn; c++) {
            if (do_send && !sc[c].comm) {
                if ((rc = drv_connect(&D.net, o->dev, remote[c], &sc[c].comm)) != ncclSuccess) {
                    record_error("connect", rc, c);
                    return -1;
                }
                pending -= sc[c].comm != NULL;
            }
            if (do_recv && !rcm[c].comm) {
                if ((rc = drv_accept(&D.net, lcomm[c], &rcm[c].comm)) != ncclSuccess) {
                    record_error("accept", rc, c);
                    return -1;
                }
                pending -= rcm[c].comm != NULL;
            }
        }
        if (pending)
            usleep(200);
    }
    for (int c = 0; do_recv && c < nconn; c++)
        if ((rc = drv_close_listen(&D.net, lcomm[c])) != ncclSuccess)
            record_error("closeListen", rc, c);
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        m->slot_bytes = o->size + (m->send ? 0 : o->recv_extra);
        m->slot_bytes = (m->slot_bytes + 63) & ~(size_t)63;
        size_t total = m->slot_bytes * (size_t)o->depth;
        m->buf = aligned_alloc(4096, (total + 4095) & ~(size_t)4095);
        if (!m->buf)
            return D.failure = "out of memory", -1;
        /* One registration for all of a comm's slots, like NCCL's staging buffer. */
        if ((rc = drv_reg_mr(&D.net, m->comm, m->buf, total, &m->mh)) != ncclSuccess) {
            record_error("regMr", rc, m->conn);
            return -1;
        }
    }
    return 0;
}

static void gap_record(struct drv_comm *m, double now);
static uint64_t drv_send_index(const struct drv_comm *m);
static void drv_poison_slot(struct drv_comm *m, char *b);
static const char *drv_classify(struct drv_comm *m, const char *b, uint64_t msg);

static void completed(struct drv_comm *m, double now)
{
    gap_record(m, now);
    m->completed++;
    D.completions++;
    if (D.t_last > 0 && now - D.t_last > D.max_gap)
        D.max_gap = now - D.t_last;
    D.t_last = now;
}

/* One pass over a comm: post what the window allows, then complete in order. */
static int progress_comm(struct drv_comm *m)
{
    struct drv_opts *o = &D.o;
    int moved = 0;
    ncclResult_t rc;
    while (m->posted < m->limit && m->posted - m->completed < (uint64_t)o->depth) {
        int k = (int)(m->posted % (uint64_t)o->depth);
        char *b = m->buf + (size_t)k * m->slot_bytes;
        void *req = NULL;
        if (m->send) {
            if (!m->filled && !o->no_verify) {
                drv_fill(&D.pat, b, o->size, drv_key(m->conn, m->dir, drv_send_index(m)));
                if (o->corrupt == 1 && m->conn == 0 && m->posted == o->corrupt_at && o->size)
                    b[o->size / 2] ^= 0x5a;
                m->filled = 1;
            }
            rc = drv_isend(&D.net, m->comm, b, o->size, 0, m->mh, &req);
        } else {
            drv_poison_slot(m, b);
            rc = drv_irecv(&D.net, m->comm, b, m->slot_bytes, 0, m->mh, o->optional, &req);
        }
        if (rc != ncclSuccess) {
            record_error(m->send ? "isend" : "irecv", rc, m->conn);
            return -1;
        }
        if (!req)
            break; /* back-pressure: retry later, same buffer */
        m->req[k] = req;
        m->filled = 0;
        m->posted++;
        moved = 1;
    }
    while (m->completed < m->posted) {
        int k = (int)(m->completed % (uint64_t)o->depth);
        int done = 0, size = -1;
        if ((rc = drv_test(&D.net, m->req[k], &done, &size)) != ncclSuccess) {
            record_error("test", rc, m->conn);
            return -1;
        }
        if (!done)
            break;
        if (size != (int)o->size)
            D.mismatched++;
        if (m->send) {
            D.bytes_sent += o->size;
        } else {
            D.bytes_recv += (uint64_t)(size > 0 ? size : 0);
            char *b = m->buf + (size_t)k * m->slot_bytes;
            if (o->no_verify)
                goto next;
            long long bad = drv_verify(&D.pat, b, o->size, drv_key(m->conn, m->dir, m->completed));
            if (bad >= 0) {
                const char *kind = drv_classify(m, b, m->completed);
                if (D.corrupt < 5)
                    fprintf(stderr, "lg_nccl_driver: conn %d message %llu: wrong byte at %lld "
                            "(%s)\n", m->conn, (unsigned long long)m->completed, bad, kind);
                D.corrupt++;
            }
        }
    next:
        completed(m, drv_now());
        moved = 1;
    }
    return moved;
}

#include "driver_grouped.h"
#include "driver_pingpong.h"
#include "driver_stream.h"
#include "driver_idle.h"

static void run(double deadline)
{
    D.t_start = drv_now();
    uint64_t target = (uint64_t)D.ncomms * D.o.count;
    unsigned spins = 0;
    while (D.completions < target) {
        int moved = 0;
        for (int i = 0; i < D.ncomms; i++) {
            int r = progress_comm(&D.comms[i]);
            if (r < 0)
                return; /* NCCL treats any error as fatal for the communicator */
            moved |= r;
        }
        if (D.o.close_inflight && D.completions >= target / 2)
            return;
        if (!moved) {
            sched_yield(); /* NCCL's proxy yields when idle too */
            if ((++spins & 1023) == 0 && drv_now() > deadline) {
                D.failure = "timed out with messages missing";
                return;
            }
        }
    }
}

/* After run(): the round connected and moved its share (all of it; half with
 * --close-inflight) with no error recorded since `errors_before`. */
static int round_ok(int set, int errors_before)
{
    uint64_t target = (uint64_t)D.ncomms * D.o.count;
    uint64_t want = D.o.close_inflight ? target / 2 : target;
    return set == 0 && D.nerrors == errors_before && D.completions >= want && !D.failure;
}

static void teardown(void);
static int barrier(int mfd, double seconds);

/* --rounds: every round but the last (main runs that one): new comms, traffic, a barrier,
 * closes (with requests in flight under --close-inflight), as a job that aborts and
 * reconnects its communicators does. */
static void extra_rounds(int mfd, double deadline)
{
    for (int r = 1; r < D.o.rounds && !D.failure; r++) {
        int before = D.nerrors;
        D.completions = 0;
        int set = setup(mfd, deadline);
        for (int i = 0; i < D.ncomms; i++)
            D.comms[i].limit = D.o.count;
        if (set == 0)
            run(deadline);
        D.rounds_ok += round_ok(set, before);
        barrier(mfd, D.o.timeout);
        teardown();
        memset(D.comms, 0, sizeof(D.comms));
    }
    D.completions = 0;
}

static void teardown(void)
{
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        ncclResult_t rc;
        if (!m->comm)
            continue;
        if (m->mh && (rc = drv_dereg_mr(&D.net, m->comm, m->mh)) != ncclSuccess)
            record_error("deregMr", rc, m->conn);
        rc = m->send ? drv_close_send(&D.net, m->comm) : drv_close_recv(&D.net, m->comm);
        if (rc != ncclSuccess)
            record_error(m->send ? "closeSend" : "closeRecv", rc, m->conn);
        free(m->buf);
    }
}

static int barrier(int mfd, double seconds)
{
    char tok = 'D', ptok = 0;
    double bdl = drv_now() + seconds;
    if (drv_io(mfd, &tok, 1, 1, bdl) == 0 && drv_io(mfd, &ptok, 1, 0, bdl) == 0)
        return 0;
    if (!D.failure && !D.nerrors)
        D.failure = "peer vanished (management connection)";
    return -1;
}

static int report(int closes_ok)
{
    struct drv_opts *o = &D.o;
    uint64_t expected = o->duration > 0 ? stream_expected()
                        : (uint64_t)D.ncomms * (o->count + (o->pingpong ? o->warmup : 0));
    uint64_t missing = o->close_inflight || D.completions >= expected ? 0 : expected - D.completions;
    double secs = D.t_last > D.t_start ? D.t_last - D.t_start : 0;
    uint64_t moved = D.bytes_recv > D.bytes_sent ? D.bytes_recv : D.bytes_sent;
    int plugin_errors_ok = o->close_inflight ? closes_ok : D.nerrors == 0;
    int ok = !D.failure && plugin_errors_ok && !D.corrupt && !D.mismatched && !missing;
    ncclNetProperties_v12_t p = {0};
    if (D.net.table)
        drv_props(&D.net, o->dev, &p);
    printf("{\"role\": \"%s\", \"plugin\": \"%s\", \"version\": %d, \"device\": \"%s\", "
           "\"speed_mbps\": %d, \"conns\": %d, \"size\": %zu, \"depth\": %d, \"count\": %llu, "
           "\"bidir\": %s, \"bytes_sent\": %llu, \"bytes_received\": %llu, \"seconds\": %.6f, "
           "\"gbps\": %.3f, \"completions\": %llu, \"max_gap_ms\": %.3f, "
           "\"corrupt_messages\": %llu, \"size_mismatches\": %llu, \"missing_messages\": %llu, "
           "\"close_inflight\": %s, \"rounds\": %d, \"rounds_ok\": %d, \"verified\": %s, "
           "\"failure\": %s%s%s, \"errors\": [",
           o->server ? "server" : "client", D.net.name ? D.net.name : "", D.net.version,
           p.name ? p.name : "", p.speed, o->conns, o->size, o->depth,
           (unsigned long long)o->count, o->bidir ? "true" : "false",
           (unsigned long long)D.bytes_sent, (unsigned long long)D.bytes_recv, secs,
           secs > 0 ? (double)moved * 8 / secs / 1e9 : 0.0, (unsigned long long)D.completions,
           D.max_gap * 1e3, (unsigned long long)D.corrupt, (unsigned long long)D.mismatched,
           (unsigned long long)missing, o->close_inflight ? "true" : "false", o->rounds,
           D.rounds_ok, o->no_verify ? "false" : "true",
           D.failure ? "\"" : "", D.failure ? D.failure : "null", D.failure ? "\"" : "");
    for (int i = 0; i < D.nerrors && i < DRV_MAX_ERRORS; i++)
        printf("%s{\"call\": \"%s\", \"code\": %d, \"conn\": %d}", i ? ", " : "",
               D.errors[i].call, D.errors[i].code, D.errors[i].conn);
    printf("], ");
    stream_report_json();
    pingpong_report_json();
    printf("\"ok\": %s}\n", ok ? "true" : "false");
    fflush(stdout);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    if (getenv("NCCL_DEBUG") && !strcasecmp(getenv("NCCL_DEBUG"), "INFO"))
        drv_log_level = NCCL_LOG_INFO;
    char err[512];
    if (drv_net_open(&D.net, D.o.plugin, D.o.version, err, sizeof(err)) != 0) {
        fprintf(stderr, "lg_nccl_driver: %s\n", err);
        printf("{\"ok\": false, \"failure\": \"plugin not loaded\", \"errors\": []}\n");
        return 1;
    }
    ncclResult_t rc = drv_init(&D.net, 0x1234);
    if (rc != ncclSuccess) {
        record_error("init", rc, -1);
        D.failure = "init failed";
        printf("{\"ok\": false, \"failure\": \"init failed\", \"errors\": [{\"call\": \"init\", "
               "\"code\": %d, \"conn\": -1}]}\n", (int)rc);
        return 1;
    }
    if (D.o.props) {
        print_props();
        return drv_finalize(&D.net) == ncclSuccess ? 0 : 1;
    }
    int ndev = 0;
    if ((rc = drv_devices(&D.net, &ndev)) != ncclSuccess || D.o.dev >= ndev) {
        record_error("devices", rc, -1);
        D.failure = "no such device";
        return report(0);
    }
    double deadline = drv_now() + D.o.timeout;
    if (drv_pattern_init(&D.pat, D.o.size) != 0)
        return D.failure = "out of memory", report(0);
    int mfd = drv_mgmt_open(D.o.mgmt, D.o.server, deadline);
    if (mfd < 0) {
        D.failure = "management connection failed";
        return report(0);
    }
    struct drv_config mine, theirs;
    memset(&mine, 0, sizeof(mine)); /* padding is compared too */
    mine = (struct drv_config){DRV_MAGIC, D.o.conns, D.o.depth, D.o.bidir, D.o.close_inflight,
                               (D.o.duration > 0) | D.o.grouped << 1, D.o.size, D.o.recv_extra,
                               D.o.count, D.o.pingpong ? D.o.warmup : 0, (uint64_t)D.o.pingpong};
    if (D.o.server ? drv_io(mfd, &theirs, sizeof(theirs), 0, deadline)
                   : drv_io(mfd, &mine, sizeof(mine), 1, deadline)) {
        D.failure = "configuration exchange failed";
        return report(0);
    }
    if (D.o.server && memcmp(&mine, &theirs, sizeof(mine)) != 0) {
        D.failure = "client and server options differ";
        return report(0);
    }
    int closes_ok = 1;
    if (D.o.duration > 0) /* SIGUSR1 ends a timed run early, cleanly (driver_stream.h) */
        sigaction(SIGUSR1, &(struct sigaction){.sa_handler = drv_on_sigusr1,
                                                .sa_flags = SA_RESTART}, NULL);
    extra_rounds(mfd, deadline);
    int errors_before = D.nerrors;
    int set = setup(mfd, deadline);
    for (int i = 0; i < D.ncomms; i++)
        D.comms[i].limit = D.o.count;
    if (set == 0 && D.o.idle_s >= 0)
        drv_idle_phase(D.o.idle_s);
    if (set == 0)
        D.o.pingpong ? run_pingpong(deadline)
        : D.o.grouped ? run_grouped(deadline)
        : D.o.duration > 0 ? stream_run(mfd, deadline) : run(deadline);
    D.rounds_ok += round_ok(set, errors_before);
    /* Barrier: neither side closes while the other may still be completing (unless asked to
     * behave like a caller that does; the barrier then comes after the closes). */
    if (D.o.eager_close) {
        int before = D.nerrors;
        teardown();
        closes_ok = D.nerrors == before;
    }
    barrier(mfd, D.failure || D.nerrors ? 5 : D.o.timeout);
    if (D.o.eager_close) {
        close(mfd);
        if ((rc = drv_finalize(&D.net)) != ncclSuccess)
            record_error("finalize", rc, -1), closes_ok = 0;
        free(D.pat.base);
        return report(closes_ok);
    }
    int before = D.nerrors;
    if (D.o.duration > 0)
        stream_close_receives(mfd); /* then teardown() closes the send comms */
    close(mfd);
    teardown();
    closes_ok = D.nerrors == before;
    if ((rc = drv_finalize(&D.net)) != ncclSuccess)
        record_error("finalize", rc, -1), closes_ok = 0;
    free(D.pat.base);
    return report(closes_ok);
}
