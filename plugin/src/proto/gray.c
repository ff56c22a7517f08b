/* Gray paths held off after a goodput verdict (gray.h). */
#include "proto/gray.h"

#include <stdio.h>

#include "daemon/verdict.h"
#include "proto/conn.h"
#include "proto/nic_gray.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/tcp_counters.h"
#include "runtime/util.h"

size_t lg_gray_describe(const struct lg_gray_found *f, char *out, size_t len)
{
    int n;
    if (f->kind == LG_VERDICT_SLOW)
        n = snprintf(out, len, "slow (%.1f MB/s, %u %% of its %.1f MB/s baseline)",
                     f->rate_Bps / 1e6, f->expected_Bps ?
                     (unsigned)(f->rate_Bps * 100 / f->expected_Bps) : 0, f->expected_Bps / 1e6);
    else
        n = snprintf(out, len, "lossy (%u.%u %% of %.1f MB retransmitted)", f->permille / 10,
                     f->permille % 10, f->sent / 1e6);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
}

void lg_gray_hold(struct lg_conn *c, int i, uint64_t now, const struct lg_gray_found *f)
{
    struct lg_fo_slot *sl = &c->fo.slot[i];
    struct lg_path *p = c->paths[i];
    uint64_t base = LG_MS(lg_params.gray_hold_ms);
    int repeat = sl->gray_last_ns && now - sl->gray_last_ns < LG_GRAY_REPEAT_NS;
    sl->gray_hold_ns = repeat && sl->gray_hold_ns ? LG_MIN(2 * sl->gray_hold_ns,
                                                           LG_GRAY_HOLD_MAX * base) : base;
    sl->gray_last_ns = now;
    sl->gray_until = now + sl->gray_hold_ns;
    sl->gray_found = *f;
    char what[96], why[LG_NIC_GRAY_WHY];
    lg_gray_describe(f, what, sizeof(what));
    snprintf(why, sizeof(why), "%s, found by send conn %016llx", what,
             (unsigned long long)c->nonce);
    lg_nic_gray_hold(p->nic, sl->gray_until, why); /* every connection on the NIC leaves it */
    sl->probe_retrans = UINT64_MAX; /* read afresh once it is standby */
    if (f->kind == LG_VERDICT_SLOW)
        LG_INFO(NCCL_NET, "send conn %016llx: %s path on NIC %s to %s is slow: %.1f MB/s "
                "completed while backlogged, under %u %% of its baseline of %.1f MB/s in each "
                "of the last 2 windows of %lld ms; held off for %.0f s",
                (unsigned long long)c->nonce, lg_slot_name(p->index), p->nic, p->peer,
                f->rate_Bps / 1e6, (unsigned)lg_params.gray_slow_pct, f->expected_Bps / 1e6,
                (long long)lg_params.gray_window_ms, sl->gray_hold_ns / 1e9);
    else
        LG_INFO(NCCL_NET, "send conn %016llx: %s path on NIC %s to %s is lossy: %u.%u %% of "
                "%.1f MB sent were retransmitted in each of the last 2 windows of %lld ms; "
                "held off for %.0f s", (unsigned long long)c->nonce, lg_slot_name(p->index),
                p->nic, p->peer, f->permille / 10, f->permille % 10, f->sent / 1e6,
                (long long)lg_params.gray_window_ms, sl->gray_hold_ns / 1e9);
    lg_verdict_report(&(struct lg_verdict){.nic = p->nic, .kind = f->kind,
                                           .path = (uint8_t)p->index,
                                           .for_ms = 2 * (uint32_t)lg_params.gray_window_ms,
                                           .loss_ppm = f->permille * 1000,
                                           .rate_Bps = f->rate_Bps,
                                           .expected_Bps = f->expected_Bps,
                                           .conn = c->nonce, .peer = p->peer});
}

void lg_gray_probe_standby(struct lg_conn *c, int i, uint64_t now)
{
    struct lg_fo_slot *sl = &c->fo.slot[i];
    struct lg_path *p = c->paths[i];
    struct lg_tcp_counters cc;
    if (now >= sl->gray_until || lg_tcp_counters_read(&(int){lg_path_ctrl_fd(p)}, 1, &cc) != 0)
        return;
    if (sl->probe_retrans != UINT64_MAX && cc.segs_retrans > sl->probe_retrans &&
        sl->probe_path == p && sl->probe_gen == p->gen)
    {
        sl->gray_until = now + sl->gray_hold_ns;
        lg_nic_gray_hold(p->nic, sl->gray_until, NULL);
    }
    sl->probe_retrans = cc.segs_retrans;
    sl->probe_path = p;
    sl->probe_gen = p->gen;
}
