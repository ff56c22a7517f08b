/* Fuzzes the send and receive paths of one connection (src/conn_*.c, failover.c, resync.c) with
 * a scripted peer that may lie: the plugin's real connection code, progress threads and monitor
 * on one side of loopback TCP pairs (tests/lg_test_peer.h), the harness writing and reading raw
 * wire bytes on the other, and calling isend/irecv/test as NCCL does.
 * Input: a configuration byte (bit 0: our side sends, else receives; bit 1: a backup path;
 * bit 2: two data streams; bits 3-4: the chunk size), then operations, one byte each plus its
 * arguments: post a request, test the outstanding ones, wait while draining, send a control
 * frame (ACK, RESYNC, HB, SWITCH, READY, BYE, INNER, STALLED, TAGS, GROUP or any type) with
 * epochs and counts near the
 * connection's own or arbitrary, send a chunk header (seq, cut, epoch, total near the posted
 * ones or arbitrary) with all, part or none of its payload, raw bytes on any socket, or
 * shutting a path's sockets down. At most MAX_OPS operations; the connection is closed at the
 * end.
 * Checks NCCL's buffer ownership rules: a buffer is freed the moment test() reports its request
 * done (and every other one after close), so ASan reports any later access by the plugin; a
 * send completes only after the peer acknowledged it (an ACK, RESYNC or closing BYE count
 * above its seq);
 * a receive of N bytes completes only after the peer wrote, whole, every chunk of those N bytes
 * as the sender cuts them (header and payload); a completed size never exceeds the posted one.
 * Receives may be grouped (1..3 buffers, tags 0 or 1, chunks tagged 0 or 1): each buffer of a
 * completed group holds exactly one message (of any group: tags bind across groups), one that
 * carried its tag (when it carried one).
 * Needs no daemon (LINKGUARD_SHM points nowhere) and opens sockets on 127.0.0.1 only.
 * FUZZ_CONN_TRACE=1 prints each operation and completion (to read a crash input). Threads and
 * timing make a crash input racy to replay: run it a few times (-runs=50 FILE). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "lg_test_pair.h"
#include "lg_test_peer.h"
#include "linkguard_shm.h"

#define MAX_OPS 48
#define MAX_REQS 8
#define MAX_MSGS 256 /* messages whose chunks are tracked */
#define MAX_CHUNKS 16 /* chunks per message at most */
#define MAX_TOTALS 4  /* message sizes tracked per message */
#define MAX_GROUP 3   /* buffers of a grouped receive (tags 0 and 1) */

/* The input, read field by field; exhausted input reads as zeros. */
struct input {
    const uint8_t *p;
    size_t n;
};

static uint8_t in_u8(struct input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t in_bytes(struct input *in, int k)
{
    uint64_t v = 0;
    for (int i = 0; i < k; i++)
        v |= (uint64_t)in_u8(in) << (8 * i);
    return v;
}

struct req {
    void *r;
    int n;                   /* receive: buffers, one message each (seq .. seq + n - 1) */
    char *bufs[MAX_GROUP];   /* each its own allocation: ASan sees a write past one */
    size_t sizes[MAX_GROUP];
    int tags[MAX_GROUP];
    uint64_t seq;
    int failed;
};

static int trace;
#define TRACE(...) (trace ? fprintf(stderr, "fuzz_conn: " __VA_ARGS__) : 0)

static struct {
    struct lg_peer pe;
    int send;
    uint32_t chunk;
    struct req reqs[MAX_REQS];
    int nreqs;
    uint64_t posted;
    uint64_t acked_by_peer; /* the highest ACK, RESYNC or BYE(CLOSE) count the peer sent */
    /* The peer's bytes left the model (raw bytes, a frame or chunk written in part, more
     * written after a partial payload), on a control channel (acks) or a data stream
     * (chunks): completions are then judged by ASan alone. */
    int acks_unjudged, chunks_unjudged;
    int partial[LG_NPATHS][LG_MAX_STREAMS]; /* a chunk's payload was cut short there */
    uint32_t switch_epoch;  /* the last SWITCH our sender proposed, RESYNC our receiver sent */
    int switch_target;
    /* Receive side: for message s and each total the peer's chunks of it gave (a lying peer
     * may give several), which chunks it wrote whole. */
    struct {
        uint64_t total;
        uint32_t whole;
    } seen[MAX_MSGS][MAX_TOTALS];
    int nseen[MAX_MSGS];
    uint8_t tags_written[MAX_MSGS]; /* bit t: the peer wrote a whole chunk of it with tag t */
} st;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    trace = getenv("FUZZ_CONN_TRACE") != NULL;
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard-fuzz", 1); /* no daemon */
    setenv("LINKGUARD_HEARTBEAT_MS", "20", 1);
    /* The scripted peer is often quiet: no failover for silence within one input. */
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "60000", 1);
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", "60000", 1);
    setenv("LINKGUARD_REJOIN_MS", "3600000", 1);
    /* The oracle: a send completes only on the peer's ack. Kept sends (which complete at once,
     * and whose close waits for an ack this peer may never send) are tests/test_kept_send.c's. */
    setenv("LINKGUARD_SEND_COPY", "0", 1);
    loopback_devices("lgf0", "lgf1");
    FUZZ_ASSERT(lg_core_init(LG_FLAVOR_LINKGUARD, fuzz_silent_logger) == ncclSuccess);
    return 0;
}

/* Non-blocking: a peer write never waits for our side (which may have stopped reading).
 * Returns the bytes written. */
static size_t peer_try_write(int fd, const void *buf, size_t len)
{
    const char *b = buf;
    size_t done = 0;
    for (int tries = 0; done < len && tries < 20; tries++) {
        ssize_t n = send(fd, b + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        poll(&pfd, 1, 1);
    }
    return done;
}

/* Reads whatever our side wrote: data is thrown away, control frames are noted. */
static void drain(void)
{
    static char sink[1 << 16];
    struct lg_peer *pe = &st.pe;
    for (int i = 0; i < pe->npaths; i++) {
        for (int k = 0; k < pe->nstreams; k++)
            while (recv(pe->data[i][k], sink, sizeof(sink), MSG_DONTWAIT) > 0)
                ;
        for (;;) {
            ssize_t n = recv(pe->ctrl[i], pe->crx[i] + pe->crx_got[i],
                             LG_CTRL_SIZE - pe->crx_got[i], MSG_DONTWAIT);
            if (n <= 0)
                break;
            pe->crx_got[i] += (size_t)n;
            if (pe->crx_got[i] < LG_CTRL_SIZE)
                continue;
            pe->crx_got[i] = 0;
            struct lg_ctrl f;
            if (lg_ctrl_decode(pe->crx[i], &f) != 0)
                continue;
            TRACE("ours on path %d: type %u flags %#x epoch %u value %llu\n", i, f.type,
                  f.flags, f.epoch, (unsigned long long)f.value);
            if (f.type == LG_CTRL_SWITCH || f.type == LG_CTRL_RESYNC) {
                st.switch_epoch = f.epoch;
                st.switch_target = f.type == LG_CTRL_SWITCH ? (int)f.value : f.flags;
            }
        }
    }
}

/* Every chunk of `size` bytes of message m came whole from the peer, with that total. */
static void check_placed(uint64_t m, int size)
{
    if (st.chunks_unjudged)
        return;
    FUZZ_ASSERT(m < MAX_MSGS);
    uint64_t need = lg_chunk_count((uint64_t)size, st.chunk);
    FUZZ_ASSERT(need <= MAX_CHUNKS);
    uint32_t whole = 0;
    for (int i = 0; i < st.nseen[m]; i++)
        if (st.seen[m][i].total == (uint64_t)size)
            whole = st.seen[m][i].whole;
    for (uint64_t k = 0; k < need; k++)
        FUZZ_ASSERT(whole & (1u << k));
}

static void check_done(const struct req *q, const int *sizes)
{
    if (st.send) {
        FUZZ_ASSERT(sizes[0] >= 0 && (size_t)sizes[0] == q->sizes[0]);
        if (st.acks_unjudged)
            return;
        FUZZ_ASSERT(q->seq < st.acked_by_peer); /* never completed without the peer's ack */
        return;
    }
    /* Which message filled each buffer: the plugin's binding, read once the group is done.
     * Tags bind across groups (conn.h, "Grouped receives"), so any message in the window may
     * have filled this group's buffers; one whose slot a later post took is gone from view. */
    int used = 0, found = 0;
    uint64_t lo = st.posted > LG_WINDOW ? st.posted - LG_WINDOW : 0;
    for (uint64_t m = lo; m < st.posted; m++) {
        const struct lg_req *r = &st.pe.c->reqs[m % LG_WINDOW];
        int b = __atomic_load_n(&r->g_sub, __ATOMIC_ACQUIRE);
        if (r->seq != m || b < 0 || r->b_head != q->seq)
            continue;
        FUZZ_ASSERT(b < q->n && !(used & (1 << b))); /* one message per buffer */
        used |= 1 << b;
        found++;
        FUZZ_ASSERT(sizes[b] >= 0 && (size_t)sizes[b] <= q->sizes[b]);
        uint8_t t = m < MAX_MSGS ? st.tags_written[m] : 0;
        if (q->n > 1 && !st.chunks_unjudged && (t == 1 || t == 2))
            FUZZ_ASSERT(t == 1u << q->tags[b]);
        check_placed(m, sizes[b]);
    }
    FUZZ_ASSERT(found == q->n || st.posted > LG_WINDOW); /* every buffer holds a message */
}

/* test() on every outstanding request, as NCCL polls; a done one's buffer is freed at once. */
static void test_all(void)
{
    for (int i = 0; i < st.nreqs;) {
        struct req *q = &st.reqs[i];
        int done = 0, sizes[MAX_GROUP + 1] = {-1, -1, -1, -1};
        if (!q->failed && lg_core_test(q->r, &done, sizes) != ncclSuccess) {
            q->failed = 1; /* NCCL aborts; the buffer stays its own until close */
            TRACE("message %llu failed\n", (unsigned long long)q->seq);
        }
        if (!done) {
            i++;
            continue;
        }
        TRACE("message %llu done, %d bytes\n", (unsigned long long)q->seq, sizes[0]);
        FUZZ_ASSERT(sizes[q->n] == -1); /* nothing written past the group */
        check_done(q, sizes);
        for (int b = 0; b < q->n; b++)
            free(q->bufs[b]);
        st.reqs[i] = st.reqs[--st.nreqs];
    }
}

static void op_post(struct input *in)
{
    uint8_t g = st.send ? 0 : in_u8(in);
    struct req q = {.n = 1 + (g & 3) % MAX_GROUP, .seq = st.posted};
    if (st.nreqs == MAX_REQS || st.posted + (uint64_t)q.n > MAX_MSGS)
        return;
    for (int b = 0; b < q.n; b++) {
        q.sizes[b] = (size_t)(in_bytes(in, 2) % (MAX_CHUNKS * (uint64_t)st.chunk + 1));
        q.bufs[b] = malloc(q.sizes[b] ? q.sizes[b] : 1);
        memset(q.bufs[b], (int)st.posted, q.sizes[b]);
        q.tags[b] = (g >> (2 + b)) & 1;
    }
    ncclResult_t rc;
    if (st.send)
        rc = lg_core_isend(st.pe.c, q.bufs[0], q.sizes[0], 0, NULL, &q.r);
    else
        rc = lg_core_irecv(st.pe.c, q.n, (void **)q.bufs, q.sizes, q.tags, NULL, &q.r);
    if (rc != ncclSuccess || !q.r) {
        for (int b = 0; b < q.n; b++) /* refused (a failed connection) or back-pressure */
            free(q.bufs[b]);
        return;
    }
    TRACE("post %s of %d (%zu bytes first): message %llu\n", st.send ? "send" : "recv", q.n,
          q.sizes[0], (unsigned long long)st.posted);
    st.posted += (uint64_t)q.n;
    st.reqs[st.nreqs++] = q;
}

/* A count near the connection's: acked, posted, in between, beyond, or any. */
static uint64_t pick_count(struct input *in)
{
    uint8_t sel = in_u8(in);
    uint64_t acked = __atomic_load_n(&st.pe.c->acked, __ATOMIC_ACQUIRE);
    switch (sel % 6) {
    case 0: return st.posted;
    case 1: return acked + 1;
    case 2: return acked;
    case 3: return st.posted + 1 + sel / 6;
    case 4: return acked > 0 ? acked - 1 : 0;
    default: return in_bytes(in, 8);
    }
}

/* An epoch near the connection's committed one or the last switch, or any. */
static uint32_t pick_epoch(struct input *in)
{
    uint8_t sel = in_u8(in);
    uint32_t e = __atomic_load_n(&st.pe.c->epoch, __ATOMIC_ACQUIRE);
    switch (sel % 6) {
    case 0: return st.switch_epoch;
    case 1: return e + 1;
    case 2: return e;
    case 3: return e + (1u << 15) + sel / 6;
    case 4: return UINT32_MAX;
    default: return (uint32_t)in_bytes(in, 4);
    }
}

static void op_frame(struct input *in)
{
    static const uint8_t types[] = {LG_CTRL_ACK, LG_CTRL_RESYNC, LG_CTRL_HB, LG_CTRL_SWITCH,
                                    LG_CTRL_READY, LG_CTRL_BYE, LG_CTRL_INNER,
                                    LG_CTRL_STALLED, LG_CTRL_TAGS, LG_CTRL_GROUP,
                                    LG_CTRL_GROUPED, 0};
    uint8_t a = in_u8(in);
    int path = (a & 1) % st.pe.npaths;
    struct lg_ctrl f = {.type = types[(a >> 1) % sizeof(types)]};
    if (!f.type)
        f.type = in_u8(in);
    f.flags = in_u8(in);
    if (f.type == LG_CTRL_RESYNC && a & 0x80)
        f.flags = (uint8_t)st.switch_target; /* the path the switch named */
    f.epoch = pick_epoch(in);
    f.value = f.type == LG_CTRL_SWITCH && a & 0x80 ? (uint64_t)(path) : pick_count(in);
    TRACE("frame path %d type %u flags %#x epoch %u value %llu\n", path, f.type, f.flags,
          f.epoch, (unsigned long long)f.value);
    /* Mostly the path's channel; now and then the session's own or one nobody has. */
    uint8_t ch = in_u8(in);
    f.chan = ch < 224 ? LG_PEER_CHAN : ch < 240 ? 0 : ch;
    if (f.chan != LG_PEER_CHAN)
        st.acks_unjudged = 1;
    uint8_t b[LG_CTRL_SIZE];
    lg_ctrl_encode(b, &f);
    if (f.type == 0 || f.type >= LG_CTRL_TYPE_MAX)
        b[0] = f.type; /* lg_ctrl_encode writes what it is given; keep it so */
    if (peer_try_write(st.pe.ctrl[path], b, sizeof(b)) != sizeof(b))
        st.acks_unjudged = 1;
    else if ((f.type == LG_CTRL_ACK || f.type == LG_CTRL_RESYNC ||
              (f.type == LG_CTRL_BYE && f.flags == LG_BYE_CLOSE)) && f.value > st.acked_by_peer)
        st.acked_by_peer = f.value; /* a closing receiver's BYE carries its placed count */
}

static void op_chunk(struct input *in)
{
    uint8_t a = in_u8(in);
    int path = (a & 1) % st.pe.npaths;
    int stream = ((a >> 1) & 1) % st.pe.nstreams;
    uint64_t base = st.posted > MAX_REQS ? st.posted - MAX_REQS : 0;
    uint8_t s = in_u8(in);
    struct lg_chunk_hdr h;
    h.seq = s < 0xf0 ? base + s % (MAX_REQS + 2) : in_bytes(in, 8);
    /* The total: a posted request's size, or a small one, or any. */
    uint8_t t = in_u8(in);
    h.total = (a & 4) ? in_bytes(in, 2) % (MAX_CHUNKS * (uint64_t)st.chunk + 1) : 0;
    for (int i = 0; i < st.nreqs && !(a & 4); i++)
        if (st.reqs[i].seq <= h.seq && h.seq < st.reqs[i].seq + (uint64_t)st.reqs[i].n)
            h.total = st.reqs[i].sizes[h.seq - st.reqs[i].seq]; /* a guess for a group */
    if (t == 0xff)
        h.total = in_bytes(in, 8);
    /* The cut: chunk k as the sender cuts it, or any offset and length. */
    uint64_t k = t % MAX_CHUNKS;
    h.offset = k * st.chunk;
    uint64_t rest = h.total > h.offset ? h.total - h.offset : 0;
    h.len = (uint32_t)(rest < st.chunk ? rest : st.chunk);
    if (a & 8) {
        h.offset = in_bytes(in, 2);
        h.len = (uint32_t)in_bytes(in, 2);
    }
    h.epoch = (uint16_t)((a & 16) ? in_bytes(in, 2) : __atomic_load_n(&st.pe.c->epoch, __ATOMIC_ACQUIRE));
    h.tag = (a & 64) ? 1 : 0;
    TRACE("chunk path %d stream %d seq %llu offset %llu len %u total %llu epoch %u\n", path,
          stream, (unsigned long long)h.seq, (unsigned long long)h.offset, h.len,
          (unsigned long long)h.total, h.epoch);
    uint8_t hb[LG_CHUNK_HDR_SIZE];
    lg_chunk_encode(hb, &h);
    int fd = st.pe.data[path][stream];
    if (st.partial[path][stream])
        st.chunks_unjudged = 1; /* this header completes the chunk cut short before */
    if (peer_try_write(fd, hb, sizeof(hb)) != sizeof(hb)) {
        st.chunks_unjudged = 1;
        return;
    }
    /* All of the payload, or part of it (a stream left inside a chunk). */
    size_t len = h.len;
    if (a & 32)
        len = len ? in_u8(in) % len : 0;
    static char payload[MAX_CHUNKS * 4096];
    size_t sent = len <= sizeof(payload) ? peer_try_write(fd, payload, len) : 0;
    st.partial[path][stream] = sent != h.len;
    k = lg_chunk_index(&h, st.chunk); /* which chunk it is, if cut as the sender cuts */
    if (sent != h.len || h.seq >= MAX_MSGS || k >= MAX_CHUNKS)
        return;
    int i = 0;
    while (i < st.nseen[h.seq] && st.seen[h.seq][i].total != h.total)
        i++;
    if (i == MAX_TOTALS) {
        st.chunks_unjudged = 1;
        return;
    }
    if (i == st.nseen[h.seq])
        st.seen[h.seq][st.nseen[h.seq]++].total = h.total;
    st.seen[h.seq][i].whole |= 1u << k;
    st.tags_written[h.seq] |= (uint8_t)(1u << h.tag);
}

static void op_raw(struct input *in)
{
    uint8_t a = in_u8(in);
    int path = (a & 1) % st.pe.npaths;
    int stream = (a >> 1) % (st.pe.nstreams + 1);
    size_t len = in_u8(in) % 64;
    uint8_t b[64];
    for (size_t i = 0; i < len; i++)
        b[i] = in_u8(in);
    int fd = stream == 0 ? st.pe.ctrl[path] : st.pe.data[path][stream - 1];
    if (len) {
        peer_try_write(fd, b, len);
        *(stream == 0 ? &st.acks_unjudged : &st.chunks_unjudged) = 1;
    }
}

static void op_wait(struct input *in)
{
    int rounds = 1 + in_u8(in) % 20;
    for (int i = 0; i < rounds; i++) {
        drain();
        test_all();
        usleep(250);
    }
}

static void op_shutdown(struct input *in)
{
    int path = in_u8(in) % st.pe.npaths;
    TRACE("shutdown path %d\n", path);
    shutdown(st.pe.ctrl[path], SHUT_RDWR);
    for (int k = 0; k < st.pe.nstreams; k++)
        shutdown(st.pe.data[path][k], SHUT_RDWR);
}

/* Our side closes first, as NCCL does; then the peer's ends reset (SO_LINGER 0), which also
 * clears our side's closing sockets: no socket waits in TIME_WAIT, which at thousands of
 * connections a minute would use up the loopback ports. */
static void close_all(void)
{
    struct lg_conn *c = st.pe.c;
    FUZZ_ASSERT((c->kind == LG_CONN_SEND ? lg_core_close_send(c) : lg_core_close_recv(c)) ==
                ncclSuccess);
    st.pe.c = NULL;
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    for (int i = 0; i < st.pe.npaths; i++) {
        setsockopt(st.pe.ctrl[i], SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        for (int k = 0; k < st.pe.nstreams; k++)
            setsockopt(st.pe.data[i][k], SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    }
    peer_close(&st.pe); /* closes the peer's ends */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t chunks[] = {64, 100, 512, 4096};
    struct input in = {data, size};
    uint8_t cfg = in_u8(&in);
    memset(&st, 0, sizeof(st));
    st.send = cfg & 1;
    st.chunk = chunks[(cfg >> 3) & 3];
    /* Fails only without fds or ports: the plugin leaked them in an earlier input. */
    if (peer_open(&st.pe, st.send ? LG_CONN_SEND : LG_CONN_RECV, 1 + ((cfg >> 1) & 1),
                  1 + ((cfg >> 2) & 1), st.chunk) != 0) {
        fprintf(stderr, "fuzz_conn: cannot set up a connection: %s\n", strerror(errno));
        abort();
    }
    for (int ops = 0; ops < MAX_OPS && in.n; ops++) {
        switch (in_u8(&in) % 8) {
        case 0: op_post(&in); break;
        case 1: test_all(); break;
        case 2: op_wait(&in); break;
        case 3: op_frame(&in); break;
        case 4: op_chunk(&in); break;
        case 5: op_raw(&in); break;
        case 6: op_shutdown(&in); break;
        default: drain(); break;
        }
    }
    drain();
    test_all();
    close_all();
    /* NCCL frees what is left only after close; nothing may touch it from then on. */
    for (int i = 0; i < st.nreqs; i++)
        for (int b = 0; b < st.reqs[i].n; b++)
            free(st.reqs[i].bufs[b]);
    return 0;
}
