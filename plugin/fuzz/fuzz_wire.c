/* Fuzzes every decoder of the TCP transport's wire formats (src/session/wire.c) with bytes a peer (or
 * a stranger on the listening port) can send.
 * Input: one byte choosing the decoder, then its bytes (zero-padded to the format's size):
 *   0 hello (48 bytes), 1 control frame (24), 2 chunk header (40, then a 4-byte max_len and a
 *   4-byte chunk size), 3 sequence window (an 8-byte base, then one seq offset per byte).
 * Checks: what decodes obeys the documented field rules and encodes back to the same fields
 * (a control frame byte for byte); a chunk's offset + len never exceeds its total and
 * lg_chunk_index names a chunk inside the message; the window agrees with a plain set model
 * of done sequence numbers (return codes, base, and every bit). */
#include <string.h>

#include "fuzz.h"
#include "runtime/le.h"
#include "session/wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

static void take(uint8_t *dst, size_t n, const uint8_t *data, size_t size)
{
    memset(dst, 0, n);
    memcpy(dst, data, size < n ? size : n);
}

static void fuzz_hello(const uint8_t *data, size_t size)
{
    uint8_t in[LG_HELLO_SIZE], out[LG_HELLO_SIZE];
    take(in, sizeof(in), data, size);
    struct lg_hello h, back;
    if (lg_hello_decode(in, &h) != 0)
        return;
    if (h.flags & LG_HELLO_F_SESSION) { /* a session's: its id, every other field 0 */
        FUZZ_ASSERT(h.flags == LG_HELLO_F_SESSION && !h.path && !h.stream && !h.nstreams);
        FUZZ_ASSERT(!h.paths_mask && !h.transport && !h.blob && !h.listen_id && !h.gen &&
                    !h.session && !h.chan);
    } else {
        FUZZ_ASSERT(h.path < LG_NPATHS && h.chan != 0);
        FUZZ_ASSERT(h.nstreams >= 1 && h.nstreams <= LG_MAX_STREAMS && h.stream >= 1 &&
                    h.stream <= h.nstreams);
        FUZZ_ASSERT(h.transport != 0 && (h.paths_mask & 1) && !(h.paths_mask >> LG_NPATHS));
        FUZZ_ASSERT(!(h.flags & ~LG_HELLO_F_REJOIN));
    }
    lg_hello_encode(out, &h);
    FUZZ_ASSERT(lg_hello_decode(out, &back) == 0);
    FUZZ_ASSERT(back.path == h.path && back.stream == h.stream && back.nstreams == h.nstreams);
    FUZZ_ASSERT(back.paths_mask == h.paths_mask && back.transport == h.transport &&
                back.blob == h.blob);
    FUZZ_ASSERT(back.listen_id == h.listen_id && back.conn_nonce == h.conn_nonce);
    FUZZ_ASSERT(back.flags == h.flags && back.gen == h.gen);
    FUZZ_ASSERT(back.session == h.session && back.chan == h.chan);
}

static void fuzz_ctrl(const uint8_t *data, size_t size)
{
    uint8_t in[LG_CTRL_SIZE], out[LG_CTRL_SIZE];
    take(in, sizeof(in), data, size);
    struct lg_ctrl c;
    if (lg_ctrl_decode(in, &c) != 0)
        return;
    FUZZ_ASSERT(c.type >= 1 && c.type < LG_CTRL_TYPE_MAX);
    lg_ctrl_encode(out, &c);
    FUZZ_ASSERT(!memcmp(in, out, sizeof(in)));
}

static void fuzz_chunk(const uint8_t *data, size_t size)
{
    uint8_t in[LG_CHUNK_HDR_SIZE + 8], out[LG_CHUNK_HDR_SIZE];
    take(in, sizeof(in), data, size);
    uint32_t max_len = lg_get32(in + LG_CHUNK_HDR_SIZE);
    uint32_t chunk = lg_get32(in + LG_CHUNK_HDR_SIZE + 4);
    struct lg_chunk_hdr h;
    if (lg_chunk_decode(in, max_len, &h) != 0)
        return;
    FUZZ_ASSERT(h.len <= max_len && h.offset <= h.total && h.len <= h.total - h.offset);
    FUZZ_ASSERT(h.len > 0 || h.total == 0);
    uint64_t k = lg_chunk_index(&h, chunk);
    if (k != UINT64_MAX) {
        FUZZ_ASSERT(k * chunk == h.offset && (h.total ? h.offset < h.total : k == 0));
        /* lg_chunk_count rounds up with an add: exact for any size a receive can post */
        if (h.total <= (1ull << 62))
            FUZZ_ASSERT(k < lg_chunk_count(h.total, chunk));
    }
    lg_chunk_encode(out, &h);
    FUZZ_ASSERT(!memcmp(in, out, LG_CHUNK_HDR_SIZE - 4)); /* the last 4 bytes are reserved */
}

/* The model: done[i] for seq = start + i; the window's base is the first not done. */
static void fuzz_seqwin(const uint8_t *data, size_t size)
{
    enum { MAX_OPS = 4096 };
    static uint8_t done[MAX_OPS + 2 * LG_WINDOW];
    uint8_t b[8];
    take(b, sizeof(b), data, size);
    /* Far below the top: 2^64 messages never happen, so the window need not wrap. */
    uint64_t start = lg_get64(b) >> 1;
    data += size < 8 ? size : 8;
    size -= size < 8 ? size : 8;
    if (size > MAX_OPS)
        size = MAX_OPS;
    memset(done, 0, sizeof(done));
    struct lg_seqwin w = {.base = start, .bits = 0};
    uint64_t base = 0; /* the model's, relative to start */
    for (size_t i = 0; i < size; i++) {
        /* Offsets -16 .. +239 around the base: below, inside and beyond the window. */
        int64_t rel = (int64_t)base + (int64_t)data[i] - 16;
        if (rel < 0)
            rel = 0;
        int expect;
        if ((uint64_t)rel < base || (uint64_t)rel >= base + LG_WINDOW || done[rel]) {
            expect = -1;
        } else {
            done[rel] = 1;
            uint64_t old = base;
            while (done[base])
                base++;
            expect = base != old;
        }
        FUZZ_ASSERT(lg_seqwin_mark(&w, start + (uint64_t)rel) == expect);
        FUZZ_ASSERT(w.base == start + base);
        for (unsigned k = 0; k < LG_WINDOW; k++)
            FUZZ_ASSERT(!!(w.bits & (1ull << k)) == done[base + k]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0]) {
    case 0: fuzz_hello(data + 1, size - 1); break;
    case 1: fuzz_ctrl(data + 1, size - 1); break;
    case 2: fuzz_chunk(data + 1, size - 1); break;
    case 3: fuzz_seqwin(data + 1, size - 1); break;
    default: break;
    }
    return 0;
}
