/* Sends kept in a copy (LINKGUARD_SEND_COPY, window.c), against a scripted peer
 * (lg_test_peer.h). Sender: a small send completes at once, its chunk says LG_CHUNK_F_KEPT, and
 * a replay after a switch sends the bytes it had when posted although NCCL's buffer was
 * overwritten and freed; its window slot stays taken until the ack, and a full window asks for
 * the acks (POSTED). Receiver: kept messages are acked in batches, and at once when asked. */
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "lg_test_pair.h"
#include "lg_test_peer.h"
#include "linkguard_shm.h"
#include "runtime/params.h"

#define CHUNK 4096
#define MSG 64
/* Deadlines of the waits on a condition: generous, for a busy machine under a sanitizer. */
#define WAIT_MS 10000
#define WAIT_NS (WAIT_MS * 1000000ull)

/* Reads one chunk (header and MSG bytes) from a data stream of ours, polling test() on r. */
static int read_chunk(struct lg_peer *pe, int path, void *r, struct lg_chunk_hdr *h, char *payload)
{
    uint8_t b[LG_CHUNK_HDR_SIZE + MSG];
    size_t got = 0;
    uint64_t end = lg_now_ns() + WAIT_NS;
    while (got < sizeof(b) && lg_now_ns() < end) {
        int done;
        if (r)
            lg_core_test(r, &done, NULL);
        ssize_t n = recv(pe->data[path][0], b + got, sizeof(b) - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else
            usleep(500);
    }
    if (got != sizeof(b) || lg_chunk_decode(b, CHUNK, h) != 0)
        return -1;
    memcpy(payload, b + LG_CHUNK_HDR_SIZE, MSG);
    return 0;
}

static void test_kept_send_replays_its_copy(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 2, 1, CHUNK), 0);
    char *buf = malloc(MSG);
    memset(buf, 'k', MSG);
    void *r = NULL;
    CHECK_EQ(lg_core_isend(pe.c, buf, MSG, 0, NULL, &r), ncclSuccess);
    int done = 0;
    CHECK_EQ(lg_core_test(r, &done, NULL), ncclSuccess);
    CHECK_EQ(done, 1); /* no ack yet: the copy is what a replay reads */
    memset(buf, 'x', MSG); /* NCCL reuses the buffer, then frees it */
    free(buf);
    struct lg_chunk_hdr h;
    char got[MSG], want[MSG];
    memset(want, 'k', MSG);
    CHECK_EQ(read_chunk(&pe, 0, NULL, &h, got), 0);
    CHECK(h.flags & LG_CHUNK_F_KEPT);
    CHECK_EQ(memcmp(got, want, MSG), 0);
    /* The receiver's primary dies unacked: switch, RESYNC(0), the message again on the backup. */
    struct lg_ctrl hb = {.type = LG_CTRL_HB, .flags = LG_HB_NIC_DOWN}, sw;
    CHECK_EQ(peer_frame(&pe, 0, hb), 0);
    CHECK_EQ(peer_frame(&pe, 1, hb), 0);
    CHECK_EQ(peer_expect(&pe, 1, LG_CTRL_SWITCH, &sw, WAIT_MS), 0);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_RESYNC, .flags = 1,
                                                 .epoch = sw.epoch, .value = 0}),
             0);
    memset(got, 0, MSG);
    CHECK_EQ(read_chunk(&pe, 1, NULL, &h, got), 0);
    CHECK_EQ(h.seq, 0);
    CHECK_EQ(h.epoch, (uint16_t)sw.epoch);
    CHECK_EQ(memcmp(got, want, MSG), 0);
    CHECK_EQ(peer_frame(&pe, 1, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = 1}), 0);
    uint64_t end = lg_now_ns() + WAIT_NS;
    while (__atomic_load_n(&pe.c->acked, __ATOMIC_ACQUIRE) < 1 && lg_now_ns() < end)
        usleep(1000);
    peer_close(&pe); /* acked: the close does not wait */
}

static void test_kept_sends_hold_the_window(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_SEND, 1, 1, CHUNK), 0);
    static char buf[MSG];
    int n = 0;
    for (int i = 0; i <= LG_WINDOW; i++) {
        void *r = NULL;
        CHECK_EQ(lg_core_isend(pe.c, buf, MSG, 0, NULL, &r), ncclSuccess);
        if (!r)
            break;
        int done = 0;
        CHECK_EQ(lg_core_test(r, &done, NULL), ncclSuccess);
        CHECK_EQ(done, 1);
        n++;
    }
    CHECK_EQ(n, LG_WINDOW); /* the slots wait for the ack, not for NCCL */
    struct lg_ctrl ask;
    CHECK_EQ(peer_expect(&pe, 0, LG_CTRL_POSTED, &ask, WAIT_MS), 0);
    CHECK_EQ(ask.value, LG_WINDOW);
    /* An honest receiver acks what it read. */
    char sink[1 << 16];
    size_t want = (size_t)LG_WINDOW * (LG_CHUNK_HDR_SIZE + MSG), got = 0;
    uint64_t end = lg_now_ns() + WAIT_NS;
    while (got < want && lg_now_ns() < end) {
        ssize_t k = recv(pe.data[0][0], sink, sizeof(sink), MSG_DONTWAIT);
        got += k > 0 ? (size_t)k : 0;
    }
    CHECK_EQ(got, want);
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = LG_WINDOW}), 0);
    void *r = NULL;
    end = lg_now_ns() + WAIT_NS;
    while (!r && lg_now_ns() < end) {
        CHECK_EQ(lg_core_isend(pe.c, buf, MSG, 0, NULL, &r), ncclSuccess);
        usleep(200);
    }
    CHECK(r != NULL);
    CHECK_EQ(recv(pe.data[0][0], sink, LG_CHUNK_HDR_SIZE + MSG, MSG_WAITALL),
             LG_CHUNK_HDR_SIZE + MSG);
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_ACK, .value = LG_WINDOW + 1}),
             0);
    peer_close(&pe);
}

/* Receiver: three kept messages placed, no ACK; the sender's POSTED(3) brings ACK(3). */
static void test_receiver_batches_kept_acks(void)
{
    struct lg_peer pe;
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
    static char bufs[3][MSG];
    void *r[3];
    char payload[MSG];
    memset(payload, 'p', MSG);
    for (int i = 0; i < 3; i++) {
        void *data[1] = {bufs[i]};
        size_t size[1] = {MSG};
        CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r[i]), ncclSuccess);
        struct lg_chunk_hdr h = {.len = MSG, .seq = (uint64_t)i, .total = MSG,
                                 .flags = LG_CHUNK_F_KEPT};
        CHECK_EQ(peer_chunk(&pe, 0, 0, h, payload, MSG), 0);
        ncclResult_t rc;
        CHECK_EQ(peer_poll(&pe, r[i], WAIT_MS, &rc), 1);
    }
    CHECK_EQ(__atomic_load_n(&pe.c->ack_sent, __ATOMIC_ACQUIRE), 0); /* batched */
    CHECK_EQ(peer_frame(&pe, 0, (struct lg_ctrl){.type = LG_CTRL_POSTED, .value = 3}), 0);
    struct lg_ctrl ack;
    CHECK_EQ(peer_expect(&pe, 0, LG_CTRL_ACK, &ack, WAIT_MS), 0);
    CHECK_EQ(ack.value, 3);
    peer_close(&pe);
}

int main(void)
{
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard-test", 1); /* no daemon */
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "5000", 1); /* the scripted peer is quiet */
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", "20000", 1);
    /* The monitor's runs flush batched acks: far apart, so the test sees the batch held. */
    setenv("LINKGUARD_HEARTBEAT_MS", "60000", 1);
    loopback_devices("lgk0", "lgk1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    CHECK(MSG <= lg_params.send_copy);
    test_kept_send_replays_its_copy();
    test_kept_sends_hold_the_window();
    test_receiver_batches_kept_acks();
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    /* lgtcp keeps none: its completion means placed (wrap mode's LINKGUARD_INNER_PLACED). */
    setenv("LGTCP_IFS", "lo", 1);
    CHECK_EQ(lg_core_init(LG_FLAVOR_TCP, NULL), ncclSuccess);
    CHECK_EQ(lg_params.send_copy, 0);
    CHECK_EQ(lg_params.census, 0); /* and no census: the wrapping linkguard sends the pid's */
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
