/* Framing: hello, control frames and chunk headers round-trip and reject garbage; chunking
 * of messages; the sequence window behind cumulative acks. */
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "session/wire.h"
#include "transport/transport.h"

static void test_hello(void)
{
    struct lg_hello h = {.path = 1, .stream = 3, .nstreams = 4, .paths_mask = 3,
                         .transport = LG_TRANSPORT_TCP, .blob = 524288,
                         .listen_id = 0x1122334455667788ull,
                         .conn_nonce = 0x99aabbccddeeff00ull, .session = 0x0102030405060708ull,
                         .chan = 0xa0b0c0d0u}, d;
    uint8_t buf[LG_HELLO_SIZE];
    lg_hello_encode(buf, &h);
    CHECK_EQ(lg_hello_decode(buf, &d), 0);
    CHECK_EQ(d.path, 1);
    CHECK_EQ(d.stream, 3);
    CHECK_EQ(d.nstreams, 4);
    CHECK_EQ(d.paths_mask, 3);
    CHECK_EQ(d.transport, LG_TRANSPORT_TCP);
    CHECK_EQ(d.blob, 524288);
    CHECK(d.listen_id == h.listen_id && d.conn_nonce == h.conn_nonce);
    CHECK(d.flags == 0 && d.gen == 0);
    CHECK(d.session == h.session && d.chan == h.chan);
    /* A rebuild's hello: the flag and the generation. */
    struct lg_hello rj = h, drj;
    rj.flags = LG_HELLO_F_REJOIN;
    rj.gen = 77;
    lg_hello_encode(buf, &rj);
    CHECK_EQ(lg_hello_decode(buf, &drj), 0);
    CHECK(drj.flags == LG_HELLO_F_REJOIN && drj.gen == 77);
    buf[10] = 0x80; /* an unknown flag */
    CHECK(lg_hello_decode(buf, &drj) != 0);
    lg_hello_encode(buf, &h);
    /* Little-endian on the wire whatever the host. */
    CHECK_EQ(buf[0], 0x4c);
    CHECK_EQ(buf[16], 0x88);
    uint8_t bad[LG_HELLO_SIZE];
    memcpy(bad, buf, sizeof(bad));
    bad[0] ^= 1; /* magic */
    CHECK(lg_hello_decode(bad, &d) != 0);
    memcpy(bad, buf, sizeof(bad));
    bad[4] = LG_WIRE_VERSION + 1; /* version */
    CHECK(lg_hello_decode(bad, &d) != 0);
    /* A session's hello: its id and nothing else. */
    struct lg_hello sh = {.flags = LG_HELLO_F_SESSION, .conn_nonce = 42}, dsh;
    lg_hello_encode(buf, &sh);
    CHECK_EQ(lg_hello_decode(buf, &dsh), 0);
    CHECK(dsh.flags == LG_HELLO_F_SESSION && dsh.conn_nonce == 42);
    struct lg_hello cases[] = {
        {.path = 2, .stream = 1, .nstreams = 1, .paths_mask = 1, .transport = 1, .chan = 1},
        {.path = 0, .stream = 2, .nstreams = 1, .paths_mask = 1, .transport = 1, .chan = 1},
        {.path = 0, .stream = 0, .nstreams = 1, .paths_mask = 1, .transport = 1, .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 0, .paths_mask = 1, .transport = 1, .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 17, .paths_mask = 1, .transport = 1, .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 2, .transport = 1, .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 5, .transport = 1, .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 1, .chan = 1}, /* no transport */
        /* version 6's wrap-mode flag: a transport id says it now */
        {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 1, .transport = 1, .flags = 0x2,
         .chan = 1},
        {.path = 0, .stream = 1, .nstreams = 1, .paths_mask = 1, .transport = 1}, /* no chan */
        /* a session hello with anything but its id */
        {.flags = LG_HELLO_F_SESSION, .stream = 1},
        {.flags = LG_HELLO_F_SESSION, .chan = 3},
        {.flags = LG_HELLO_F_SESSION, .transport = LG_TRANSPORT_TCP},
        {.flags = LG_HELLO_F_SESSION, .blob = 1},
        {.flags = LG_HELLO_F_SESSION | LG_HELLO_F_REJOIN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        lg_hello_encode(buf, &cases[i]);
        CHECK(lg_hello_decode(buf, &d) != 0);
    }
    /* Random garbage never decodes (and never crashes). */
    srand(1);
    int accepted = 0;
    for (int i = 0; i < 100000; i++) {
        for (int k = 0; k < LG_HELLO_SIZE; k++)
            buf[k] = (uint8_t)rand();
        accepted += lg_hello_decode(buf, &d) == 0;
    }
    CHECK_EQ(accepted, 0);
}

static void test_ctrl(void)
{
    struct lg_ctrl c = {.type = LG_CTRL_ACK, .epoch = 7, .value = 1ull << 40, .chan = 0xfeed1234u}, d;
    uint8_t buf[LG_CTRL_SIZE];
    lg_ctrl_encode(buf, &c);
    CHECK_EQ(lg_ctrl_decode(buf, &d), 0);
    CHECK_EQ(d.type, LG_CTRL_ACK);
    CHECK_EQ(d.epoch, 7);
    CHECK(d.value == 1ull << 40);
    CHECK(d.chan == 0xfeed1234u);
    buf[0] = 0;
    CHECK(lg_ctrl_decode(buf, &d) != 0);
    buf[0] = LG_CTRL_TYPE_MAX;
    CHECK(lg_ctrl_decode(buf, &d) != 0);
    struct lg_ctrl s = {.type = LG_CTRL_STALLED, .value = 41}; /* wire version 4 */
    lg_ctrl_encode(buf, &s);
    CHECK_EQ(lg_ctrl_decode(buf, &d), 0);
    CHECK(d.type == LG_CTRL_STALLED && d.value == 41);
    s = (struct lg_ctrl){.type = LG_CTRL_KEEPS, .value = 16384}; /* version 5 */
    lg_ctrl_encode(buf, &s);
    CHECK_EQ(lg_ctrl_decode(buf, &d), 0);
    CHECK(d.type == LG_CTRL_KEEPS && d.value == 16384);
    s = (struct lg_ctrl){.type = LG_CTRL_GROUPED, .value = 16384}; /* the newest (version 8) */
    lg_ctrl_encode(buf, &s);
    CHECK_EQ(lg_ctrl_decode(buf, &d), 0);
    CHECK(d.type == LG_CTRL_GROUPED && d.value == 16384);
    lg_ctrl_encode(buf, &c);
    buf[2] = 1; /* reserved must be zero */
    CHECK(lg_ctrl_decode(buf, &d) != 0);
    lg_ctrl_encode(buf, &c);
    buf[21] = 1; /* ... both reserved fields */
    CHECK(lg_ctrl_decode(buf, &d) != 0);
    /* The failover frames: every field round-trips. */
    struct lg_ctrl f[] = {
        {.type = LG_CTRL_HB, .flags = (uint8_t)(LG_HB_NIC_DOWN | LG_HB_PATH_FAILED(1)),
         .epoch = 5, .value = 3ull << 32 | 1},
        {.type = LG_CTRL_SWITCH, .epoch = 0xfffffffeu, .value = 1},
        {.type = LG_CTRL_RESYNC, .flags = 1, .epoch = 9, .value = 123456789},
        {.type = LG_CTRL_READY, .value = 4},
        {.type = LG_CTRL_BYE, .flags = LG_BYE_FENCE},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        lg_ctrl_encode(buf, &f[i]);
        CHECK_EQ(lg_ctrl_decode(buf, &d), 0);
        CHECK(d.type == f[i].type && d.flags == f[i].flags && d.epoch == f[i].epoch &&
              d.value == f[i].value);
    }
    CHECK_EQ(LG_HB_NIC(LG_HB_NIC_LEAVE << 2 | LG_HB_NIC_DOWN, 0), LG_HB_NIC_DOWN);
    CHECK_EQ(LG_HB_NIC(LG_HB_NIC_LEAVE << 2 | LG_HB_NIC_DOWN, 1), LG_HB_NIC_LEAVE);
}

static void test_chunk(void)
{
    struct lg_chunk_hdr h = {.epoch = 3, .len = 1000, .seq = 42, .offset = 2000, .total = 3000,
                             .tag = 9}, d;
    uint8_t buf[LG_CHUNK_HDR_SIZE];
    lg_chunk_encode(buf, &h);
    CHECK_EQ(lg_chunk_decode(buf, 4096, &d), 0);
    CHECK(d.seq == 42 && d.offset == 2000 && d.total == 3000 && d.len == 1000 && d.tag == 9);
    CHECK(lg_chunk_decode(buf, 999, &d) != 0); /* longer than the negotiated chunk */
    h.offset = 2001; /* runs past the end */
    lg_chunk_encode(buf, &h);
    CHECK(lg_chunk_decode(buf, 4096, &d) != 0);
    h = (struct lg_chunk_hdr){.len = 0, .seq = 1, .offset = 0, .total = 0};
    lg_chunk_encode(buf, &h);
    CHECK_EQ(lg_chunk_decode(buf, 4096, &d), 0); /* zero-byte message */
    h.total = 5; /* empty chunk of a non-empty message */
    lg_chunk_encode(buf, &h);
    CHECK(lg_chunk_decode(buf, 4096, &d) != 0);
    buf[0] ^= 0xff;
    CHECK(lg_chunk_decode(buf, 4096, &d) != 0);

    CHECK_EQ(lg_chunk_count(0, 512), 1);
    CHECK_EQ(lg_chunk_count(1, 512), 1);
    CHECK_EQ(lg_chunk_count(512, 512), 1);
    CHECK_EQ(lg_chunk_count(513, 512), 2);
    CHECK_EQ(lg_chunk_count(4 << 20, 512 << 10), 8);

    /* The chunk index: only the cut the sender makes (a receive completes by coverage). */
    struct {
        uint64_t offset, total;
        uint32_t len;
        uint64_t want;
    } cut[] = {
        {0, 0, 0, 0},           {0, 1000, 512, 0},     {512, 1000, 488, 1},
        {0, 512, 512, 0},       {512, 1024, 512, 1},   {512, 1000, 512, UINT64_MAX},
        {256, 1000, 512, UINT64_MAX}, /* overlaps chunks 0 and 1 */
        {0, 1000, 488, UINT64_MAX},   /* short, but not the last */
        {1024, 1000, 0, UINT64_MAX},  {1024, 1024, 0, UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
        struct lg_chunk_hdr c = {.offset = cut[i].offset, .total = cut[i].total,
                                 .len = cut[i].len};
        CHECK(lg_chunk_index(&c, 512) == cut[i].want);
    }
    struct lg_chunk_hdr z = {.offset = 0, .total = 10, .len = 10};
    CHECK(lg_chunk_index(&z, 0) == UINT64_MAX);
}

static void test_seqwin(void)
{
    struct lg_seqwin w = {0};
    CHECK_EQ(lg_seqwin_mark(&w, 1), 0); /* out of order: base stays */
    CHECK(w.base == 0);
    CHECK_EQ(lg_seqwin_mark(&w, 2), 0);
    CHECK_EQ(lg_seqwin_mark(&w, 0), 1); /* fills the hole: 0, 1, 2 placed */
    CHECK(w.base == 3 && w.bits == 0);
    CHECK_EQ(lg_seqwin_mark(&w, 2), -1); /* duplicate, below the window */
    CHECK_EQ(lg_seqwin_mark(&w, 3 + LG_WINDOW), -1); /* beyond the window */
    CHECK_EQ(lg_seqwin_mark(&w, 3 + LG_WINDOW - 1), 0);
    CHECK_EQ(lg_seqwin_mark(&w, 3 + LG_WINDOW - 1), -1); /* twice */
    /* Fill the whole window in reverse: base jumps by 64 at once. */
    for (uint64_t s = 3 + LG_WINDOW - 2; s > 3; s--)
        CHECK_EQ(lg_seqwin_mark(&w, s), 0);
    CHECK_EQ(lg_seqwin_mark(&w, 3), 1);
    CHECK(w.base == 3 + LG_WINDOW && w.bits == 0);
    /* Long in-order run, and a base near 2^64 - nothing wraps in practice but the math
     * must hold for any base. */
    for (int i = 0; i < 100000; i++)
        CHECK_EQ(lg_seqwin_mark(&w, w.base), 1);
    w.base = UINT64_MAX - 10;
    w.bits = 0;
    CHECK_EQ(lg_seqwin_mark(&w, UINT64_MAX - 9), 0);
    CHECK_EQ(lg_seqwin_mark(&w, UINT64_MAX - 10), 1);
    CHECK(w.base == UINT64_MAX - 8);
    /* Random completion order within a sliding window: base always equals the number of
     * consecutive completions, which is what an ack promises. */
    struct lg_seqwin r = {0};
    int done[4096] = {0};
    uint64_t next = 0;
    srand(7);
    for (int step = 0; step < 4096; step++) {
        uint64_t s;
        do
            s = r.base + (uint64_t)(rand() % LG_WINDOW);
        while (s >= 4096 || done[s]);
        done[s] = 1;
        CHECK(lg_seqwin_mark(&r, s) >= 0);
        while (next < 4096 && done[next])
            next++;
        CHECK(r.base == next);
        if (r.base >= 4096 - LG_WINDOW)
            break;
    }
}

int main(void)
{
    test_hello();
    test_ctrl();
    test_chunk();
    test_seqwin();
    LG_TEST_DONE();
}
