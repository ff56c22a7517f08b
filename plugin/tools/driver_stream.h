/* lg_nccl_driver: continuous traffic bounded by time (--duration-s) and a message cap, with
 * per-connection completion gaps stamped in CLOCK_MONOTONIC (the clock of the lab's fault
 * stamps and of the daemon's shm events), a progress line on stderr, and the classification of
 * wrong messages (duplicated, reordered, never written).
 *
 * Stream mode, per process:
 *   - every comm posts as fast as the window allows (--pace-us: a send comm's k-th post is due
 *     k * N us after the start; one that fell behind goes as soon as the window allows) until
 *     --duration-s has passed since the first post, the cap (--count) is reached or SIGUSR1
 *     arrives (a clean early end: a demo stops when its story is told); a
 *     send comm then stops posting and waits for what it posted to complete;
 *   - once all its send comms are drained, the process tells the peer over the management
 *     connection how many messages each of them sent ("F" + one u64 per connection); the peer's
 *     receives complete exactly that many, every one verified; irecvs posted beyond the final
 *     count stay in flight and are closed with the comm, as NCCL does at abort;
 *   - a plugin error or a timeout sends "X" so the peer stops at once instead of waiting for
 *     its own timeout.
 *
 * Gaps: for each comm, the interval between two consecutive completions (the first completion
 * opens the series: connection setup is not a gap). A comm that stops with messages still
 * missing gets an "open" gap from its last completion to the end of the run. Reported: a
 * histogram of all gaps, the --top-gaps largest with comm and [start, end] in monotonic ns,
 * and every gap of at least --gap-list-ms (capped; --gap-file PATH also writes each one as a
 * line "comm start_ns end_ns open", uncapped), so a benchmark can find the gap around a
 * fault injected at time T.
 *
 * Needs the main file's D, struct drv_comm, record_error() and progress_comm(). */
#ifndef LG_DRIVER_STREAM_H
#define LG_DRIVER_STREAM_H

#include <signal.h>

#define DRV_GAP_LIST_MAX 100000
#define DRV_TOP_MAX 64
#define DRV_HIST_BUCKETS 17

/* Upper bounds (ms) of the histogram's buckets; the last one is open-ended. */
static const double drv_hist_ms[DRV_HIST_BUCKETS - 1] = {
    0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

struct drv_gap {
    uint64_t start_ns, end_ns;
    int comm, open;
};

static struct {
    struct drv_gap top[DRV_TOP_MAX];
    int ntop;
    struct drv_gap list[DRV_GAP_LIST_MAX];
    int nlist;
    uint64_t list_dropped, ngaps;
    uint64_t hist[DRV_HIST_BUCKETS];
    double stop_at, end, next_progress, next_mgmt;
    int stopping, sent_final, got_final, peer_failed, peer_done;
    uint64_t final_count[DRV_MAX_CONNS]; /* peer's sends per connection */
    char rx[16 + 8 * DRV_MAX_CONNS];     /* partial management message */
    size_t rxlen;
    FILE *gapf; /* --gap-file */
} S;

static volatile sig_atomic_t drv_stop_requested;

static void drv_on_sigusr1(int sig)
{
    (void)sig;
    drv_stop_requested = 1;
}

static uint64_t drv_ns(double t) { return t > 0 ? (uint64_t)(t * 1e9 + 0.5) : 0; }

static void gap_add(struct drv_gap g)
{
    double ms = (double)(g.end_ns - g.start_ns) / 1e6;
    S.ngaps++;
    int b = 0;
    while (b < DRV_HIST_BUCKETS - 1 && ms >= drv_hist_ms[b])
        b++;
    S.hist[b]++;
    if (D.o.gap_list_ms >= 0 && ms >= D.o.gap_list_ms) {
        if (S.gapf) /* --gap-file: every listed gap, however many */
            fprintf(S.gapf, "%d %llu %llu %d\n", g.comm, (unsigned long long)g.start_ns,
                    (unsigned long long)g.end_ns, g.open);
        if (S.nlist < DRV_GAP_LIST_MAX)
            S.list[S.nlist++] = g;
        else
            S.list_dropped++;
    }
    /* Top-N, largest first (insertion). */
    int n = D.o.top_gaps;
    uint64_t len = g.end_ns - g.start_ns;
    if (n <= 0 || (S.ntop == n && S.top[n - 1].end_ns - S.top[n - 1].start_ns >= len))
        return;
    int i = S.ntop < n ? S.ntop++ : n - 1;
    while (i > 0 && S.top[i - 1].end_ns - S.top[i - 1].start_ns < len) {
        S.top[i] = S.top[i - 1];
        i--;
    }
    S.top[i] = g;
}

/* Called on every completion (both modes), with the completion's time. */
static void gap_record(struct drv_comm *m, double now)
{
    if (m->t_last_c > 0) {
        double gap = now - m->t_last_c;
        if (gap > m->max_gap_c)
            m->max_gap_c = gap;
        gap_add((struct drv_gap){drv_ns(m->t_last_c), drv_ns(now), (int)(m - D.comms), 0});
    } else {
        m->t_first_c = now;
    }
    m->t_last_c = now;
}

/* At the end of a run: comms that still miss messages get an open gap up to `end`. */
static void gap_close_open(double end)
{
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        if (m->completed >= m->limit || !m->comm)
            continue;
        double from = m->t_last_c > 0 ? m->t_last_c : D.t_start;
        if (end > from) {
            if (end - from > m->max_gap_c)
                m->max_gap_c = end - from;
            gap_add((struct drv_gap){drv_ns(from), drv_ns(end), i, 1});
        }
    }
}

/* The pattern a send fills in: its own index, except where --corrupt-kind breaks the stream
 * on purpose so that a test can prove the receiver notices. */
static uint64_t drv_send_index(const struct drv_comm *m)
{
    uint64_t i = m->posted, at = D.o.corrupt_at;
    if (m->conn != 0 || D.o.corrupt < 2 || i < at)
        return i;
    switch (D.o.corrupt) {
    case 2: return i == at && at > 0 ? i - 1 : i;      /* dup: message at-1 again */
    case 3: return i == at ? i + 1 : i == at + 1 ? at : i; /* swap at and at+1 */
    default: return i + 1;                              /* drop: index `at` never sent */
    }
}

/* ---- wrong messages: what the buffer holds instead ------------------------------------ */

static uint64_t drv_poison(uint64_t key) { return ~key ^ 0x504f49534f4e2121ull; /* "POISON!!" */ }

/* Before an irecv: mark word 0 so that a completion without data is recognised. */
static void drv_poison_slot(struct drv_comm *m, char *b)
{
    if (D.o.no_verify || D.o.size < 8)
        return;
    uint64_t w = drv_poison(drv_key(m->conn, m->dir, m->posted));
    memcpy(b, &w, 8);
}

/* A received message failed the check: is it another message of this connection (an earlier
 * one again: duplicated; a later one: reordered, or the one expected was lost), or nothing
 * written at all? Returns a word for the log line. */
static const char *drv_classify(struct drv_comm *m, const char *b, uint64_t msg)
{
    if (D.o.size < 8)
        return "corrupt";
    uint64_t w0;
    memcpy(&w0, b, 8);
    if (w0 == drv_poison(drv_key(m->conn, m->dir, msg))) {
        D.unwritten++;
        return "never written (completed without data)";
    }
    uint64_t lo = msg > 256 ? msg - 256 : 0;
    for (uint64_t j = lo; j < msg + 256; j++) {
        if (j == msg)
            continue;
        uint64_t k = drv_key(m->conn, m->dir, j);
        if ((w0 ^ D.pat.base[0]) != k)
            continue;
        int whole = drv_verify(&D.pat, b, D.o.size, k) < 0;
        if (j < msg) {
            D.duplicated++;
            return whole ? "duplicate of an earlier message" : "partly an earlier message";
        }
        D.reordered++;
        return whole ? "a later message (reordered, or this one was lost)"
                     : "partly a later message";
    }
    return "corrupt";
}

/* ---- management messages during a stream ---------------------------------------------- */

static int drv_send_final(int mfd, double deadline)
{
    uint8_t msg[1 + 4 + 8 * DRV_MAX_CONNS];
    uint32_t n = (uint32_t)D.o.conns;
    msg[0] = 'F';
    memcpy(msg + 1, &n, 4);
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        if (m->send)
            memcpy(msg + 5 + 8 * (size_t)m->conn, &m->posted, 8);
    }
    return drv_io(mfd, msg, 5 + 8 * (size_t)n, 1, deadline);
}

static void drv_send_abort(int mfd)
{
    char x = 'X';
    (void)!send(mfd, &x, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Non-blocking: reads what the peer sent; sets S.got_final / S.peer_failed. Only "F" and "X"
 * are consumed: any other byte is the peer's barrier token (it has finished its run), left in
 * the socket for the barrier. */
static void drv_poll_mgmt(int mfd)
{
    if (S.peer_done)
        return;
    for (;;) {
        if (S.rxlen == 0) {
            char c;
            ssize_t n = recv(mfd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
            if (n == 0) {
                S.peer_failed = 1; /* peer closed the management connection */
                return;
            }
            if (n < 0)
                return; /* EAGAIN: nothing yet */
            if (c != 'F' && c != 'X') {
                S.peer_done = 1;
                return;
            }
        }
        size_t want = 1;
        if (S.rxlen >= 1 && S.rx[0] == 'F')
            want = 5 + 8 * (size_t)D.o.conns;
        if (S.rxlen < want) {
            ssize_t n = recv(mfd, S.rx + S.rxlen, want - S.rxlen, MSG_DONTWAIT);
            if (n == 0) {
                S.peer_failed = 1; /* peer closed the management connection */
                return;
            }
            if (n < 0)
                return; /* EAGAIN: nothing yet */
            S.rxlen += (size_t)n;
            continue;
        }
        if (S.rx[0] == 'X') {
            S.peer_failed = 1;
            return;
        }
        uint32_t n;
        memcpy(&n, S.rx + 1, 4);
        for (uint32_t c = 0; c < n && c < DRV_MAX_CONNS; c++)
            memcpy(&S.final_count[c], S.rx + 5 + 8 * (size_t)c, 8);
        S.got_final = 1;
        S.rxlen = 0;
        for (int i = 0; i < D.ncomms; i++) {
            struct drv_comm *m = &D.comms[i];
            if (!m->send)
                m->limit = S.final_count[m->conn] < m->limit ? S.final_count[m->conn]
                                                               : m->limit;
        }
        return;
    }
}

/* ---- progress line ---------------------------------------------------------------------- */

static void drv_progress_line(double now, const char *what)
{
    double stall = 0;
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        if (m->completed >= m->limit)
            continue;
        double from = m->t_last_c > 0 ? m->t_last_c : D.t_start;
        if (now - from > stall)
            stall = now - from;
    }
    fprintf(stderr,
            "lg_nccl_driver: %s t=%.6f elapsed=%.3f sent_bytes=%llu received_bytes=%llu "
            "completions=%llu max_gap_ms=%.3f stall_ms=%.3f corrupt=%llu\n",
            what, now, now - D.t_start, (unsigned long long)D.bytes_sent,
            (unsigned long long)D.bytes_recv, (unsigned long long)D.completions,
            D.max_gap * 1e3, stall * 1e3, (unsigned long long)D.corrupt);
}

/* ---- the run loop ----------------------------------------------------------------------- */

static int drv_any_send(void)
{
    for (int i = 0; i < D.ncomms; i++)
        if (D.comms[i].send)
            return 1;
    return 0;
}

/* Sends stopped, drained and announced; receives complete up to the peer's final counts. */
static int drv_all_done(void)
{
    if (drv_any_send() && (!S.stopping || !S.sent_final))
        return 0;
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        if (!m->send && !S.got_final)
            return 0;
        if (m->completed < m->limit)
            return 0;
    }
    return 1;
}

static int drv_sends_drained(void)
{
    for (int i = 0; i < D.ncomms; i++)
        if (D.comms[i].send && D.comms[i].completed < D.comms[i].posted)
            return 0;
    return 1;
}

static void stream_run(int mfd, double deadline)
{
    struct drv_opts *o = &D.o;
    if (o->gap_file && !(S.gapf = fopen(o->gap_file, "w"))) {
        D.failure = "cannot write the --gap-file";
        drv_send_abort(mfd);
        return;
    }
    D.t_start = drv_now();
    S.stop_at = D.t_start + o->duration;
    S.next_progress = D.t_start + o->progress_ms / 1e3;
    unsigned spins = 0;
    for (;;) {
        double now = drv_now();
        if (!S.stopping && (now >= S.stop_at || drv_stop_requested)) {
            S.stopping = 1;
            for (int i = 0; i < D.ncomms; i++)
                if (D.comms[i].send)
                    D.comms[i].limit = D.comms[i].posted;
            if (o->progress_ms > 0)
                drv_progress_line(now, "stopping");
        }
        int moved = 0;
        for (int i = 0; i < D.ncomms; i++) {
            struct drv_comm *m = &D.comms[i];
            if (o->pace_us > 0 && m->send && !S.stopping && m->posted < m->limit) {
                /* Pacing: post k is due k paces after the start, and a pass posts only what
                 * is due (not the whole window once the first is: that sent `depth` messages
                 * back to back every `depth` paces); completions always. */
                uint64_t due = (uint64_t)((now - D.t_start) / (o->pace_us * 1e-6)) + 1;
                uint64_t keep = m->limit;
                if (m->limit > due)
                    m->limit = due;
                int r = progress_comm(m);
                m->limit = keep;
                if (r < 0)
                    goto failed;
                moved |= r;
                continue;
            }
            int r = progress_comm(m);
            if (r < 0)
                goto failed;
            moved |= r;
        }
        /* A send comm that hit the cap stops like at the end of the duration. */
        if (!S.stopping) {
            int capped = 1;
            for (int i = 0; i < D.ncomms; i++)
                if (D.comms[i].send && D.comms[i].posted < D.comms[i].limit)
                    capped = 0;
            if (capped && drv_any_send()) {
                S.stopping = 1;
                for (int i = 0; i < D.ncomms; i++)
                    if (D.comms[i].send)
                        D.comms[i].limit = D.comms[i].posted;
            }
        }
        if (S.stopping && !S.sent_final && drv_any_send() && drv_sends_drained()) {
            if (drv_send_final(mfd, deadline) != 0) {
                D.failure = "peer vanished (management connection)";
                goto out;
            }
            S.sent_final = 1;
        }
        if (!moved || now >= S.next_mgmt) {
            drv_poll_mgmt(mfd);
            S.next_mgmt = now + 0.001;
            if (S.peer_failed && !drv_all_done()) {
                if (!D.failure)
                    D.failure = "the peer failed (see its report)";
                goto out;
            }
        }
        if (drv_all_done())
            break;
        if (o->progress_ms > 0 && now >= S.next_progress) {
            drv_progress_line(now, "progress");
            S.next_progress += o->progress_ms / 1e3;
            if (S.next_progress < now)
                S.next_progress = now + o->progress_ms / 1e3;
        }
        if (!moved) {
            if (o->idle_us > 0) /* --idle-us: sleep instead of spinning (shared CPUs) */
                nanosleep(&(struct timespec){0, (long)(o->idle_us * 1000)}, NULL);
            else
                sched_yield();
            if ((++spins & 255) == 0 && drv_now() > deadline) {
                D.failure = "timed out with messages missing";
                drv_send_abort(mfd);
                goto out;
            }
        }
    }
out:
    S.end = drv_now();
    gap_close_open(S.end);
    if (S.gapf)
        fclose(S.gapf), S.gapf = NULL;
    if (o->progress_ms > 0)
        drv_progress_line(S.end, "end");
    return;
failed:
    drv_send_abort(mfd);
    goto out;
}

/* Stream mode closes receive comms first (their irecvs posted beyond the peer's final count
 * are still in flight: closed by their owner, as NCCL does at abort), then, after one more
 * barrier, the send comms: so no side sees its peer vanish under requests in flight. */
static void stream_close_receives(int mfd)
{
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        ncclResult_t rc;
        if (m->send || !m->comm)
            continue;
        if (m->mh && (rc = drv_dereg_mr(&D.net, m->comm, m->mh)) != ncclSuccess)
            record_error("deregMr", rc, m->conn);
        if ((rc = drv_close_recv(&D.net, m->comm)) != ncclSuccess)
            record_error("closeRecv", rc, m->conn);
        m->comm = NULL;
        free(m->buf);
        m->buf = NULL;
    }
    char tok = 'C', ptok = 0;
    double bdl = drv_now() + 5;
    if (drv_io(mfd, &tok, 1, 1, bdl) == 0)
        (void)drv_io(mfd, &ptok, 1, 0, bdl);
}

/* ---- report ----------------------------------------------------------------------------- */

static uint64_t stream_expected(void)
{
    uint64_t e = 0;
    for (int i = 0; i < D.ncomms; i++) {
        struct drv_comm *m = &D.comms[i];
        /* A receive without the peer's final count expects what it posted. */
        e += !m->send && !S.got_final ? m->posted : m->limit;
    }
    return e;
}

static void print_gap(const struct drv_gap *g)
{
    const struct drv_comm *m = &D.comms[g->comm];
    printf("{\"comm\": %d, \"conn\": %d, \"dir\": %d, \"send\": %s, \"start_ns\": %llu, "
           "\"end_ns\": %llu, \"ms\": %.3f, \"open\": %s}",
           g->comm, m->conn, m->dir, m->send ? "true" : "false",
           (unsigned long long)g->start_ns, (unsigned long long)g->end_ns,
           (double)(g->end_ns - g->start_ns) / 1e6, g->open ? "true" : "false");
}

/* The fields added by this file, each followed by ", " (printed before "ok"). */
static void stream_report_json(void)
{
    struct drv_opts *o = &D.o;
    printf("\"mode\": \"%s\", \"duration_s\": %.3f, \"pace_us\": %.1f, \"idle_us\": %d, "
           "\"t_start_ns\": %llu, "
           "\"t_end_ns\": %llu, \"t_last_ns\": %llu, \"duplicated_messages\": %llu, "
           "\"reordered_messages\": %llu, \"unwritten_messages\": %llu, ",
           o->duration > 0 ? "duration" : o->pingpong ? "pingpong" : "count", o->duration,
           o->pace_us, o->idle_us, (unsigned long long)drv_ns(D.t_start),
           (unsigned long long)drv_ns(S.end > 0 ? S.end : D.t_last),
           (unsigned long long)drv_ns(D.t_last), (unsigned long long)D.duplicated,
           (unsigned long long)D.reordered, (unsigned long long)D.unwritten);
    printf("\"peer_final_counts\": ");
    if (S.got_final) {
        printf("[");
        for (int c = 0; c < o->conns; c++)
            printf("%s%llu", c ? ", " : "", (unsigned long long)S.final_count[c]);
        printf("], ");
    } else {
        printf("null, ");
    }
    printf("\"comms\": [");
    for (int i = 0; i < D.ncomms; i++) {
        const struct drv_comm *m = &D.comms[i];
        printf("%s{\"comm\": %d, \"conn\": %d, \"dir\": %d, \"send\": %s, \"posted\": %llu, "
               "\"completed\": %llu, \"expected\": %llu, \"max_gap_ms\": %.3f, "
               "\"first_ns\": %llu, \"last_ns\": %llu}",
               i ? ", " : "", i, m->conn, m->dir, m->send ? "true" : "false",
               (unsigned long long)m->posted, (unsigned long long)m->completed,
               (unsigned long long)(!m->send && o->duration > 0 && !S.got_final ? m->posted
                                                                                : m->limit),
               m->max_gap_c * 1e3, (unsigned long long)drv_ns(m->t_first_c),
               (unsigned long long)drv_ns(m->t_last_c));
    }
    printf("], \"gaps\": {\"count\": %llu, \"histogram_ms\": {\"le\": [",
           (unsigned long long)S.ngaps);
    for (int b = 0; b < DRV_HIST_BUCKETS - 1; b++)
        printf("%s%g", b ? ", " : "", drv_hist_ms[b]);
    printf(", null], \"counts\": [");
    for (int b = 0; b < DRV_HIST_BUCKETS; b++)
        printf("%s%llu", b ? ", " : "", (unsigned long long)S.hist[b]);
    printf("]}, \"top\": [");
    for (int i = 0; i < S.ntop; i++) {
        printf("%s", i ? ", " : "");
        print_gap(&S.top[i]);
    }
    printf("], \"list_min_ms\": %.3f, \"list_dropped\": %llu, \"file\": ", o->gap_list_ms,
           (unsigned long long)S.list_dropped);
    if (o->gap_file)
        printf("\"%s\", ", o->gap_file);
    else
        printf("null, ");
    printf("\"list\": [");
    for (int i = 0; i < S.nlist; i++)
        printf("%s[%d, %llu, %llu%s]", i ? ", " : "", S.list[i].comm,
               (unsigned long long)S.list[i].start_ns, (unsigned long long)S.list[i].end_ns,
               S.list[i].open ? ", 1" : "");
    printf("]}, ");
}

#endif
