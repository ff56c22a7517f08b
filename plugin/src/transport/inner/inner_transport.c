/* The inner transport's ops table (inner_transport.h): a path's data goes through one
 * inner-plugin comm (inner_endpoint.c: handshakes, the data pump, fences, registrations,
 * flushes) over the inner plugin the process loaded (inner_dev.c). Here: the table, the
 * receiver's progress watchdog, the sender's goodput health (completion rates), its POSTED
 * and DELIVERED frames, and the commit hooks. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/devices.h"
#include "daemon/verdict.h"
#include "proto/upcall.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "transport/inner/inner_dev.h"
#include "transport/inner/inner_endpoint.h"
#include "transport/inner/inner_transport.h"
#include "transport/inner/rate.h"

static int inner_nstreams(void)
{
    return 1; /* one idle data socket per path keeps the hello format (nstreams >= 1) */
}

static ncclResult_t inner_reg_mr(struct lg_conn *c, void *data, size_t size, int type,
                                 uint64_t offset, int fd, struct lg_inner_mr **out)
{
    const int dev = lg_inner_ep(lg_conn_ep(c))->dev;
    const int ptr = lg_inner_devs->props[dev].ptrSupport;
    *out = NULL;
    if (!(type & ptr) || (fd >= 0 && !(ptr & NCCL_PTR_DMABUF))) {
        LG_WARN("%s: memory type %d is not supported by dev %d (ptrSupport 0x%x)",
                fd >= 0 ? "regMrDmaBuf" : "regMr", type, dev, ptr);
        return ncclInternalError;
    }
    /* with the inner comm of every path, now and after rebuilds */
    return lg_inner_ep_reg_mr(c, data, size, type, offset, fd, out);
}

/* ---- its own objects (inner_conn.h) ------------------------------------------------------- */

static int inner_open(struct lg_conn *c, struct lg_endpoint **out)
{
    struct lg_inner_conn *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    struct lg_conn_facts f = lg_conn_facts(c);
    e->send = f.send;
    e->dev = f.dev;
    e->nonce = f.nonce;
    pthread_mutex_init(&e->wmu, NULL);
    pthread_mutex_init(&e->mr_mu, NULL);
    *out = (struct lg_endpoint *)e;
    return 0;
}

static void inner_release(struct lg_endpoint *ep)
{
    struct lg_inner_conn *e = lg_inner_ep(ep);
    if (!e)
        return;
    while (e->mrs) { /* NCCL deregisters before it closes; this is a leak guard */
        struct lg_inner_mr *mr = e->mrs;
        e->mrs = mr->next;
        lg_inner_mr_dereg(lg_inner_devs->in, mr);
    }
    pthread_mutex_destroy(&e->wmu);
    pthread_mutex_destroy(&e->mr_mu);
    free(e);
}

/* Every path object starts with no inner comm: a rebuilt path is a new object (inner_conn.h). */
static int inner_path_open(struct lg_path *p, struct lg_ep_path **out)
{
    (void)p;
    struct lg_inner_path *w = calloc(1, sizeof(*w));
    *out = (struct lg_ep_path *)w;
    return w ? 0 : -1;
}

static void inner_path_close(struct lg_ep_path *tp)
{
    free(tp); /* its comm and handshake went with its fence */
}

static int inner_recv_prepare(struct lg_conn *c, struct lg_req *r, size_t maxcap)
{
    (void)c;
    (void)r;
    (void)maxcap;
    return 0; /* the inner plugin places whole messages: no coverage to track */
}

/* ---- goodput health: completion rates (rate.h) -------------------------------------------- */

/* A {tag, value} pair one thread writes and another reads without a lock (a seqlock: the tag
 * is 0 while the value changes, so a reader that finds the tag it wants on both sides of its
 * read got that tag's value). */
static void pair_put(uint64_t *t, uint64_t tag, uint64_t v)
{
    __atomic_store_n(&t[0], 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&t[1], v, __ATOMIC_RELAXED);
    __atomic_store_n(&t[0], tag, __ATOMIC_RELEASE);
}

static int pair_get(const uint64_t *t, uint64_t tag, uint64_t *v)
{
    uint64_t before = __atomic_load_n(&t[0], __ATOMIC_ACQUIRE);
    *v = __atomic_load_n(&t[1], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return before == tag && __atomic_load_n(&t[0], __ATOMIC_RELAXED) == tag;
}

/* NCCL's thread, sender: when it last saw a send unfinished, on the coarse clock (no
 * syscall, a few ms of grain: drained moments are weighed against 400 ms windows; this runs
 * on every test() of an unfinished send). */
static uint64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void note_busy(struct lg_conn *c, struct lg_inner_conn *e, uint64_t now)
{
    if (__atomic_load_n(&e->busy_ns, __ATOMIC_RELAXED) != now)
        __atomic_store_n(&e->busy_ns, now, __ATOMIC_RELAXED);
    lg_conn_note_polled(c); /* NCCL polls: completions are seen */
}

/* NCCL's thread, sender: the bytes posted before each message, so that the monitor can turn
 * a count of completed messages into bytes (the slot of a message not yet acknowledged is
 * not reused); and a post that finds everything acknowledged ends a drained moment, whose
 * length (since a send was last seen unfinished) the monitor leaves out of the rate. */
static void account_send(struct lg_conn *c, struct lg_inner_conn *e, uint64_t seq, size_t size)
{
    uint64_t now = coarse_ns(), busy = __atomic_load_n(&e->busy_ns, __ATOMIC_RELAXED);
    if (seq == lg_conn_acked(c) && busy && now > busy)
        __atomic_store_n(&e->idle_ns, __atomic_load_n(&e->idle_ns, __ATOMIC_RELAXED) +
                                          (now - busy), __ATOMIC_RELEASE);
    note_busy(c, e, now);
    uint64_t bytes = __atomic_load_n(&e->bytes[1], __ATOMIC_RELAXED); /* only we write it */
    pair_put(e->req[seq % LG_WINDOW].before, seq + 1, bytes);
    pair_put(e->bytes, seq + 2, bytes + size); /* last: this post is accounted (idle too) */
}

/* Monitor: whether the newest of `posted` messages is accounted, its drained moment included
 * (NCCL's thread publishes a post before it accounts it). */
static int accounted(const struct lg_inner_conn *e, uint64_t posted)
{
    uint64_t bytes;
    return posted == 0 || pair_get(e->bytes, posted + 1, &bytes);
}

/* Monitor: the bytes of messages 0 .. n - 1, or -1 when message n - 1 is still being
 * accounted (look again at the next run). */
static int bytes_before(const struct lg_inner_conn *e, uint64_t n, uint64_t *out)
{
    *out = 0;
    if (n == 0 || pair_get(e->bytes, n + 1, out))
        return 0;
    return pair_get(e->req[n % LG_WINDOW].before, n + 1, out) ? 0 : -1;
}

/* A window is judged only if the monitor looked at least this often: it runs a connection
 * once a heartbeat, or every 4 while nothing is in flight (failover.c), so twice that without
 * a look means its runs were late (a late run judges nothing) or this process was starved,
 * and what completed meanwhile says nothing about the path. */
#define LG_RATE_LOOK_GAP_HEARTBEATS 8

/* Sender, the active path in slot i: one look at its window. The window runs while the
 * sender works the path: at every look with messages unacknowledged, NCCL polled since the
 * last look (inner completions are seen by its test() calls), no switch is under way and the
 * peer is heard; any such look that finds otherwise starts it again. A look that finds
 * everything acknowledged neither judges nor restarts: how long the connection stayed
 * drained is summed by NCCL's thread when it posts again (account_send) and left out of the
 * rate, so an application that drains now and then (its pace) still gets its windows. */
static void rate_look(struct lg_conn *c, int i, struct lg_path *p, uint64_t now)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    struct lg_inner_rate *w = &e->rate[i];
    uint64_t posted = lg_conn_posted(c);
    uint64_t acked = lg_conn_acked(c), done;
    if (bytes_before(e, acked, &done) != 0 || !accounted(e, posted))
        return; /* NCCL's thread is accounting a post: look again at the next run */
    uint64_t idle = __atomic_load_n(&e->idle_ns, __ATOMIC_ACQUIRE);
    int polled = lg_conn_take_polled(c);
    uint32_t gen = lg_path_id(p).gen;
    int fresh = w->path != p || w->gen != gen;
    uint64_t gap = LG_RATE_LOOK_GAP_HEARTBEATS * LG_MS(lg_params.heartbeat_ms);
    if (fresh)
        w->rate.strikes = 0; /* a new path: its windows start a new run */
    if (posted == acked && !fresh && w->t0 && now - w->seen_ns <= gap) {
        w->seen_ns = now; /* drained: its length is summed when NCCL posts again */
        return;
    }
    int busy = posted > acked && polled && lg_send_steady(c) && lg_inner_ep_carries(p) &&
               lg_path_heard(p, now);
    if (fresh || !w->t0 || !busy || now - w->seen_ns > gap) {
        /* (re)start: from this look on, if it is backlogged */
        w->path = p;
        w->gen = gen;
        w->t0 = busy ? now : 0;
        w->bytes0 = done;
        w->idle0 = idle;
        w->seen_ns = now;
        return;
    }
    w->seen_ns = now;
    if (now - w->t0 < LG_MS(lg_params.gray_window_ms))
        return;
    const struct lg_device *d = lg_device_get(e->dev); /* its speed: the primary NIC's */
    struct lg_rate_cfg cfg = {.slow_pct = (unsigned)lg_params.gray_slow_pct,
                              .min_bytes = (uint64_t)lg_params.gray_min_bytes,
                              .line_Bps = d && d->speed_mbps > 0 ? (uint64_t)d->speed_mbps * 125000
                                                                 : 0}; /* Mbit/s -> B/s */
    struct lg_rate_window win = {.bytes = done - w->bytes0, .ns = now - w->t0,
                                 .idle_ns = idle - w->idle0};
    uint64_t rate, expected;
    unsigned learnt = w->rate.learnt;
    enum lg_rate_verdict v = lg_rate_judge(&w->rate, &win, &cfg, &rate, &expected);
    w->t0 = now; /* the next window follows on */
    w->bytes0 = done;
    w->idle0 = idle;
    if (learnt < LG_RATE_WARMUP && w->rate.learnt == LG_RATE_WARMUP) /* once per slot */
        LG_INFO(NCCL_NET, "send conn %016llx: %s path on NIC %s: healthy baseline %.1f MB/s "
                "(%d backlogged windows of %lld ms); slow below %d %% of it",
                (unsigned long long)e->nonce, lg_slot_name(i), lg_path_nic(p),
                w->rate.base_Bps / 1e6,
                LG_RATE_WARMUP, (long long)lg_params.gray_window_ms, (int)lg_params.gray_slow_pct);
    if (v == LG_RATE_SLOW)
        lg_gray_hold(c, i, now, &(struct lg_gray_found){.kind = LG_VERDICT_SLOW,
                                                       .rate_Bps = rate,
                                                       .expected_Bps = expected});
}

/* Sender: goodput health from the inner plugin's completions (its flows are not ours to
 * read): the active path's completion rate against its own baseline; a slow path is held off
 * like a lossy one (gray.h), and a held-off standby like one of the TCP transport's. */
static void inner_goodput(struct lg_conn *c, uint64_t now)
{
    if (!lg_params.gray_slow_pct)
        return;
    struct lg_path *active = lg_conn_committed(c);
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = lg_conn_path(c, i);
        if (!lg_path_is_up(p))
            continue;
        if (p == active)
            rate_look(c, i, p, now);
        else
            lg_gray_probe_standby(c, i, now);
    }
}

/* The slot of each message keeps its buffer's registration (a receive group's message i is
 * seq + i), which every post of it, replays too, hands the inner. */
static void inner_posted(struct lg_conn *c, const struct lg_req *r, struct lg_inner_mr *const *mrs,
                         uint32_t wake)
{
    (void)wake;
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    struct lg_req_info q = lg_req_info(r);
    for (int i = 0; i < q.nmsgs; i++)
        __atomic_store_n(&e->req[(q.seq + (uint64_t)i) % LG_WINDOW].imr, mrs ? mrs[i] : NULL,
                         __ATOMIC_RELEASE); /* deregMr may clear it (inner_endpoint.c) */
    if (e->send)
        account_send(c, e, q.seq, q.size);
    lg_inner_ep_pump(c);
}

/* A kept copy spares a send our ack's round trip only where the inner's completion is not
 * placement already, and the CPU can read only host memory. */
static int inner_may_keep(const struct lg_conn *c, const struct lg_inner_mr *mr)
{
    return !lg_inner_ep_placed(lg_inner_ep(lg_conn_ep(c))) && mr && mr->type == NCCL_PTR_HOST;
}

static void inner_progress(struct lg_conn *c, struct lg_req *r)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    if (e->send) /* goodput health: the connection is not drained */
        note_busy(c, e, coarse_ns());
    lg_inner_ep_pump(c);
    /* A send waits for the inner completion, then for our ack: read the control channel
     * only once the inner is done with it (one syscall less per poll before that). */
    if (e->send && lg_req_written(r))
        lg_conn_poll_ctrl(c);
}

static int inner_carries(const struct lg_path *p) { return lg_inner_ep_carries(p); }

/* Receiver: the inner plugin's data flows are not ours to read, so progress is judged from
 * its requests. The oldest incomplete message has its inner receive posted, the sender said
 * it handed that message to its inner plugin (POSTED), the peer is heard and NCCL polls
 * (inner completions are seen by its test() calls), and still nothing completes for
 * LINKGUARD_STALL_MS: the inner path is stalled (a hung queue pair, a blackholed flow) and
 * fails like a dead one, long before the inner plugin's own timeouts give up. */
/* Monitor, sender: kept sends are done for NCCL, which may not call us again, so their replay
 * after a switch, and the inner tests that move it, are the monitor's while NCCL is away (no
 * unfinished send seen for `idle_ns`, 0: at once, after a commit). */
static void pump_kept(struct lg_conn *c, uint64_t idle_ns)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    if (!lg_send_kept_unacked(c))
        return;
    if (idle_ns && coarse_ns() - __atomic_load_n(&e->busy_ns, __ATOMIC_RELAXED) < idle_ns)
        return;
    lg_inner_ep_pump(c);
}

static void inner_watch(struct lg_conn *c, uint64_t now)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    if (e->send) {
        pump_kept(c, LG_MS(lg_params.heartbeat_ms));
        return;
    }
    struct lg_path *p = lg_conn_committed(c);
    if (!lg_params.stall_ms || !lg_path_is_up(p) || !lg_inner_ep_carries(p))
        return;
    uint64_t base = lg_conn_placed(c);
    uint64_t sent = __atomic_load_n(&e->peer_posted, __ATOMIC_ACQUIRE);
    int waiting = sent > base && base < lg_conn_posted(c) && lg_path_heard(p, now);
    if (lg_conn_take_polled(c))
        e->polled_ns = now;
    if (now - e->polled_ns > LG_MS(lg_params.stall_ms) / 2)
        waiting = 0;
    uint64_t from = lg_conn_stalled_since(c, waiting, base, 0, now);
    if (!from)
        return;
    char why[128];
    snprintf(why, sizeof(why), "stalled: the inner receive of message #%llu got nothing for "
             "%.0f ms although the sender handed it to its inner plugin",
             (unsigned long long)base, lg_ms_since(from, now));
    lg_path_stalled(p, why, (uint32_t)lg_ms_since(from, now));
}

/* Sender: POSTED as often as heartbeats, what the receiver's watchdog needs to tell a stalled
 * inner path from a quiet one. */
static void inner_heartbeat(struct lg_conn *c, uint64_t now)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    if (!e->send || now - e->posted_told_ns < LG_MS(lg_params.heartbeat_ms))
        return;
    struct lg_path *pa = lg_conn_committed(c);
    if (!lg_path_is_up(pa))
        return;
    e->posted_told_ns = now;
    uint64_t sent = lg_send_cursor(c);
    if (sent > lg_conn_acked(c)) {
        struct lg_ctrl posted = {.type = LG_CTRL_POSTED, .value = sent};
        lg_path_ctrl_out(pa, &posted);
    }
}

/* GROUPED (wire.h): the receiver's question (we are the sender), or the sender's answer. */
static int inner_on_grouped(struct lg_path *p, struct lg_inner_conn *e, const struct lg_ctrl *f)
{
    if (e->send) {
        /* Stored before the answer goes (seq_cst): tx_complete reads it after its tests. */
        __atomic_store_n(&e->grouped, LG_GROUPED_SENDER, __ATOMIC_SEQ_CST);
        if (lg_params.send_copy) /* a small send we cannot keep asks for its ack */
            __atomic_store_n(&e->keeps_told, 1, __ATOMIC_RELEASE);
        struct lg_ctrl answer = {.type = LG_CTRL_GROUPED, .value = (uint64_t)lg_params.send_copy};
        lg_path_ctrl_out(p, &answer);
        return 1;
    }
    int st = LG_GROUPED_ASKED;
    if (!__atomic_compare_exchange_n(&e->grouped, &st, LG_GROUPED_ANSWERED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        st != LG_GROUPED_ANSWERED) {
        lg_conn_peer_lied(lg_path_conn(p), "GROUPED answer, but nothing was asked");
        return -1;
    }
    /* As KEEPS: any size is honest. Acks batched for a placed sender go now: it waits for
     * them from here on. */
    __atomic_store_n(&e->peer_keeps, f->value, __ATOMIC_RELEASE);
    lg_recv_flush_ack(p);
    return 1;
}

/* Its frames: INNER (sender: the receiver's inner handle), DELIVERED and POSTED (receiver),
 * GROUPED (both). */
static int inner_on_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = lg_path_conn(p);
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    switch (f->type) {
    case LG_CTRL_INNER:
        return lg_inner_ep_on_frame(p, f);
    case LG_CTRL_DELIVERED:
        if (f->value > lg_conn_posted(c)) {
            lg_conn_peer_lied(c, "DELIVERED for %llu messages, but fewer receives were posted",
                              (unsigned long long)f->value);
            return -1;
        }
        __atomic_store_n(&e->peer_placed, 1, __ATOMIC_RELEASE);
        lg_atomic_raise(&e->peer_delivered, f->value);
        return 1;
    case LG_CTRL_POSTED:
        /* Not checkable (a sender may run ahead of the receives NCCL posted); a false one
         * can only make the watchdog fail a path over, or an ack come sooner, never complete
         * or replay anything. */
        lg_atomic_raise(&e->peer_posted, f->value);
        lg_inner_ep_ack_asked(p, f->value);
        return 1;
    case LG_CTRL_GROUPED:
        return inner_on_grouped(p, e, f);
    case LG_CTRL_KEEPS:
        /* Any size is honest (a size only batches acks; POSTED asks for the rest), and
         * KEEPS(0) keeps nothing: every ack goes at once. */
        __atomic_store_n(&e->peer_keeps, f->value, __ATOMIC_RELEASE);
        return 1;
    default:
        return 0;
    }
}

static void inner_resume(struct lg_path *p)
{
    (void)p; /* NCCL's thread posts on the committed path at its next call */
}

static void inner_rebuilt(struct lg_path *p)
{
    /* READY once the inner comm is accepted (inner_endpoint.c) */
    lg_inner_tp(lg_path_tp(p))->ready_owed = 1;
}

/* NCCL's thread posts inner requests on the committed path: it is held off (wmu) across the
 * change. The receiver first completes what the sender's inner plugin placed (DELIVERED),
 * so that its RESYNC covers it. */
static void inner_commit_begin(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    pthread_mutex_lock(&e->wmu);
    if (!e->send && from != to)
        lg_inner_ep_rx_hold(c, from, __atomic_load_n(&e->peer_delivered, __ATOMIC_ACQUIRE));
}

/* The inner requests posted on the path left are forgotten (the sender posts them again on
 * the new one); the receiver fences the comm it left before its RESYNC goes out. */
static void inner_commit_end(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    if (from != to) {
        if (e->send)
            lg_inner_ep_tx_forget(c);
        else
            lg_inner_ep_rx_forget(c);
    }
    pthread_mutex_unlock(&e->wmu);
    if (!e->send && from && from != to)
        lg_inner_ep_fence(from);
    if (e->send && from != to)
        pump_kept(c, 0); /* the replay starts now, not when NCCL next calls */
}

const struct lg_transport lg_inner_transport = {
    .name = "inner",
    .sends_copies = LG_COPY_REPLAYS,
    .matches_tags = 1,
    .keeps_order_in_place = 1,
    .hold_is_request = 1,
    .fresh_on_leave = 1,
    .any_backup_nic = 1, /* each member of a set on its own inner device (lg_inner_devs_find) */
    .id = LG_TRANSPORT_INNER,
    .stream_fn = {lg_stream_idle_handler, lg_stream_idle_handler},
    .get_properties = lg_inner_devs_properties,
    .ctx_open = lg_inner_devs_ctx_open,
    .ctx_close = lg_inner_devs_ctx_close,
    .nstreams = inner_nstreams,
    .open = inner_open,
    .usable = lg_inner_ep_conn_usable,
    .reg_mr = inner_reg_mr,
    .dereg_mr = lg_inner_ep_dereg_mr,
    .iflush = lg_inner_ep_iflush,
    .flush_test = lg_inner_ep_flush_test,
    .release = inner_release,
    .path_open = inner_path_open,
    .path_close = inner_path_close,
    .recv_prepare = inner_recv_prepare,
    .posted = inner_posted,
    .may_keep = inner_may_keep,
    .progress = inner_progress,
    .step = lg_inner_ep_step,
    .carries = inner_carries,
    .watch = inner_watch,
    .goodput = inner_goodput,
    .heartbeat = inner_heartbeat,
    .on_frame = inner_on_frame,
    .resume = inner_resume,
    .fence = lg_inner_ep_fence,
    .rearm = lg_inner_ep_rearm,
    .rebuilt = inner_rebuilt,
    .switching = lg_inner_ep_tx_switching,
    .commit_begin = inner_commit_begin,
    .commit_end = inner_commit_end,
    .drain_delivered = lg_inner_ep_drain_delivered,
};
