/* lg_nccl_driver: small-message round trips, through the plugin (--pingpong) and over a plain
 * TCP socket on the same rail (--tcp-pingpong ADDR:PORT) for the baseline. The client times
 * each round trip; the server echoes. Needs the main file's D, drv_* and completed(). */
#ifndef LG_DRIVER_PINGPONG_H
#define LG_DRIVER_PINGPONG_H

#include <netinet/tcp.h>

static double drv_rtt[1 << 20];
static uint64_t drv_nrtt;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentiles of the client's round trips, in microseconds, as a JSON object. */
static void rtt_json(char *out, size_t len)
{
    if (!drv_nrtt) {
        snprintf(out, len, "null");
        return;
    }
    qsort(drv_rtt, drv_nrtt, sizeof(double), cmp_double);
    double sum = 0;
    for (uint64_t i = 0; i < drv_nrtt; i++)
        sum += drv_rtt[i];
    snprintf(out, len, "{\"n\": %llu, \"min\": %.2f, \"p50\": %.2f, \"p99\": %.2f, "
             "\"mean\": %.2f}",
             (unsigned long long)drv_nrtt, drv_rtt[0] * 1e6, drv_rtt[drv_nrtt / 2] * 1e6,
             drv_rtt[(drv_nrtt * 99) / 100] * 1e6, sum / (double)drv_nrtt * 1e6);
}

/* Polls a request to completion like NCCL's proxy (yielding when idle). */
static int pp_wait(void *req, const char *call, int conn, double deadline)
{
    int done = 0, size = 0;
    unsigned spins = 0;
    while (!done) {
        ncclResult_t rc = drv_test(&D.net, req, &done, &size);
        if (rc != ncclSuccess) {
            record_error(call, rc, conn);
            return -1;
        }
        if (!done && (++spins & 255) == 0) {
            sched_yield();
            if (drv_now() > deadline) {
                D.failure = "timed out in a round trip";
                return -1;
            }
        }
    }
    return size;
}

/* Through the plugin: comms[0] sends, comms[1] receives (setup() with --bidir, 1 conn). */
static void run_pingpong(double deadline)
{
    struct drv_comm *s = &D.comms[0], *r = &D.comms[1];
    size_t size = D.o.size;
    D.t_start = drv_now();
    for (uint64_t i = 0; i < D.o.count; i++) {
        void *rreq = NULL, *sreq = NULL;
        double t0 = drv_now();
        ncclResult_t rc;
        while (!rreq)
            if ((rc = drv_irecv(&D.net, r->comm, r->buf, r->slot_bytes, 0, r->mh, 0, &rreq))) {
                record_error("irecv", rc, 0);
                return;
            }
        if (!D.o.server) {
            while (!sreq)
                if ((rc = drv_isend(&D.net, s->comm, s->buf, size, 0, s->mh, &sreq))) {
                    record_error("isend", rc, 0);
                    return;
                }
            if (pp_wait(sreq, "test", 0, deadline) < 0)
                return;
            completed(s, drv_now());
        }
        if (pp_wait(rreq, "test", 0, deadline) < 0)
            return;
        completed(r, drv_now());
        D.bytes_recv += size;
        if (D.o.server) {
            while (!sreq)
                if ((rc = drv_isend(&D.net, s->comm, r->buf, size, 0, s->mh, &sreq))) {
                    record_error("isend", rc, 0);
                    return;
                }
            if (pp_wait(sreq, "test", 0, deadline) < 0)
                return;
            completed(s, drv_now());
        } else if (drv_nrtt < sizeof(drv_rtt) / sizeof(drv_rtt[0])) {
            drv_rtt[drv_nrtt++] = drv_now() - t0;
        }
        D.bytes_sent += size;
    }
}

/* Plain TCP baseline between the same addresses: blocking, TCP_NODELAY. */
static void run_tcp_pingpong(const char *addr, double deadline)
{
    int fd = drv_mgmt_open(addr, D.o.server, deadline);
    if (fd < 0) {
        D.failure = "tcp ping-pong connection failed";
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char *buf = calloc(1, D.o.size ? D.o.size : 1);
    D.t_start = drv_now();
    for (uint64_t i = 0; i < D.o.count && buf; i++) {
        double t0 = drv_now();
        if (!D.o.server && drv_io(fd, buf, D.o.size, 1, deadline) != 0)
            break;
        if (drv_io(fd, buf, D.o.size, 0, deadline) != 0)
            break;
        if (D.o.server && drv_io(fd, buf, D.o.size, 1, deadline) != 0)
            break;
        if (!D.o.server && drv_nrtt < sizeof(drv_rtt) / sizeof(drv_rtt[0]))
            drv_rtt[drv_nrtt++] = drv_now() - t0;
        D.bytes_sent += D.o.size;
        D.bytes_recv += D.o.size;
        D.completions += 2;
        D.t_last = drv_now();
    }
    if (D.completions != 2 * D.o.count)
        D.failure = "tcp ping-pong broke off";
    free(buf);
    close(fd);
}

#endif
