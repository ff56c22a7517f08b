/* A receiver acks a message as soon as it has placed it and has nothing more to read, not only
 * once LG_ACK_NOW_MSGS or LG_ACK_NOW_BYTES are due: a paced sender (NCCL's small messages, one
 * at a time) would otherwise wait for later messages to release its window. The sender is a
 * scripted peer (lg_test_peer.h) that sends one small message, waits for its ACK, and only then
 * sends the next, so an ACK held back for a batch never comes. Whoever places the message:
 * test() on NCCL's thread, a worker woken by the chunk header that test() read, or a worker
 * alone (no inline polling, no test() call before the ACK). */
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "lg_test_pair.h"
#include "lg_test_peer.h"
#include "linkguard_shm.h"
#include "runtime/params.h"

#define CHUNK 4096
#define MSG 8
#define NMSG 3 /* below LG_ACK_NOW_MSGS: every ACK is the idle one */

enum placer { BY_TEST, BY_WORKER_AFTER_TEST, BY_WORKER_ALONE };

static void one_at_a_time(enum placer who)
{
    int64_t saved_inline = lg_params.poll_inline, saved_send = lg_params.inline_send;
    lg_params.poll_inline = who != BY_WORKER_ALONE;
    if (who == BY_WORKER_AFTER_TEST)
        lg_params.inline_send = MSG / 2; /* each message is "big": test() hands it over */
    struct lg_peer pe;
    char bufs[NMSG][MSG] = {{0}}; /* outlive the connection: a late placement lands here */
    CHECK_EQ(peer_open(&pe, LG_CONN_RECV, 1, 1, CHUNK), 0);
    for (int i = 0; pe.c && i < NMSG; i++) {
        char *buf = bufs[i];
        void *data[1] = {buf}, *r = NULL;
        size_t size[1] = {MSG};
        CHECK_EQ(lg_core_irecv(pe.c, 1, data, size, NULL, NULL, &r), ncclSuccess);
        char payload[MSG];
        memset(payload, 'a' + i, sizeof(payload));
        struct lg_chunk_hdr h = {.len = MSG, .seq = (uint64_t)i, .total = MSG};
        CHECK_EQ(peer_chunk(&pe, 0, 0, h, payload, sizeof(payload)), 0);
        ncclResult_t rc = ncclSuccess;
        struct lg_ctrl ack = {0};
        int acked = -1, done = 0;
        if (who == BY_WORKER_ALONE) { /* acked before NCCL's thread ever looks */
            acked = peer_expect(&pe, 0, LG_CTRL_ACK, &ack, 5000);
            done = peer_poll(&pe, r, 5000, &rc);
        } else {
            done = peer_poll(&pe, r, 5000, &rc);
            acked = peer_expect(&pe, 0, LG_CTRL_ACK, &ack, 5000);
        }
        CHECK_EQ(done, 1);
        CHECK_EQ(rc, ncclSuccess);
        CHECK_EQ(acked, 0);
        CHECK_EQ(ack.value, i + 1); /* this message, and nothing sent after it */
        CHECK(!memcmp(buf, payload, MSG));
        if (done != 1 || acked != 0)
            break; /* the next message would only wait out the same bounds */
    }
    peer_close(&pe);
    lg_params.poll_inline = saved_inline;
    lg_params.inline_send = saved_send;
}

int main(void)
{
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard-test", 1); /* no daemon */
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "5000", 1); /* the scripted peer is quiet */
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", "20000", 1);
    loopback_devices("lgt0", "lgt1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, NULL), ncclSuccess);
    one_at_a_time(BY_TEST);
    one_at_a_time(BY_WORKER_AFTER_TEST);
    one_at_a_time(BY_WORKER_ALONE);
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
