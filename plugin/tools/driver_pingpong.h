/* lg_nccl_driver --pingpong: one message at a time each way through the plugin. The client
 * sends message i and waits for the server's reply i (same size); the server replies as soon
 * as message i is complete. comms[0] sends, comms[1] receives (setup() with --bidir, one
 * connection, two slots per comm so that the server's next receive is posted before its reply
 * completes, as NCCL posts receives ahead).
 *
 * Timed on the client, per round trip, from just before isend (its irecv already posted):
 *   rtt_us   until both its send and the reply are reported done by test() (a round is over
 *            when both buffers may be reused: the send's completion counts);
 *   reply_us until the reply is done, whatever the send's state.
 * The first --warmup round trips are not recorded. Every message carries the driver's pattern
 * for its index and direction and is checked on arrival (unless --no-verify; --corrupt flips a
 * byte of the sender's message count/2): on the client outside the timed window, on the server
 * after its reply completed, while the client checks that reply. The lg_tcp_pingpong tool does
 * the same over a plain socket for the baseline.
 * Needs the main file's D, drv_* and completed(). */
#ifndef LG_DRIVER_PINGPONG_H
#define LG_DRIVER_PINGPONG_H

#include "driver_rtt.h"

static struct rtt_series pp_rtt, pp_reply;

/* Posts one request, retrying while the plugin applies back-pressure (a NULL request). */
static int pp_post(struct drv_comm *m, int slot, void **req, double deadline)
{
    char *buf = m->buf + (size_t)slot * m->slot_bytes;
    *req = NULL;
    while (!*req) {
        ncclResult_t rc = m->send ? drv_isend(&D.net, m->comm, buf, D.o.size, 0, m->mh, req)
                                  : drv_irecv(&D.net, m->comm, buf, m->slot_bytes, 0, m->mh,
                                              0, req);
        if (rc != ncclSuccess) {
            record_error(m->send ? "isend" : "irecv", rc, 0);
            return -1;
        }
        if (!*req && drv_now() > deadline) {
            D.failure = "timed out posting a round trip";
            return -1;
        }
    }
    m->posted++;
    return 0;
}

/* One test() of a request not yet done; a completion is counted and its size checked. */
static int pp_test(struct drv_comm *m, void *req, int *done)
{
    int size = -1;
    ncclResult_t rc = drv_test(&D.net, req, done, &size);
    if (rc != ncclSuccess) {
        record_error("test", rc, 0);
        return -1;
    }
    if (*done) {
        if (size != (int)D.o.size)
            D.mismatched++;
        completed(m, drv_now());
    }
    return 0;
}

/* Polls a send and a receive (either may be NULL) until both are done, like NCCL's proxy:
 * spinning on test(), yielding the CPU now and then. `reply_at` gets the receive's time. */
static int pp_wait(void *sreq, void *rreq, double deadline, double *reply_at)
{
    struct drv_comm *s = &D.comms[0], *r = &D.comms[1];
    int sdone = !sreq, rdone = !rreq;
    unsigned spins = 0;
    while (!(sdone && rdone)) {
        if (!sdone && pp_test(s, sreq, &sdone))
            return -1;
        if (!rdone) {
            if (pp_test(r, rreq, &rdone))
                return -1;
            if (rdone && reply_at)
                *reply_at = r->t_last_c;
        }
        if ((++spins & 255) == 0) {
            sched_yield();
            if (drv_now() > deadline) {
                D.failure = "timed out in a round trip";
                return -1;
            }
        }
    }
    return 0;
}

static void pp_fill(struct drv_comm *s, int slot, uint64_t msg)
{
    if (D.o.no_verify)
        return;
    char *b = s->buf + (size_t)slot * s->slot_bytes;
    drv_fill(&D.pat, b, D.o.size, drv_key(0, s->dir, msg));
    if (D.o.corrupt && msg == D.o.corrupt_at && D.o.size)
        b[D.o.size / 2] ^= 0x5a;
}

static void pp_check(struct drv_comm *r, int slot, uint64_t msg)
{
    if (D.o.no_verify)
        return;
    long long bad = drv_verify(&D.pat, r->buf + (size_t)slot * r->slot_bytes, D.o.size,
                               drv_key(0, r->dir, msg));
    if (bad >= 0) {
        if (D.corrupt < 5)
            fprintf(stderr, "lg_nccl_driver: round trip %llu: wrong byte at %lld\n",
                    (unsigned long long)msg, bad);
        D.corrupt++;
    }
}

static void run_pingpong(double deadline)
{
    struct drv_comm *s = &D.comms[0], *r = &D.comms[1];
    uint64_t total = D.o.warmup + D.o.count;
    void *sreq, *rreq, *next = NULL;
    pp_rtt.warmup = pp_reply.warmup = D.o.warmup;
    D.t_start = drv_now();
    if (D.o.server) {
        pp_fill(s, 0, 0);
        if (pp_post(r, 0, &next, deadline))
            return;
    }
    for (uint64_t i = 0; i < total; i++) {
        int slot = (int)(i & 1);
        if (D.o.server) {
            rreq = next;
            if (pp_wait(NULL, rreq, deadline, NULL) || pp_post(s, slot, &sreq, deadline))
                return;
            if (i + 1 < total && pp_post(r, !slot, &next, deadline))
                return;
            if (pp_wait(sreq, NULL, deadline, NULL))
                return;
            pp_check(r, slot, i);
            pp_fill(s, !slot, i + 1);
        } else {
            pp_fill(s, slot, i);
            if (pp_post(r, slot, &rreq, deadline))
                return;
            double t0 = drv_now(), reply_at = 0;
            if (pp_post(s, slot, &sreq, deadline) || pp_wait(sreq, rreq, deadline, &reply_at))
                return;
            double t1 = drv_now();
            if (i >= D.o.warmup) {
                rtt_add(&pp_rtt, t1 - t0);
                rtt_add(&pp_reply, reply_at - t0);
            }
            pp_check(r, slot, i);
        }
        D.bytes_sent += D.o.size;
        D.bytes_recv += D.o.size;
    }
}

/* The report's round-trip fields (client: samples; server: null). */
static void pingpong_report_json(void)
{
    char rtt[256], reply[256];
    rtt_json(&pp_rtt, rtt, sizeof(rtt));
    rtt_json(&pp_reply, reply, sizeof(reply));
    printf("\"warmup\": %llu, \"rtt_us\": %s, \"reply_us\": %s, ",
           (unsigned long long)D.o.warmup, rtt, reply);
}

#endif
