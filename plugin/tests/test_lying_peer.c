/* A peer that lies (issue #16), and one that closes right after its last receive (issue #13).
 * Each lie is one of the findings, driven through the real
 * connection code by a scripted peer (lg_test_peer.h). A lie fails the connection with
 * ncclRemoteError and a WARN; it never completes a request early (NCCL would reuse the buffer
 * while we still read or write it) and never leaves the connection stuck. Buffers are given
 * back to the allocator as soon as a request reports done, so an ASan build also catches any
 * late access. Grouped receives: a repeated tag whose second message comes first, chunks of
 * one message with two tags, a message larger than the buffer its tag selects. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "lg_test_pair.h"
#include "lg_test_peer.h"
#include "linkguard_shm.h"
#include "runtime/log.h"
#include "runtime/params.h"

#define CHUNK 4096

/* 1. Overlapping chunks on two streams must not complete a receive while a stream is still
 * writing into it. Stream 1 starts chunk 0 and stops partway; stream 2 sends chunk 0 whole,
 * twice: by byte count that made 8 KiB of an 8 KiB message. */
static void test_overlapping_chunks(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 2, CHUNK), 0);
    char *buf = malloc(2 * CHUNK);
    void *data[1] = {buf}, *r = NULL;
    size_t size[1] = {2 * CHUNK};
    int tag[1] = {0};
    CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, tag, NULL, &r), ncclSuccess);
    struct lg_chunk_hdr h = {.len = CHUNK, .seq = 0, .offset = 0, .total = 2 * CHUNK};
    CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, 100), 0); /* 100 of its 4096 bytes */
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 100, &rc), 0);
    CHECK_EQ(peer_chunk(&pe, 0, 1, h, NULL, CHUNK), 0);
    CHECK_EQ(peer_chunk(&pe, 0, 1, h, NULL, CHUNK), 0);
    int got = peer_poll(&pe, r, 2000, &rc);
    CHECK_EQ(got, -1);
    CHECK_EQ(rc, ncclRemoteError);
    if (got == 1)
        free(buf); /* what NCCL does with it: the rest of chunk 0 must not land there */
    static const char rest[CHUNK - 100];
    CHECK_EQ(peer_write(pe.data[0][0], rest, sizeof(rest)), 0);
    usleep(50000);
    peer_close(&pe);
    if (got != 1)
        free(buf);
}

/* 1b. A chunk that is not one the sender cuts (an offset inside chunk 0). */
static void test_miscut_chunk(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
    char *buf = malloc(2 * CHUNK);
    void *data[1] = {buf}, *r = NULL;
    size_t size[1] = {2 * CHUNK};
    CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
    struct lg_chunk_hdr h = {.len = CHUNK, .seq = 0, .offset = CHUNK / 2, .total = 2 * CHUNK};
    CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, CHUNK), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(buf);
}

/* 2. An ACK for a message whose chunks are not all written yet. The message is far bigger than
 * the socket buffers and the peer reads nothing before it acks, so most of it is unsent; by
 * the ack alone the send completed as soon as the chunk in flight was written, and the rest
 * was then sent from a buffer NCCL had taken back. */
static void test_early_ack(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 1, 1, 64 << 10), 0);
    size_t len = 64u << 20;
    char *buf = malloc(len);
    memset(buf, 7, len);
    void *r = NULL;
    CHECK_EQ(lg_core_isend(pe.c, buf, len, 0, NULL, &r), ncclSuccess);
    int done = 0;
    for (int i = 0; i < 50; i++) { /* let the writer fill the socket */
        lg_core_test(r, &done, NULL);
        usleep(2000);
    }
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = 1}), 0);
    ncclResult_t rc;
    int got = peer_poll(&pe, r, 3000, &rc);
    CHECK_EQ(got, -1);
    CHECK_EQ(rc, ncclRemoteError);
    if (got == 1)
        free(buf);
    peer_close(&pe);
    if (got != 1)
        free(buf);
}

/* Sends `n` small messages on a protected send connection and acks them all: they complete
 * and their buffers are freed at once, as NCCL reuses them. */
static void send_acked(struct lg_peer *pe, int n)
{
    for (int i = 0; i < n; i++) {
        char *b = malloc(64);
        memset(b, i, 64);
        void *r = NULL;
        CHECK_EQ(lg_core_isend(pe->c, b, 64, 0, NULL, &r), ncclSuccess);
        /* An honest receiver acks what it has read: an ack that overtakes the data is a lie
         * (seen under TSan, where the writer runs late). */
        uint8_t chunk[LG_CHUNK_HDR_SIZE + 64];
        CHECK_EQ(recv(pe->data[0][0], chunk, sizeof(chunk), MSG_WAITALL), (ssize_t)sizeof(chunk));
        CHECK_EQ(peer_frame(pe, 0, (struct lg_ctrl){.type = LG_CTRL_ACK,
                                                     .value = (uint64_t)i + 1}),
                 0);
        ncclResult_t rc;
        CHECK_EQ(peer_poll(pe, r, 2000, &rc), 1);
        free(b);
    }
}

/* Makes the sender propose a switch to the backup (the peer's heartbeat says its primary NIC
 * is DOWN) and returns the SWITCH's epoch, 0 if none came. */
static uint32_t provoke_switch(struct lg_peer *pe)
{
    struct lg_ctrl hb = {.type = LG_CTRL_HB, .flags = LG_HB_NIC_DOWN};
    CHECK_EQ(peer_frame(pe, 0, hb), 0);
    CHECK_EQ(peer_frame(pe, 1, hb), 0);
    struct lg_ctrl sw;
    if (peer_expect(pe, 1, LG_CTRL_SWITCH, &sw, 2000) != 0)
        return 0;
    CHECK_EQ(sw.value, 1);
    return sw.epoch;
}

/* A protected send connection with `acked` messages sent, acked and freed, one more posted
 * (*buf, *req), a switch to the backup provoked, and the peer's RESYNC to message `n` at the
 * proposed epoch, which it returns. */
static uint32_t switch_and_resync(struct lg_peer *pe, int acked, uint64_t n, char **buf, void **req)
{
    CHECK_EQ(peer_open(pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    send_acked(pe, acked);
    *buf = malloc(64);
    CHECK_EQ(lg_core_isend(pe->c, *buf, 64, 0, NULL, req), ncclSuccess);
    uint32_t e = provoke_switch(pe);
    CHECK(e > 0);
    CHECK_EQ(peer_frame(pe, 1, (struct lg_ctrl){.type = LG_CTRL_RESYNC, .flags = 1, .epoch = e,
                                                .value = n}),
             0);
    return e;
}

/* 3. A RESYNC below what the receiver already acknowledged: the rewind replayed finished
 * messages from buffers NCCL had reused. */
static void test_resync_below_acked(void)
{
    struct lg_peer pe;
    char *b = NULL;
    void *r = NULL;
    switch_and_resync(&pe, 4, 2, &b, &r);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    /* Nothing below message 4 was sent again on the backup. */
    struct lg_chunk_hdr h;
    uint8_t hb[LG_CHUNK_HDR_SIZE];
    while (recv(pe.data[1][0], hb, sizeof(hb), MSG_DONTWAIT | MSG_WAITALL) == sizeof(hb)) {
        CHECK_EQ(lg_chunk_decode(hb, CHUNK, &h), 0);
        CHECK(h.seq >= 4);
        char skip[CHUNK];
        recv(pe.data[1][0], skip, h.len, MSG_WAITALL);
    }
    peer_close(&pe);
    free(b);
}

/* 3b. Not a lie: messages 1 and 2 completed before the switch, message 0 did not (a lossy
 * stream completes out of order), so the RESYNC says 0; once the replay of message 0 is
 * placed, the ACK covers all three while the rewound cursor is still inside message 0. The
 * sender takes it (the furthest its cursor got was 3), completes all three and sends nothing
 * more of them. */
static void test_ack_after_rewind_covers_held_messages(void)
{
    enum { BIG = 16 << 20, N = 3 };
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    char *b[N];
    void *r[N];
    for (int i = 0; i < N; i++) {
        b[i] = malloc(BIG);
        memset(b[i], i, BIG);
        CHECK_EQ(lg_core_isend(pe.c, b[i], BIG, 0, NULL, &r[i]), ncclSuccess);
    }
    /* Read all three from the primary: every message wholly handed to the transport. */
    size_t want = (size_t)N * (BIG + (BIG / CHUNK) * LG_CHUNK_HDR_SIZE), got = 0;
    char *sink = malloc(1 << 20);
    while (got < want) {
        int done;
        lg_core_test(r[N - 1], &done, NULL);
        ssize_t k = recv(pe.data[0][0], sink, 1 << 20, MSG_DONTWAIT);
        if (k > 0)
            got += (size_t)k;
        else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            break;
    }
    free(sink);
    CHECK_EQ(got, want);
    uint32_t e = provoke_switch(&pe);
    CHECK(e > 0);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_RESYNC, .flags = 1, .epoch = e,
                                                 .value = 0}),
             0);
    /* The replay of message 0 fills the backup's socket buffers (the peer does not read). */
    uint64_t t0 = lg_now_ns(), cursor = UINT64_MAX;
    while (lg_now_ns() - t0 < 2000000000ull) {
        int done;
        lg_core_test(r[0], &done, NULL);
        pthread_mutex_lock(&pe.c->mu);
        cursor = pe.c->cursor_seq;
        int rewound = __atomic_load_n(&pe.c->epoch, __ATOMIC_ACQUIRE) == e;
        pthread_mutex_unlock(&pe.c->mu);
        if (rewound && cursor == 0)
            break;
        usleep(1000);
    }
    CHECK_EQ(cursor, 0); /* the case under test: the ACK below overtakes the cursor */
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = N}), 0);
    ncclResult_t rc = ncclSuccess;
    for (int i = 0; i < N; i++)
        CHECK_EQ(peer_poll(&pe, r[i], 2000, &rc), 1);
    CHECK_EQ(rc, ncclSuccess);
    pthread_mutex_lock(&pe.c->mu);
    CHECK(pe.c->cursor_seq >= N); /* nothing the receiver holds is sent again */
    pthread_mutex_unlock(&pe.c->mu);
    peer_close(&pe);
    for (int i = 0; i < N; i++)
        free(b[i]);
}

/* 5a. A heartbeat claiming epoch 0xffffffff: the sender's next proposal wrapped to 0, which no
 * receiver accepts, and sending stopped for good. */
static void test_forged_heartbeat(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    char *b = malloc(64);
    void *r = NULL;
    CHECK_EQ(lg_core_isend(pe.c, b, 64, 0, NULL, &r), ncclSuccess);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_HB, .epoch = UINT32_MAX}), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(b);
}

/* 5b. A SWITCH to epoch 0xffffffff: the receiver committed it and could never move again. */
static void test_forged_switch(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 2, 1, CHUNK), 0);
    char *buf = malloc(64);
    void *data[1] = {buf}, *r = NULL;
    size_t size[1] = {64};
    CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_SWITCH, .epoch = UINT32_MAX,
                                                 .value = 1}),
             0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    struct lg_ctrl f;
    CHECK(peer_expect(&pe, 1, LG_CTRL_RESYNC, &f, 200) != 0); /* nothing committed */
    peer_close(&pe);
    free(buf);
}

/* 5c. A DELIVERED frame (wrap mode's placed completion), a KEEPS (its kept sends) or a
 * GROUPED answer (its grouped receives) to a
 * receiver of linkguard's own transport: no honest sender sends them there. */
static void test_wrap_frame_outside_wrap_mode(uint8_t type)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 2, 1, CHUNK), 0);
    char *buf = malloc(64);
    void *data[1] = {buf}, *r = NULL;
    size_t size[1] = {64};
    CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = type, .value = 1}), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(buf);
}

/* The honest counterpart: a switch proposed, answered and committed, then data on the backup
 * completes the send (the checks above do not refuse the protocol itself). */
static void test_honest_switch(void)
{
    struct lg_peer pe;
    char *b = NULL;
    void *r = NULL;
    uint32_t e = switch_and_resync(&pe, 2, 2, &b, &r);
    uint8_t hb[LG_CHUNK_HDR_SIZE];
    struct lg_chunk_hdr h = {0};
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) { /* message 2 again, on the backup, at epoch e */
        int done;
        lg_core_test(r, &done, NULL);
        ok = recv(pe.data[1][0], hb, sizeof(hb), MSG_DONTWAIT | MSG_WAITALL) == sizeof(hb);
        usleep(10000);
    }
    CHECK(ok);
    CHECK_EQ(lg_chunk_decode(hb, CHUNK, &h), 0);
    CHECK_EQ(h.seq, 2);
    CHECK_EQ(h.epoch, (uint16_t)e);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = 3}), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), 1);
    peer_close(&pe);
    free(b);
}

/* Issue #13: a receiver that closes right after its last receive. Its BYE (here on the backup,
 * while no ACK ever comes on the primary) carries what it placed: those sends complete; one it
 * never received fails, naming the close. */
static void test_goodbye_carries_the_final_count(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    char *b0 = malloc(64), *b1 = malloc(64);
    void *r0 = NULL, *r1 = NULL;
    CHECK_EQ(lg_core_isend(pe.c, b0, 64, 0, NULL, &r0), ncclSuccess);
    CHECK_EQ(lg_core_isend(pe.c, b1, 64, 0, NULL, &r1), ncclSuccess);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r0, 100, &rc), 0); /* written (and drained), not acked */
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_BYE, .flags = LG_BYE_CLOSE,
                                                 .value = 1}),
             0);
    shutdown(pe.ctrl[1], SHUT_WR);
    CHECK_EQ(peer_poll(&pe, r0, 2000, &rc), 1);
    CHECK_EQ(peer_poll(&pe, r1, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(b0);
    free(b1);
}

/* Issue #12: a connection without a backup path whose peer goes silent ends in an error, not a
 * hang; it sends heartbeats itself, and a peer that never sent one (an older build) is never
 * judged. */
static void test_unprotected_silent_peer(void)
{
    int64_t saved_dead = lg_params.dead_timeout_ms, saved_silent = lg_params.silent_timeout_ms;
    lg_params.dead_timeout_ms = 600;
    lg_params.silent_timeout_ms = 200;
    for (int with_hb = 1; with_hb >= 0; with_hb--) {
        struct lg_peer pe;
        CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
        char *buf = malloc(64);
        void *data[1] = {buf}, *r = NULL;
        size_t size[1] = {64};
        CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
        struct lg_ctrl hb;
        CHECK_EQ(peer_expect(&pe, 0, LG_CTRL_HB, &hb, 2000), 0); /* ours */
        if (with_hb)
            CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_HB}), 0);
        ncclResult_t rc;
        int got = peer_poll(&pe, r, with_hb ? 5000 : 1500, &rc);
        CHECK_EQ(got, with_hb ? -1 : 0);
        if (with_hb)
            CHECK_EQ(rc, ncclRemoteError);
        peer_close(&pe);
        free(buf);
    }
    lg_params.dead_timeout_ms = saved_dead;
    lg_params.silent_timeout_ms = saved_silent;
}

/* Issue #12: one stream stalls. Chunk 0 of a two-chunk message arrives, chunk 1 never does,
 * while the connection is otherwise fine: the receiver's watchdog asks the sender (STALLED for
 * message #0), and since this sender never confirms, fails the path itself a few periods
 * later. Unprotected: the connection fails with an error; protected: the path is fenced
 * (BYE(FENCE)) so that the sender fails over. */
static void test_one_stream_stalls(void)
{
    for (int npaths = 1; npaths <= 2; npaths++) {
        struct lg_peer pe;
        CHECK_EQ(peer_open(&pe, LG_CONN_RECV, npaths, 2, CHUNK), 0);
        char *buf = malloc(2 * CHUNK);
        void *data[1] = {buf}, *r = NULL;
        size_t size[1] = {2 * CHUNK};
        CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
        struct lg_chunk_hdr h = {.len = CHUNK, .seq = 0, .offset = 0, .total = 2 * CHUNK};
        CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, CHUNK), 0);
        ncclResult_t rc;
        int got = 0, asked = 0, fenced = 0;
        struct lg_ctrl bye = {0};
        uint64_t t0 = lg_now_ns();
        /* The peer stays heard (a heartbeat each round): only the data is stuck. Until the
         * verdict: the error (unprotected) or the fence (protected), within 30 s (the clock
         * restarts whenever a starved round leaves the peer unheard for 4 heartbeats). */
        while (got == 0 && !fenced && lg_now_ns() - t0 < 30000000000ull) {
            peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_HB});
            got = peer_poll(&pe, r, 20, &rc);
            struct lg_ctrl ask;
            if (!asked && peer_expect(&pe, 0, LG_CTRL_STALLED, &ask, 1) == 0) {
                CHECK_EQ(ask.value, 0); /* the message that got no data */
                CHECK_EQ(got, 0);       /* asked before judging alone */
                asked = 1;
            } else if (asked && npaths == 2) {
                fenced = peer_expect(&pe, 0, LG_CTRL_BYE, &bye, 1) == 0;
            }
        }
        CHECK(asked);
        if (npaths == 1) {
            CHECK_EQ(got, -1);
            CHECK_EQ(rc, ncclRemoteError);
        } else {
            CHECK_EQ(got, 0); /* never done, never an error */
            CHECK(fenced);
            CHECK_EQ(bye.flags, LG_BYE_FENCE);
        }
        peer_close(&pe);
        free(buf);
    }
}

static int denied; /* the sender said a STALLED was not the network */

static void denial_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                          int line, const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN)
        fprintf(stderr, "  [expected warn] %s\n", msg);
    else if (level == NCCL_LOG_INFO && strstr(msg, "the receiver says message #0 got no data") &&
             strstr(msg, "not the network"))
        __atomic_store_n(&denied, 1, __ATOMIC_RELEASE);
}

/* The sender answers the receiver's STALLED from its own sockets. (a) A message whose bytes
 * the peer's kernel acknowledged (the scripted receiver read them; it just does not ack the
 * message) is not stuck in the network: the sender says so and keeps the path, and the
 * message completes once acked. (b) A STALLED for a message never sent is a lie. */
static void test_stalled_answered_by_the_sender(void)
{
    lg_log_set(denial_logger);
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    char *b = calloc(1, 64);
    void *r = NULL;
    CHECK_EQ(lg_core_isend(pe.c, b, 64, 0, NULL, &r), ncclSuccess);
    uint8_t chunk[LG_CHUNK_HDR_SIZE + 64];
    CHECK_EQ(recv(pe.data[0][0], chunk, sizeof(chunk), MSG_WAITALL), (ssize_t)sizeof(chunk));
    ncclResult_t rc;
    for (int i = 0; i < 100 && !__atomic_load_n(&denied, __ATOMIC_ACQUIRE); i++) {
        CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_HB}), 0);
        CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_STALLED, .value = 0}), 0);
        CHECK_EQ(peer_poll(&pe, r, 20, &rc), 0); /* neither done nor failed */
    }
    CHECK(__atomic_load_n(&denied, __ATOMIC_ACQUIRE));
    struct lg_ctrl f;
    CHECK(peer_expect(&pe, 1, LG_CTRL_SWITCH, &f, 200) != 0); /* it stayed on the primary */
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = 1}), 0);
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), 1);
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_STALLED, .value = 5}), 0);
    rc = lg_core_isend(pe.c, b, 64, 0, NULL, &r); /* refused once the lie is read */
    if (rc == ncclSuccess)
        CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(b);
}

/* Grouped receives from a scripted peer. (a) Honest, with a repeated tag: the second message
 * of the group comes first, on another stream; it must wait for the first one's tag and then
 * fill the second buffer posted with that tag. */
static void test_grouped_repeated_tag_waits(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 2, CHUNK), 0);
    char *b0 = malloc(100), *b1 = malloc(100), pa[20], pb[10];
    memset(pa, 'A', sizeof(pa));
    memset(pb, 'B', sizeof(pb));
    void *data[2] = {b0, b1}, *r = NULL;
    size_t size[2] = {100, 100};
    int tag[2] = {7, 7};
    CHECK_EQ(lg_core_irecv(pe.c, 2, data, size, tag, NULL, &r), ncclSuccess);
    struct lg_chunk_hdr h1 = {.len = 10, .seq = 1, .total = 10, .tag = 7};
    CHECK_EQ(peer_chunk(&pe, 0, 1, h1, pb, sizeof(pb)), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 100, &rc), 0);
    struct lg_chunk_hdr h0 = {.len = 20, .seq = 0, .total = 20, .tag = 7};
    CHECK_EQ(peer_chunk(&pe, 0, 0, h0, pa, sizeof(pa)), 0);
    int done = 0, sizes[3] = {-1, -1, -1};
    uint64_t t0 = lg_now_ns();
    while (!done && lg_now_ns() - t0 < 2000000000ull &&
           (rc = lg_core_test(r, &done, sizes)) == ncclSuccess)
        usleep(200);
    CHECK_EQ(done, 1);
    CHECK(sizes[0] == 20 && sizes[1] == 10 && sizes[2] == -1);
    CHECK(!memcmp(b0, pa, sizeof(pa)) && !memcmp(b1, pb, sizeof(pb)));
    peer_close(&pe);
    free(b0);
    free(b1);
}

/* (b) The chunks of one message carry two tags: a lie, the connection fails. */
static void test_grouped_tags_disagree(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
    char *b0 = malloc(2 * CHUNK), *b1 = malloc(2 * CHUNK);
    void *data[2] = {b0, b1}, *r = NULL;
    size_t size[2] = {2 * CHUNK, 2 * CHUNK};
    int tag[2] = {5, 6};
    CHECK_EQ(lg_core_irecv(pe.c, 2, data, size, tag, NULL, &r), ncclSuccess);
    struct lg_chunk_hdr h = {.len = CHUNK, .seq = 0, .total = 2 * CHUNK, .tag = 5};
    CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, CHUNK), 0);
    h.offset = CHUNK, h.tag = 6;
    CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, CHUNK), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclRemoteError);
    peer_close(&pe);
    free(b0);
    free(b1);
}

/* (c) A message larger than the buffer its tag selects (the group's other buffer would hold
 * it): the connection fails and nothing is written past the small buffer (ASan: it is
 * allocated to the byte). */
static void test_grouped_chunk_beyond_its_buffer(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
    char *big = malloc(CHUNK), *small = malloc(100);
    void *data[2] = {big, small}, *r = NULL;
    size_t size[2] = {CHUNK, 100};
    int tag[2] = {5, 6};
    CHECK_EQ(lg_core_irecv(pe.c, 2, data, size, tag, NULL, &r), ncclSuccess);
    struct lg_chunk_hdr h = {.len = CHUNK, .seq = 0, .total = CHUNK, .tag = 6};
    CHECK_EQ(peer_chunk(&pe, 0, 0, h, NULL, CHUNK), 0);
    ncclResult_t rc;
    CHECK_EQ(peer_poll(&pe, r, 2000, &rc), -1);
    CHECK_EQ(rc, ncclInternalError);
    peer_close(&pe);
    free(big);
    free(small);
}

int main(void)
{
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard-test", 1); /* no daemon */
    setenv("LINKGUARD_HEARTBEAT_MS", "20", 1);
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "5000", 1); /* the scripted peer is often quiet */
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", "20000", 1);
    /* The lies here are about acks: every send waits for its own (test_kept_send.c has the
     * sends kept in a copy). */
    setenv("LINKGUARD_SEND_COPY", "0", 1);
    loopback_devices("lgt0", "lgt1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    test_overlapping_chunks();
    test_miscut_chunk();
    test_early_ack();
    test_resync_below_acked();
    test_ack_after_rewind_covers_held_messages();
    test_forged_heartbeat();
    test_forged_switch();
    test_wrap_frame_outside_wrap_mode(LG_CTRL_DELIVERED);
    test_wrap_frame_outside_wrap_mode(LG_CTRL_KEEPS);
    test_wrap_frame_outside_wrap_mode(LG_CTRL_GROUPED);
    test_honest_switch();
    test_goodbye_carries_the_final_count();
    test_unprotected_silent_peer();
    test_one_stream_stalls();
    test_stalled_answered_by_the_sender();
    test_grouped_repeated_tag_waits();
    test_grouped_tags_disagree();
    test_grouped_chunk_beyond_its_buffer();
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
