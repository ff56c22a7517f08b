/* The TCP transport's watch over its paths (monitor thread): the progress watchdogs (a data
 * stream that stalls while the peer is still heard) and goodput health (a path that loses
 * data: goodput.h). Their state is the endpoint's (tcp_conn.h), none the failover machine's.
 * Their verdicts fail a path (lg_path_stalled) or hold it off (gray.h), never switch anything
 * themselves. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>

#include "daemon/verdict.h"
#include "proto/upcall.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "runtime/wake.h"
#include "session/wire.h"
#include "transport/tcp/goodput.h"
#include "transport/tcp/tcp.h"
#include "transport/tcp/tcp_conn.h"

/* A stall the sender does not confirm is judged by the receiver alone once it has lasted this
 * many LINKGUARD_STALL_MS: bounded, never a hang (a sender whose writer gets no CPU for that
 * long does not deliver either). */
#define LG_STALL_ALONE_PERIODS 4

/* Receiver: the progress watchdog. A data stream that stalls alone (one flow blackholed, a
 * policer starving it) leaves its message incomplete while the data around it arrives: later
 * messages complete, or the message itself is partly placed by the other streams. A receive
 * NCCL has not posted, or a sender with nothing to send, never looks like this; but a sender
 * whose writer of that stream got no CPU mid-chunk looks exactly like it, and only the sender
 * can tell the two apart. So no progress on that oldest incomplete message for
 * LINKGUARD_STALL_MS makes the receiver ask (STALLED, again each period while it lasts), and
 * the sender judges from its sockets (tx_watchdog); unconfirmed for LG_STALL_ALONE_PERIODS,
 * the receiver fails the path itself (fenced; the sender fails over, or an unprotected
 * connection reports it). */
static void rx_watchdog(struct lg_conn *c, struct lg_tcp_conn *e, uint64_t now)
{
    struct lg_path *p = lg_conn_committed(c);
    if (!lg_params.stall_ms || !lg_path_is_up(p))
        return;
    uint64_t base, placed;
    int around = lg_recv_oldest(c, &base, &placed);
    /* Only while the peer is heard (its heartbeats keep coming): a sender, or its host, that
     * gets no CPU stalls every stream at once, and that is not this path's fault. */
    if (!lg_path_heard(p, now))
        around = 0;
    /* Chunks test() would place inline are not late when NCCL is not polling. */
    if (lg_conn_take_polled(c))
        e->polled_ns = now;
    if (lg_params.poll_inline && now - e->polled_ns > LG_MS(lg_params.stall_ms) / 2)
        around = 0;
    uint64_t from = lg_conn_stalled_since(c, around, base, placed, now);
    if (!from)
        return;
    struct lg_path_id id = lg_path_id(p);
    uint64_t key = (uint64_t)id.gen << 1 | (uint64_t)id.slot; /* the path it is about */
    /* The same stall while it lasts: asked about each period (one late period is slack). */
    if (!e->ask_from || base != e->ask_base || placed != e->ask_placed ||
        key != e->ask_path || now - e->ask_last > 2 * LG_MS(lg_params.stall_ms)) {
        e->ask_from = from; /* a new stall */
        e->ask_base = base;
        e->ask_placed = placed;
        e->ask_path = key;
        LG_INFO(NCCL_NET, "recv conn %016llx: %s path on NIC %s: message #%llu got no data for "
                "%.0f ms (%llu bytes placed) while data around it arrived; asking the sender "
                "whether a stream of it is stuck", (unsigned long long)e->nonce,
                lg_slot_name(id.slot), lg_path_nic(p), (unsigned long long)base,
                lg_ms_since(from, now), (unsigned long long)placed);
    }
    e->ask_last = now;
    if (now - e->ask_from < LG_STALL_ALONE_PERIODS * LG_MS(lg_params.stall_ms)) {
        struct lg_ctrl ask = {.type = LG_CTRL_STALLED, .value = base};
        lg_path_ctrl_out(p, &ask);
        return;
    }
    uint32_t for_ms = (uint32_t)lg_ms_since(e->ask_from, now);
    e->ask_from = 0;
    char why[128];
    snprintf(why, sizeof(why), "stalled: message #%llu got no data for %u ms (%llu bytes "
             "placed), unconfirmed by the sender", (unsigned long long)base, for_ms,
             (unsigned long long)placed);
    lg_path_stalled(p, why, for_ms);
}

/* Sender: the receiver's STALLED, for the watchdog's next run to answer. Receiver: the
 * sender's POSTED, asking for the acks of its kept sends (window.c). */
int lg_tcp_on_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = lg_path_conn(p);
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    if (f->type == LG_CTRL_POSTED && !e->send) {
        lg_recv_ack_asked(p, f->value);
        return 1;
    }
    if (f->type != LG_CTRL_STALLED)
        return 0;
    if (f->value >= lg_conn_posted(c)) {
        lg_conn_peer_lied(c, "STALLED for message #%llu, which was never sent",
                          (unsigned long long)f->value);
        return -1;
    }
    struct lg_path_id id = lg_path_id(p);
    pthread_mutex_lock(&e->ask_mu);
    e->asked_seq = f->value;
    e->asked_rx_ns = lg_now_ns();
    e->asked_slot = id.slot;
    e->asked_gen = id.gen;
    pthread_mutex_unlock(&e->ask_mu);
    lg_conn_wake(c);
    return 1;
}

/* Sender: the receiver's question about path p, taken once: 1 and the message it named if
 * one came for p as it is now and that message is still unacknowledged. */
static int asked(struct lg_tcp_conn *e, struct lg_path_id id, uint64_t acked, uint64_t *seq)
{
    pthread_mutex_lock(&e->ask_mu);
    int got = e->asked_rx_ns && e->asked_slot == id.slot && e->asked_gen == id.gen;
    *seq = e->asked_seq;
    e->asked_rx_ns = 0;
    pthread_mutex_unlock(&e->ask_mu);
    return got && *seq >= acked;
}

/* Sender: the same watchdog, from TCP's side. A data socket with segments in flight and no
 * acknowledgement for LINKGUARD_STALL_MS (tcp(7) TCP_INFO: tcpi_unacked, tcpi_last_ack_recv)
 * is a flow the network stopped: a receiver that merely does not read still acknowledges (its
 * zero window answers our probes). This catches the stall the receiver cannot see, when the
 * stalled stream holds every message in flight, and answers the receiver's STALLED: asked,
 * half that silence confirms it (the receiver has waited a whole period already); none at all,
 * with every byte in flight acknowledged, is a writer of ours late for CPU, not the network,
 * and the path stays. */
static void tx_watchdog(struct lg_conn *c, struct lg_tcp_conn *e, uint64_t now)
{
    struct lg_path *p = lg_conn_committed(c);
    if (!lg_params.stall_ms || !lg_path_is_up(p))
        return;
    struct lg_path_id id = lg_path_id(p);
    uint64_t acked = lg_conn_acked(c), seq;
    int q = asked(e, id, acked, &seq);
    /* Only while the peer is heard (its heartbeats keep coming): a peer process or host that
     * gets no CPU is silence, judged elsewhere, not a stalled flow. */
    if (acked >= lg_conn_posted(c) || !lg_path_heard(p, now))
        return;
    uint32_t need = (uint32_t)(q ? lg_params.stall_ms / 2 : lg_params.stall_ms);
    for (int k = 0; k < e->nstreams; k++) {
        struct tcp_info ti;
        socklen_t len = sizeof(ti);
        /* ... and, unasked, only once TCP itself gave up waiting (a retransmission timeout
         * fired): late acknowledgements alone are a slow peer, not a dropped flow. */
        if (getsockopt(lg_path_stream(p, k)->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
            ti.tcpi_unacked == 0 || ti.tcpi_last_ack_recv < need ||
            (!q && ti.tcpi_retrans == 0 && ti.tcpi_backoff == 0))
            continue;
        char why[128]; /* (struct lg_path's why) */
        if (q)
            snprintf(why, sizeof(why), "stalled: message #%llu got no data at the receiver; "
                     "data stream %d: no TCP ack for %u ms, %u segment(s) in flight",
                     (unsigned long long)seq, k + 1, ti.tcpi_last_ack_recv, ti.tcpi_unacked);
        else
            snprintf(why, sizeof(why), "stalled: data stream %d: no TCP acknowledgement for "
                     "%u ms with %u segment(s) in flight (%u retransmitted)", k + 1,
                     ti.tcpi_last_ack_recv, ti.tcpi_unacked, ti.tcpi_retrans);
        lg_path_stalled(p, why, ti.tcpi_last_ack_recv);
        return;
    }
    if (q && e->denied_seq != seq + 1) { /* once per message asked about */
        e->denied_seq = seq + 1;
        LG_INFO(NCCL_NET, "send conn %016llx: the receiver says message #%llu got no data on "
                "the %s path on NIC %s, but every data stream's bytes in flight are being "
                "acknowledged: not the network (a writer of ours late for CPU); left on it",
                (unsigned long long)e->nonce, (unsigned long long)seq, lg_slot_name(id.slot),
                lg_path_nic(p));
    }
}

/* Sender: goodput health (goodput.h). The active path's data sockets are read once a window;
 * two lossy windows in a row hold the path off (gray.h). */
void lg_tcp_goodput(struct lg_conn *c, uint64_t now)
{
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    if (!lg_params.gray_retrans_pct || !e->send)
        return;
    struct lg_path *active = lg_conn_committed(c);
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = lg_conn_path(c, i);
        struct lg_gp_window *w = &e->gp[i];
        if (!lg_path_is_up(p))
            continue;
        if (p != active) { /* standby: held off while its heartbeats are lost */
            lg_gray_probe_standby(c, i, now);
            continue;
        }
        int fds[LG_MAX_STREAMS];
        for (int k = 0; k < e->nstreams; k++)
            fds[k] = lg_path_stream(p, k)->fd;
        uint32_t gen = lg_path_id(p).gen;
        if (w->path != p || w->gen != gen || !w->t0) {
            if (lg_tcp_counters_read(fds, e->nstreams, &w->at) == 0) { /* a new window */
                w->path = p;
                w->gen = gen;
                w->t0 = now;
                w->strikes = 0;
            }
            continue;
        }
        if (now - w->t0 < LG_MS(lg_params.gray_window_ms))
            continue;
        struct lg_tcp_counters cur;
        if (lg_tcp_counters_read(fds, e->nstreams, &cur) != 0)
            continue;
        struct lg_tcp_counters d = lg_gp_delta(&cur, &w->at);
        unsigned permille;
        enum lg_gp_verdict v = lg_gp_judge(&d, (uint64_t)lg_params.gray_min_bytes,
                                           (int)lg_params.gray_retrans_pct, &permille);
        w->at = cur;
        w->t0 = now;
        if (v == LG_GP_HEALTHY)
            w->strikes = 0;
        else if (v == LG_GP_LOSSY && ++w->strikes >= 2) {
            w->strikes = 0;
            uint64_t window_ns = LG_MS(lg_params.gray_window_ms);
            lg_gray_hold(c, i, now, &(struct lg_gray_found){
                                        .kind = LG_VERDICT_LOSSY, .permille = permille,
                                        .sent = d.sent,
                                        .rate_Bps = d.acked * 1000000000ull / window_ns});
        }
    }
}

void lg_tcp_watch(struct lg_conn *c, uint64_t now)
{
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    if (!e->send)
        rx_watchdog(c, e, now);
    else
        tx_watchdog(c, e, now);
}
