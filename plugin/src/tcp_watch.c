/* The TCP transport's watch over its paths (monitor thread): the progress watchdogs (a data
 * stream that stalls while the peer is still heard) and goodput health (a path that loses
 * data: goodput.h). Their verdicts fail a path (lg_path_stalled) or hold it off (gray.h),
 * never switch anything themselves. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>

#include "conn.h"
#include "goodput.h"
#include "gray.h"
#include "log.h"
#include "params.h"
#include "tcp.h"
#include "util.h"
#include "verdict.h"

/* Receiver: the progress watchdog. A data stream that stalls alone (one flow blackholed, a
 * policer starving it) leaves its message incomplete while the data around it arrives: later
 * messages complete, or the message itself is partly placed by the other streams. No progress
 * on that oldest incomplete message for LINKGUARD_STALL_MS means the path is stalled: it fails
 * like a dead one (fenced; the sender fails over, or an unprotected connection reports it). A
 * receive NCCL has not posted, or a sender with nothing to send, never looks like this. */
static void rx_watchdog(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    struct lg_path *p = c->active_path;
    if (!lg_params.stall_ms || !lg_path_up(p))
        return;
    pthread_mutex_lock(&c->mu);
    uint64_t base = c->win.base, later = c->win.bits;
    pthread_mutex_unlock(&c->mu);
    const struct lg_req *r = &c->reqs[base % LG_WINDOW];
    uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    uint64_t placed = (st & LG_REQ_POSTED) && !(st & LG_REQ_DONE) && r->seq == base
                          ? __atomic_load_n(&r->placed, __ATOMIC_RELAXED) : 0;
    int around = base < __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE) && (later || placed);
    /* Only while the peer is heard (its heartbeats keep coming): a sender, or its host, that
     * gets no CPU stalls every stream at once, and that is not this path's fault. */
    if (!lg_path_heard_recently(p, now))
        around = 0;
    /* Chunks test() would place inline are not late when NCCL is not polling. */
    if (__atomic_exchange_n(&c->polled, 0, __ATOMIC_RELAXED))
        fo->wd_polled_ns = now;
    if (lg_params.poll_inline && now - fo->wd_polled_ns > LG_MS(lg_params.stall_ms) / 2)
        around = 0;
    uint64_t since = fo->wd_since;
    if (!lg_conn_stalled_since(c, around, base, placed, now))
        return;
    char why[128];
    snprintf(why, sizeof(why), "stalled: message #%llu got no data for %.0f ms (%llu bytes "
             "placed) while data around it arrived", (unsigned long long)base,
             lg_ms_since(since, now), (unsigned long long)placed);
    uint32_t for_ms = (uint32_t)lg_ms_since(since, now);
    lg_path_stalled(p, why, for_ms);
}

/* Sender: the same watchdog, from TCP's side. A data socket with segments in flight and no
 * acknowledgement for LINKGUARD_STALL_MS (tcp(7) TCP_INFO: tcpi_unacked, tcpi_last_ack_recv)
 * is a flow the network stopped: a receiver that merely does not read still acknowledges (its
 * zero window answers our probes). This catches the stall the receiver cannot see, when the
 * stalled stream holds every message in flight. */
static void tx_watchdog(struct lg_conn *c, uint64_t now)
{
    struct lg_path *p = c->active_path;
    if (!lg_params.stall_ms || !lg_path_up(p) ||
        __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) >= __atomic_load_n(&c->posted,
                                                                        __ATOMIC_ACQUIRE))
        return;
    /* Only while the peer is heard (its heartbeats keep coming): a peer process or host that
     * gets no CPU is silence, judged elsewhere, not a stalled flow. */
    if (!lg_path_heard_recently(p, now))
        return;
    for (int k = 0; k < p->nstreams; k++) {
        struct tcp_info ti;
        socklen_t len = sizeof(ti);
        /* ... and only once TCP itself gave up waiting (a retransmission timeout fired): late
         * acknowledgements alone are a slow peer, not a dropped flow. */
        if (getsockopt(p->data[k].task.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
            ti.tcpi_unacked == 0 || ti.tcpi_last_ack_recv < (uint32_t)lg_params.stall_ms ||
            (ti.tcpi_retrans == 0 && ti.tcpi_backoff == 0))
            continue;
        char why[128];
        snprintf(why, sizeof(why), "stalled: data stream %d: no TCP acknowledgement for %u ms "
                 "with %u segment(s) in flight (%u retransmitted)", k + 1,
                 ti.tcpi_last_ack_recv, ti.tcpi_unacked, ti.tcpi_retrans);
        lg_path_stalled(p, why, ti.tcpi_last_ack_recv);
        return;
    }
}

/* Sender: goodput health (goodput.h). The active path's data sockets are read once a window;
 * two lossy windows in a row hold the path off (gray.h). */
void lg_tcp_goodput(struct lg_conn *c, uint64_t now)
{
    if (!lg_params.gray_retrans_pct)
        return;
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = c->paths[i];
        struct lg_fo_slot *sl = &c->fo.slot[i];
        if (!lg_path_up(p))
            continue;
        if (p != c->active_path) { /* standby: held off while its heartbeats are lost */
            lg_gray_probe_standby(c, i, now);
            continue;
        }
        int fds[LG_MAX_STREAMS];
        for (int k = 0; k < p->nstreams; k++)
            fds[k] = p->data[k].task.fd;
        if (sl->gp_path != p || sl->gp_gen != p->gen || !sl->gp_t0) {
            if (lg_gp_read(fds, p->nstreams, &sl->gp) == 0) { /* a new window for this path */
                sl->gp_path = p;
                sl->gp_gen = p->gen;
                sl->gp_t0 = now;
                sl->gp_strikes = 0;
            }
            continue;
        }
        if (now - sl->gp_t0 < LG_MS(lg_params.gray_window_ms))
            continue;
        struct lg_gp_counters cur;
        if (lg_gp_read(fds, p->nstreams, &cur) != 0)
            continue;
        struct lg_gp_counters d = lg_gp_delta(&cur, &sl->gp);
        unsigned permille;
        enum lg_gp_verdict v = lg_gp_judge(&d, (uint64_t)lg_params.gray_min_bytes,
                                           (int)lg_params.gray_retrans_pct, &permille);
        sl->gp = cur;
        sl->gp_t0 = now;
        if (v == LG_GP_HEALTHY)
            sl->gp_strikes = 0;
        else if (v == LG_GP_LOSSY && ++sl->gp_strikes >= 2) {
            sl->gp_strikes = 0;
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
    if (c->kind == LG_CONN_RECV)
        rx_watchdog(c, now);
    else
        tx_watchdog(c, now);
}
