/* The failover state machine of one connection, run by the monitor thread (protocol: conn.h).
 * Handlers record what they see (path failures, frames into the mailbox); everything that
 * changes the epoch, the active path or the set of paths happens here. */
#include "proto/failover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "daemon/census.h"
#include "daemon/devices.h"
#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/gray.h"
#include "proto/nic_gray.h"
#include "proto/proto.h"
#include "proto/reconnect.h"
#include "proto/spread.h"
#include "proto/window.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "runtime/wake.h"


/* When a rebuild `delay` from now may start: later by up to LINKGUARD_REJOIN_JITTER_MS, so
 * that connections released together (one daemon UP, one peer heartbeat) spread out. */
static uint64_t rebuild_at(uint64_t now, uint64_t delay)
{
    uint64_t j = LG_MS(lg_params.rejoin_jitter_ms);
    return now + delay + (j ? lg_random_u64() % j : 0);
}
#define LG_FLAP_WINDOW_NS LG_MS(10000) /* a rebuilt path failing within this doubles the backoff */

static const char *state_str(uint32_t s)
{
    static const char *const names[] = {"UNKNOWN", "UP", "DEGRADED", "DOWN", "DRAINED",
                                        "RECOVERING"};
    return s < LG_NIC_STATE_COUNT ? names[s] : "?";
}

static uint8_t nic_code(uint32_t state)
{
    if (lg_health_usable(state))
        return LG_HB_NIC_OK;
    return state == LG_NIC_DOWN ? LG_HB_NIC_DOWN : LG_HB_NIC_LEAVE;
}


void lg_fo_init(struct lg_conn *c)
{
    struct lg_fo *fo = &c->fo;
    memset(fo, 0, sizeof(*fo));
    fo->health_gen = UINT64_MAX;
    fo->daemon = -1;
    for (int i = 0; i < LG_NPATHS; i++) {
        fo->slot[i].nic_idx = -1;
        fo->slot[i].local_state = LG_NIC_UNKNOWN;
        fo->slot[i].delay_ns = LG_MS(lg_params.rejoin_ms);
    }
    c->ctrl_frame = lg_proto_on_frame; /* the protocol takes every control frame */
}

/* ---- what we and the peer know ----------------------------------------------------------- */

static void eval_health(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    uint64_t gen = lg_health_poll();
    int alive = lg_health_alive();
    if (gen == fo->health_gen && alive == fo->daemon)
        return;
    fo->health_gen = gen;
    fo->daemon = alive;
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_fo_slot *sl = &fo->slot[i];
        sl->nic_idx = lg_health_find(lg_conn_nic(c, i));
        uint32_t st = lg_health_state(sl->nic_idx, NULL);
        if (st == sl->local_state)
            continue;
        LG_TRACE("%s conn %016llx: NIC %s %s -> %s (daemon)", lg_conn_kind_str(c),
                 (unsigned long long)c->nonce, lg_conn_nic(c, i), state_str(sl->local_state),
                 state_str(st));
        if (st == LG_NIC_UP && !lg_health_usable(sl->local_state))
            sl->next_try_ns = rebuild_at(now, 0); /* the daemon's word (after its hold-down) */
        sl->local_state = st;
        fo->hb_force = 1;
        if (i == c->active && !lg_health_usable(st) && !fo->trigger_ns)
            fo->trigger_ns = now;
    }
}

static void read_peer(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    pthread_mutex_lock(&c->mb_mu);
    int valid = c->mb.hb_valid;
    uint8_t flags = c->mb.hb_flags;
    uint32_t epoch = c->mb.hb_epoch;
    uint64_t gens = c->mb.hb_gens;
    pthread_mutex_unlock(&c->mb_mu);
    if (!valid)
        return;
    /* The receiver commits only epochs the sender proposed, the sender only epochs the
     * receiver committed: a heartbeat claiming more is a lie (and would make us propose
     * from it). */
    uint32_t bound = c->kind == LG_CONN_SEND ? fo->proposed : __atomic_load_n(&c->epoch,
                                                                              __ATOMIC_RELAXED);
    if (epoch > bound) {
        lg_conn_peer_lied(c, "heartbeat at epoch %u, above %s %u", epoch,
                          c->kind == LG_CONN_SEND ? "every epoch we proposed," : "our committed",
                          bound);
        return;
    }
    if (LG_HB_NIC(flags, c->active) != LG_HB_NIC_OK &&
        LG_HB_NIC(fo->peer_flags, c->active) == LG_HB_NIC_OK && !fo->trigger_ns)
        fo->trigger_ns = now;
    for (int i = 0; i < LG_NPATHS; i++)
        if (LG_HB_NIC(flags, i) == LG_HB_NIC_OK && LG_HB_NIC(fo->peer_flags, i) != LG_HB_NIC_OK)
            fo->slot[i].next_try_ns = rebuild_at(now, 0); /* the peer's daemon let it back in */
    fo->peer_flags = flags;
    fo->peer_epoch = epoch;
    fo->peer_gen[0] = (uint32_t)gens;
    fo->peer_gen[1] = (uint32_t)(gens >> 32);
    if (epoch > fo->seen)
        fo->seen = epoch;
}

static int peer_failed(const struct lg_conn *c, int i)
{
    const struct lg_path *p = c->paths[i];
    return p && (c->fo.peer_flags & LG_HB_PATH_FAILED(i)) && c->fo.peer_gen[i] == p->gen;
}

/* The longest gap between two monitor runs that still counts as on time: a later run means
 * this process was starved, and silence measured across it says nothing about the paths. */
static uint64_t late_gap_ns(void)
{
    return 4 * LG_MS(lg_params.heartbeat_ms) + LG_MS(lg_params.silent_timeout_ms) / 2;
}

static int silent(const struct lg_path *p, uint64_t now)
{
    uint64_t last = lg_path_rx_ns(p);
    return now > last && now - last > LG_MS(lg_params.silent_timeout_ms);
}

/* A path that carries: transport up, heard from recently, not declared failed by the peer. */
static int works(const struct lg_conn *c, int i, uint64_t now)
{
    const struct lg_path *p = c->paths[i];
    return lg_path_up(p) && !silent(p, now) && !peer_failed(c, i);
}

static void describe(const struct lg_conn *c, int i, uint64_t now, char *out, size_t len)
{
    const struct lg_path *p = c->paths[i];
    if (!p)
        snprintf(out, len, "no path");
    else if (!lg_path_up(p)) /* `why` is whole once fail_noted is set (release) */
        snprintf(out, len, "%s", __atomic_load_n(&p->fail_noted, __ATOMIC_ACQUIRE) && p->why[0]
                                     ? p->why : "failed");
    else if (silent(p, now))
        snprintf(out, len, "silent for %.0f ms", lg_ms_since(lg_path_rx_ns(p), now));
    else if (peer_failed(c, i))
        snprintf(out, len, "declared failed by the peer");
    else
        snprintf(out, len, "up");
}

/* ---- failures ----------------------------------------------------------------------------- */

/* Paths that failed since the last run: fence them (they are rebuilt later). Returns 1 when
 * the connection is over (the peer is gone). */
static int note_failures(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_fo_slot *sl = &fo->slot[i];
        struct lg_path *p = c->paths[i];
        if (!p || lg_path_up(p) || sl->noted || !__atomic_load_n(&p->fail_noted, __ATOMIC_ACQUIRE))
            continue;
        sl->noted = 1;
        fo->hb_force = 1;
        if (p == c->active_path) {
            if (!fo->trigger_ns)
                fo->trigger_ns = p->fail_ns ? p->fail_ns : now;
            LG_TRACE("%s conn %016llx: active %s path on NIC %s to %s failed: %s", lg_conn_kind_str(c),
                     (unsigned long long)c->nonce, lg_slot_name(i), p->nic, p->peer, p->why);
        } else {
            LG_INFO(NCCL_NET, "%s conn %016llx: standby %s path on NIC %s to %s lost (%s); "
                    "rebuilding it", lg_conn_kind_str(c), (unsigned long long)c->nonce, lg_slot_name(i),
                    p->nic, p->peer, p->why);
        }
        /* Damping of the rebuild: a path that dies soon after it came back, while it carried
         * the data, waits longer (traffic must not thrash). A standby carried nothing: waiting
         * longer would only leave the active path without a place to go (a failed attempt
         * still doubles the delay). */
        if (sl->up_since_ns && now - sl->up_since_ns < LG_FLAP_WINDOW_NS && p == c->active_path)
            sl->delay_ns = LG_MIN(2 * sl->delay_ns, LG_MS(lg_params.rejoin_max_ms));
        else
            sl->delay_ns = LG_MS(lg_params.rejoin_ms);
        /* A standby closed to re-spread it failed nothing: rebuilt on its new member now. */
        sl->next_try_ns = rebuild_at(now, sl->respread ? 0 : sl->delay_ns);
        sl->respread = 0;
        lg_path_retire_later(p);
    }
    struct lg_path *p0 = c->paths[0], *p1 = c->paths[1];
    if (p0 && p1 && !lg_path_up(p0) && !lg_path_up(p1) &&
        __atomic_load_n(&p0->peer_gone, __ATOMIC_RELAXED) &&
        __atomic_load_n(&p1->peer_gone, __ATOMIC_RELAXED) && !fo->slot[0].rj.path &&
        !fo->slot[1].rj.path) {
        uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
        uint64_t done = c->kind == LG_CONN_SEND ? __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE)
                                                : __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE);
        if (lg_conn_fail(c, LG_FAIL_PEER, ncclRemoteError,
                         "peer closed both paths without a goodbye"))
            LG_WARN("%s conn %016llx: both paths failed without a goodbye from the peer "
                    "(process exited?) with %llu request(s) in flight: primary path on NIC %s "
                    "to %s (%s); backup path on NIC %s to %s (%s)",
                    lg_conn_kind_str(c), (unsigned long long)c->nonce,
                    (unsigned long long)(posted - done), p0->nic, p0->peer, p0->why, p1->nic,
                    p1->peer, p1->why);
        return 1;
    }
    return 0;
}

/* Silent ("gray") failure: the active path hears nothing while the standby does. */
/* Reads what is waiting on a path's control session now (workers may lag behind; a session
 * read empty in the last millisecond is not read again for each of its connections). */
static void pump(struct lg_path *p, uint64_t now) { lg_path_ctrl_pump(p, now); }

/* `heard` kept talking after `quiet` fell silent: read on it at two distinct times, the earlier
 * at least half the silent timeout after quiet's last reading. A peer process that gets no
 * CPU stops talking on both at once, and on waking talks on both at once; its last words
 * before (at most a heartbeat apart) and its first after are one reading per path, so it
 * never looks like this. A path that drops everything while the other carries on does, as
 * soon as its silence counts (the other's heartbeats come every LINKGUARD_HEARTBEAT_MS). */
static int kept_talking(const struct lg_path *heard, const struct lg_path *quiet)
{
    uint64_t q = lg_path_rx_ns(quiet);
    uint64_t prev = lg_path_prev_rx_ns(heard);
    return prev > q && prev - q >= LG_MS(lg_params.silent_timeout_ms) / 2;
}

/* Path `quiet` heard nothing for the silent timeout while `heard` kept talking: it fails
 * (and is rebuilt), whichever of the two carries the data. A silent standby left alone would
 * sit out its sockets' retransmission backoff and be no target when the active path dies. */
static void silence_between(struct lg_path *quiet, struct lg_path *heard, uint64_t now,
                            const char *what)
{
    if (!lg_path_up(quiet) || !silent(quiet, now) || !lg_path_up(heard))
        return;
    /* Before blaming the path: heartbeats may sit unread in its socket. */
    pump(quiet, now);
    pump(heard, now);
    if (!lg_path_up(quiet) || !silent(quiet, now) || !lg_path_up(heard) || silent(heard, now) ||
        !kept_talking(heard, quiet))
        return;
    char why[96];
    snprintf(why, sizeof(why), "%s for %.0f ms", what, lg_ms_since(lg_path_rx_ns(quiet), now));
    lg_conn_path_failed(quiet, 0, why);
}

static void check_silence(struct lg_conn *c, uint64_t now)
{
    struct lg_path *pa = c->paths[c->active], *po = c->paths[1 - c->active];
    silence_between(pa, po, now, "no data and no heartbeat");
    silence_between(po, pa, now, "standby: no heartbeat");
}

/* ---- heartbeats ----------------------------------------------------------------------------- */

/* A connection's heartbeat says what it knows (its daemon's view of both NICs, the paths it
 * declared failed, its epoch, its paths' generations): sent at once on every live path when
 * that changes, and otherwise only refreshed this often (queued, written with the session's
 * next flush). Liveness is the sessions' (session.h), so this is no per-connection cost. */
#define LG_HB_REFRESH_PERIODS 20

static void heartbeats(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    uint8_t flags = 0;
    uint64_t gens = 0;
    for (int i = 0; i < LG_NPATHS; i++) {
        flags |= (uint8_t)(nic_code(fo->slot[i].local_state) << (2 * i));
        if (!lg_path_up(c->paths[i]))
            flags |= (uint8_t)LG_HB_PATH_FAILED(i);
        if (c->paths[i])
            gens |= (uint64_t)c->paths[i]->gen << (32 * i);
    }
    uint32_t epoch = __atomic_load_n(&c->epoch, __ATOMIC_ACQUIRE);
    int force = fo->hb_force || flags != fo->hb_flags || epoch != fo->hb_epoch ||
                gens != fo->hb_gens;
    struct lg_ctrl hb = {.type = LG_CTRL_HB, .flags = flags, .epoch = epoch, .value = gens};
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = c->paths[i];
        if (!lg_path_up(p))
            continue;
        uint64_t sent = __atomic_load_n(&p->last_tx_ns, __ATOMIC_RELAXED);
        if (force)
            lg_path_ctrl_send(p, &hb);
        else if (now - sent >= LG_HB_REFRESH_PERIODS * LG_MS(lg_params.heartbeat_ms))
            lg_path_ctrl_queue(p, &hb);
        else
            continue;
        __atomic_store_n(&p->last_tx_ns, now, __ATOMIC_RELAXED);
    }
    fo->hb_flags = flags;
    fo->hb_epoch = epoch;
    fo->hb_gens = gens;
    fo->hb_force = 0;
    c->tr->heartbeat(c, now); /* its own periodic frames (wrap mode: POSTED) */
}

/* Both paths dead for the dead timeout: fail the connection with a WARN naming both. The
 * time counts run by run, each at most what "late" allows: time this process spent starved
 * (CPU, a debugger) is not held against the paths, yet a slow process still gets there. */
static int dead_check(struct lg_conn *c, uint64_t now, uint64_t gap)
{
    struct lg_fo *fo = &c->fo;
    if (works(c, 0, now) || works(c, 1, now)) {
        if (fo->stall_logged)
            LG_INFO(NCCL_NET, "%s conn %016llx: a path works again after %.1f ms",
                    lg_conn_kind_str(c), (unsigned long long)c->nonce, lg_ms_since(fo->stall_since, now));
        fo->stall_since = 0;
        fo->stall_logged = 0;
        return 0;
    }
    char d0[128], d1[128];
    describe(c, 0, now, d0, sizeof(d0));
    describe(c, 1, now, d1, sizeof(d1));
    if (!fo->stall_since) {
        fo->stall_since = now;
        fo->stalled_ns = 0;
        fo->stall_logged = 1;
        for (int i = 0; i < LG_NPATHS; i++) { /* nothing works: rebuild without waiting */
            fo->slot[i].delay_ns = LG_MS(lg_params.rejoin_ms);
            if (fo->slot[i].next_try_ns > now)
                fo->slot[i].next_try_ns = now;
        }
        LG_INFO(NCCL_NET, "%s conn %016llx: no working path (primary on %s: %s; backup on "
                "%s: %s); retrying for up to %lld ms", lg_conn_kind_str(c), (unsigned long long)c->nonce,
                lg_conn_nic(c, 0), d0, lg_conn_nic(c, 1), d1, (long long)lg_params.dead_timeout_ms);
        return 0;
    }
    fo->stalled_ns += LG_MIN(gap, late_gap_ns());
    if (fo->stalled_ns < LG_MS(lg_params.dead_timeout_ms))
        return 0;
    const char *peer0 = c->paths[0] ? c->paths[0]->peer : "?";
    const char *peer1 = c->paths[1] ? c->paths[1]->peer : "?";
    if (lg_conn_fail(c, LG_FAIL_NO_PATH, ncclRemoteError, "no working path for %lld ms",
                     (long long)lg_params.dead_timeout_ms))
        LG_WARN("%s conn %016llx on dev %d: no working path for %.0f ms "
                "(LINKGUARD_DEAD_TIMEOUT_MS=%lld): primary path on NIC %s to %s: %s; backup "
                "path on NIC %s to %s: %s; failing the connection",
                lg_conn_kind_str(c), (unsigned long long)c->nonce, c->dev, lg_ms_since(fo->stall_since, now),
                (long long)lg_params.dead_timeout_ms, lg_conn_nic(c, 0), peer0, d0, lg_conn_nic(c, 1),
                peer1, d1);
    return 1;
}

/* ---- sender: switching -------------------------------------------------------------------- */

static const char *switch_word(int from, int to)
{
    return from == 0 && to == 1 ? "failover" : from == 1 && to == 0 ? "reintegrated" : "switched";
}

/* A commit's move, in the census (census.h): data left the primary, or came back to it. */
static void census_count(const struct lg_conn *c, int from, int to)
{
    if (from == 0 && to == 1)
        lg_census_count_failover(lg_conn_nic(c, 0));
    else if (from == 1 && to == 0)
        lg_census_count_reintegration(lg_conn_nic(c, 0));
}

static void reason(struct lg_conn *c, const struct lg_fo_decision *d, uint64_t now, char *out,
                   size_t len)
{
    int a = c->active;
    const struct lg_fo *fo = &c->fo;
    int i = d->why == LG_WHY_REINTEGRATE ? d->target : a;
    char what[128];
    describe(c, a, now, what, sizeof(what));
    switch (d->why) {
    case LG_WHY_FAILED:
    case LG_WHY_SILENT:
    case LG_WHY_PEER_FAILED:
        snprintf(out, len, "%s path on %s: %s", lg_slot_name(a), lg_conn_nic(c, a), what);
        break;
    case LG_WHY_DOWN:
    case LG_WHY_LEAVE:
        if (!lg_health_usable(fo->slot[i].local_state))
            snprintf(out, len, "NIC %s is %s (daemon)", lg_conn_nic(c, i),
                     state_str(fo->slot[i].local_state));
        else
            snprintf(out, len, "the peer's NIC for %s is %s (its daemon)", lg_conn_nic(c, i),
                     LG_HB_NIC(fo->peer_flags, i) == LG_HB_NIC_DOWN ? "DOWN" : "out of service");
        break;
    case LG_WHY_GRAY:
        if (now < fo->slot[a].gray_until) {
            lg_gray_describe(&fo->slot[a].gray_found, what, sizeof(what));
            snprintf(out, len, "%s path on NIC %s is %s", lg_slot_name(a), lg_conn_nic(c, a), what);
        } else {
            lg_nic_gray_until(lg_conn_nic(c, a), what, sizeof(what));
            snprintf(out, len, "NIC %s is held off: %s", lg_conn_nic(c, a), what);
        }
        break;
    case LG_WHY_RESYNC:
        snprintf(out, len, "the peer is at epoch %u, we are at %u", fo->seen,
                 __atomic_load_n(&c->epoch, __ATOMIC_RELAXED));
        break;
    case LG_WHY_REINTEGRATE:
        if (fo->slot[i].local_state == LG_NIC_UP)
            snprintf(out, len, "NIC %s is UP again (daemon), path rebuilt", lg_conn_nic(c, i));
        else
            snprintf(out, len, "path on NIC %s rebuilt (no daemon: probed)", lg_conn_nic(c, i));
        break;
    default:
        snprintf(out, len, "%s", lg_fo_why_str(d->why));
    }
}

static void set_hold(struct lg_conn *c, int hold)
{
    pthread_mutex_lock(&c->mu);
    __atomic_store_n(&c->hold, hold, __ATOMIC_RELAXED); /* lifted: the caller resumes */
    pthread_mutex_unlock(&c->mu);
}

static void send_switch(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    struct lg_path *t = c->paths[fo->sw_target];
    fo->sw_epoch = fo->proposed = lg_epoch_next(__atomic_load_n(&c->epoch, __ATOMIC_RELAXED),
                                               fo->seen, fo->proposed);
    fo->sw_gen = t->gen;
    c->tr->switching(c, t); /* wrap mode: DELIVERED first (what the receiver must hold) */
    struct lg_ctrl f = {.type = LG_CTRL_SWITCH, .epoch = fo->sw_epoch,
                        .value = (uint64_t)fo->sw_target};
    lg_path_ctrl_send(t, &f);
    fo->sw_sent_ns = now;
    fo->sw_phase = LG_SW_WAIT;
}

static void start_switch(struct lg_conn *c, const struct lg_fo_decision *d, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    fo->sw_target = d->target;
    fo->sw_graceful = d->action == LG_FO_GRACEFUL;
    fo->sw_t0 = now;
    fo->sw_trigger_ns = fo->trigger_ns ? fo->trigger_ns : now;
    reason(c, d, now, fo->sw_reason, sizeof(fo->sw_reason));
    set_hold(c, fo->sw_graceful ? LG_HOLD_BOUNDARY : LG_HOLD_ALL);
    if (fo->sw_graceful) {
        fo->sw_phase = LG_SW_QUIESCE;
        lg_send_ask_ack(c); /* kept sends are acked in batches: the quiesce wants them now */
    } else
        send_switch(c, now);
}

static void tx_commit(struct lg_conn *c, uint32_t epoch, int target, uint64_t n, uint32_t gen,
                      uint64_t rx_ns, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    struct lg_path *p = c->paths[target];
    if (epoch > fo->seen)
        fo->seen = epoch;
    if (!lg_path_up(p) || p->gen != gen)
        return; /* gone meanwhile: the peer is ahead now, and we propose again */
    int later = fo->sw_phase != LG_SW_NONE && fo->sw_epoch > epoch; /* ours is still coming */
    struct lg_path *old = c->active_path;
    int from = c->active;
    /* The same path, and a transport that keeps its order there: nothing is sent again. The
     * transport holds NCCL's thread off across the rewind (commit_begin). */
    int same = c->tr->keeps_order_in_place && old == p;
    c->tr->commit_begin(c, old, p);
    pthread_mutex_lock(&c->mu);
    uint64_t cur = c->cursor_seq > c->sent_hi ? c->cursor_seq : c->sent_hi;
    uint64_t acked = __atomic_load_n(&c->acked, __ATOMIC_RELAXED);
    int bad = lg_resync_check(n, acked, cur);
    if (bad) {
        pthread_mutex_unlock(&c->mu);
        c->tr->commit_end(c, old, old); /* nothing changed */
        /* A transport whose completions count as acknowledgements (LINKGUARD_INNER_PLACED)
         * may be the liar: it completed sends it had not placed. */
        lg_conn_peer_lied(c, "RESYNC at epoch %u to message #%llu, but %s #%llu%s",
                          epoch, (unsigned long long)n,
                          bad == -1 ? "it had acknowledged every message below" :
                                      "we sent only the messages below",
                          (unsigned long long)(bad == -1 ? acked : cur),
                          bad == -1 ? " (or the transport completed sends it had not placed)"
                                    : "");
        return;
    }
    c->sent_hi = cur;
    uint64_t replay = same ? 0 : lg_resync_tx_rewind(&c->cursor_seq, lg_conn_to_boundary(c),
                                                          &c->acked, n);
    __atomic_store_n(&c->epoch, epoch, __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->active, target, __ATOMIC_RELEASE);
    c->active_path = p;
    __atomic_store_n(&c->hold, later ? LG_HOLD_ALL : LG_HOLD_NONE, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->mu);
    c->tr->commit_end(c, old, p);
    c->tr->resume(p);
    uint64_t t0 = fo->sw_trigger_ns ? fo->sw_trigger_ns : rx_ns;
    LG_INFO(NCCL_NET, "send conn %016llx: %s: %s path on NIC %s -> %s path on NIC %s (%s); "
            "epoch %u, replaying %llu message(s) from #%llu (cursor was #%llu); switch took "
            "%.2f ms", (unsigned long long)c->nonce, switch_word(from, target), lg_slot_name(from),
            lg_conn_nic(c, from), lg_slot_name(target), p->nic,
            fo->sw_reason[0] ? fo->sw_reason : "the peer moved", epoch,
            (unsigned long long)replay, (unsigned long long)n, (unsigned long long)cur,
            lg_ms_since(t0, now));
    census_count(c, from, target);
    if (!later) {
        fo->sw_phase = LG_SW_NONE;
        fo->sw_reason[0] = 0;
        fo->sw_trigger_ns = 0;
    }
    fo->trigger_ns = 0;
    fo->hb_force = 1;
    if (old && old != p && old->index == 0 && !old->retired) {
        /* Fence the primary we left; it is rebuilt fresh when healthy again. */
        struct lg_fo_slot *sl = &fo->slot[0];
        sl->noted = 1;
        sl->delay_ns = LG_MS(lg_params.rejoin_ms);
        sl->next_try_ns = rebuild_at(now, sl->delay_ns);
        lg_path_retire_later(old);
    } else if (old && old != p && c->tr->fresh_on_leave && !old->retired) {
        c->tr->rearm(old); /* the backup left at reintegration: a fresh comm */
    }
}

static void tx_rejoin(struct lg_conn *c, int i, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    struct lg_fo_slot *sl = &fo->slot[i];
    char why[160] = "";
    if (sl->rj.path) {
        uint64_t t0 = sl->rj.t0;
        int rc = lg_rejoin_tx_progress(c, i, now, why, sizeof(why));
        if (rc > 0) {
            sl->up_since_ns = now;
            sl->noted = 0;
            fo->hb_force = 1;
            char ports[96];
            lg_path_ports(c->paths[i], ports, sizeof(ports), 0);
            LG_INFO(NCCL_NET, "send conn %016llx: %s path on NIC %s rebuilt (gen %u) in %.1f ms; "
                    "local ports: %s", (unsigned long long)c->nonce, lg_slot_name(i),
                    c->paths[i]->nic, c->paths[i]->gen, lg_ms_since(t0, now), ports);
        } else if (rc < 0) {
            sl->delay_ns = LG_MIN(2 * sl->delay_ns, LG_MS(lg_params.rejoin_max_ms));
            sl->next_try_ns = rebuild_at(now, sl->delay_ns);
            LG_INFO(NCCL_NET, "send conn %016llx: rebuilding the %s path on NIC %s failed (%s); "
                    "next try in %.0f ms", (unsigned long long)c->nonce, lg_slot_name(i),
                    lg_conn_nic(c, i), why, sl->delay_ns / 1e6);
        }
        return;
    }
    struct lg_path *p = c->paths[i];
    if ((p ? lg_path_up(p) || !p->retired : !c->upgradable) || now < sl->next_try_ns)
        return;
    /* A spread backup whose NIC is unusable moves to another member of its set first. */
    if (i == 1 && !lg_health_usable(sl->local_state) && lg_spread_move(c)) {
        sl->nic_idx = lg_health_find(c->nic[1]);
        sl->local_state = lg_health_state(sl->nic_idx, NULL);
        LG_INFO(NCCL_NET, "send conn %016llx: backup path moves to NIC %s (spread)",
                (unsigned long long)c->nonce, c->nic[1]);
    }
    /* Our daemon must call the NIC usable; so must the peer's, as far as we can hear it. */
    int heard = works(c, 0, now) || works(c, 1, now);
    if (!lg_health_usable(sl->local_state) ||
        (heard && LG_HB_NIC(fo->peer_flags, i) != LG_HB_NIC_OK))
        return;
    int rc = lg_rejoin_tx_start(c, i, now);
    if (rc > 0) {
        sl->next_try_ns = now + LG_MS(2); /* the process's rebuild budget is spent: its turn comes */
    } else if (rc < 0) {
        sl->delay_ns = LG_MIN(2 * sl->delay_ns, LG_MS(lg_params.rejoin_max_ms));
        sl->next_try_ns = rebuild_at(now, sl->delay_ns);
    }
}

/* After a return of one of its device's NICs, an idle standby piled on a member with more of
 * the device's backups than another moves there (spread.h, "Re-spreading"): closed, and
 * rebuilt on the new member at once. Lossless: only a standby that carries nothing, while the
 * primary carries and nothing else changes the paths, is touched; one that is not idle looks
 * again at a later run, and so does one the period's budget refused. */
static void respread(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    if (!c->spread_held)
        return; /* a pair, or wrap mode: never spread */
    uint32_t gen = lg_spread_gen(c->dev);
    if (fo->respread_gen == gen)
        return;
    struct lg_path *sb = c->paths[1];
    struct lg_spread_standby s = {
        .spread = c->spread_held,
        .active = c->active,
        .committed = c->active_path == c->paths[c->active],
        .primary_works = works(c, 0, now),
        .standby_up = lg_path_up(sb) && c->tr->carries(sb),
        .switching = fo->sw_phase != LG_SW_NONE,
        .rebuilding = fo->slot[0].rj.path || fo->slot[1].rj.path,
        .held = __atomic_load_n(&c->hold, __ATOMIC_RELAXED) != LG_HOLD_NONE,
    };
    if (!lg_spread_may_move(&s))
        return;
    char from[IFNAMSIZ];
    lg_nic_name_copy(from, c->nic[1]);
    int t = lg_spread_respread(c, now);
    if (t == LG_SPREAD_LATER)
        return;
    fo->respread_gen = gen;
    if (t < 0)
        return; /* even already */
    struct lg_fo_slot *sl = &fo->slot[1];
    sl->nic_idx = lg_health_find(c->nic[1]);
    sl->local_state = lg_health_state(sl->nic_idx, NULL);
    sl->respread = 1;
    LG_INFO(NCCL_NET, "send conn %016llx: idle standby backup path moves from NIC %s to NIC %s "
            "(re-spread after a return)", (unsigned long long)c->nonce, from, c->nic[1]);
    lg_conn_path_failed(sb, 0, "closed to re-spread the backups: rebuilt on another member");
}

static void tx_step(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    /* A standby the peer declared failed (this generation) is failed here too, so that it is
     * rebuilt: were its fence's EOF lost, it would stand here as a zombie for good. */
    for (int i = 0; i < LG_NPATHS; i++)
        if (i != c->active && lg_path_up(c->paths[i]) && peer_failed(c, i))
            lg_conn_path_failed(c->paths[i], 0, "declared failed by the peer");
    /* A spread backup on a NIC our daemon calls unusable, and no primary to take the data:
     * failed here, so that it is rebuilt on another member of its set (spread.h). */
    if (c->spread_held && lg_path_up(c->paths[1]) && !works(c, 0, now) &&
        !lg_health_usable(fo->slot[1].local_state))
        lg_conn_path_failed(c->paths[1], 0, "its NIC is not usable (daemon): the backup moves");
    pthread_mutex_lock(&c->mb_mu);
    uint32_t re = c->mb.resync_epoch, rgen = c->mb.resync_gen;
    int rt = c->mb.resync_target;
    uint64_t rn = c->mb.resync_n, rx_ns = c->mb.resync_rx_ns;
    pthread_mutex_unlock(&c->mb_mu);
    if (lg_epoch_newer(re, __atomic_load_n(&c->epoch, __ATOMIC_RELAXED))) {
        if (re > fo->proposed) {
            lg_conn_peer_lied(c, "RESYNC at epoch %u, which we never proposed (newest %u)", re,
                              fo->proposed);
            return;
        }
        tx_commit(c, re, rt, rn, rgen, rx_ns, now);
    }

    if (fo->sw_phase != LG_SW_NONE) {
        struct lg_path *t = c->paths[fo->sw_target];
        if (!lg_path_up(t) || (fo->sw_phase == LG_SW_WAIT && t->gen != fo->sw_gen)) {
            fo->sw_phase = LG_SW_NONE; /* the target died meanwhile: decide again */
        } else if (fo->sw_phase == LG_SW_QUIESCE) {
            pthread_mutex_lock(&c->mu);
            int drained = !lg_conn_mid_message(c) &&
                          __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE) >= c->cursor_seq;
            pthread_mutex_unlock(&c->mu);
            if (drained || now - fo->sw_t0 >= LG_MS(lg_params.quiesce_ms))
                send_switch(c, now);
        } else if (now - fo->sw_sent_ns >= LG_MS(lg_params.switch_timeout_ms)) {
            LG_INFO(NCCL_NET, "send conn %016llx: no RESYNC for epoch %u after %.0f ms; "
                    "proposing again", (unsigned long long)c->nonce, fo->sw_epoch,
                    lg_ms_since(fo->sw_sent_ns, now));
            send_switch(c, now);
        }
    }
    if (fo->sw_phase == LG_SW_NONE) {
        struct lg_fo_view v = {.active = c->active, .reintegrate = (int)lg_params.reintegrate,
                               .peer_ahead = fo->seen > __atomic_load_n(&c->epoch, __ATOMIC_RELAXED)};
        for (int i = 0; i < LG_NPATHS; i++) {
            struct lg_path *p = c->paths[i];
            struct lg_fo_slot_view *s = &v.slot[i];
            uint8_t local = nic_code(fo->slot[i].local_state);
            uint8_t peer = LG_HB_NIC(fo->peer_flags, i);
            /* A path to switch to must carry (wrap mode: its inner comm is up); the active
             * one may still be completing its handshake (connect time). */
            s->up = lg_path_up(p) && (i == c->active || c->tr->carries(p));
            s->silent = s->up && !fo->late && silent(p, now);
            /* The active path's silence is its fault only if the other kept talking (a
             * starved peer falls quiet on both, and wakes on both: kept_talking). */
            if (s->silent && i == c->active && lg_path_up(c->paths[1 - i]) &&
                !kept_talking(c->paths[1 - i], p))
                s->silent = 0;
            s->peer_failed = peer_failed(c, i);
            s->down = local == LG_HB_NIC_DOWN || peer == LG_HB_NIC_DOWN;
            s->leave = local == LG_HB_NIC_LEAVE || peer == LG_HB_NIC_LEAVE;
            /* Its own verdict, or another connection's on the same NIC (nic_gray.h). */
            s->gray = now < fo->slot[i].gray_until ||
                      now < lg_nic_gray_until(lg_conn_nic(c, i), NULL, 0);
            s->committed = p && p == c->active_path && i == c->active;
        }
        struct lg_fo_decision d = lg_fo_decide(&v);
        if (d.action == LG_FO_URGENT || d.action == LG_FO_GRACEFUL)
            start_switch(c, &d, now);
        else if (__atomic_load_n(&c->hold, __ATOMIC_RELAXED) != LG_HOLD_NONE &&
                 d.action == LG_FO_NONE) {
            set_hold(c, LG_HOLD_NONE); /* an abandoned switch: carry on where we are */
            c->tr->resume(c->paths[c->active]);
        }
    }
    respread(c, now);
    for (int i = 0; i < LG_NPATHS; i++)
        tx_rejoin(c, i, now);
}

/* ---- receiver: committing ----------------------------------------------------------------- */

static void rx_commit(struct lg_conn *c, uint32_t epoch, int target, uint64_t rx_ns, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    struct lg_path *p = c->paths[target], *old = c->active_path;
    int from = c->active;
    c->tr->commit_begin(c, old, p); /* wrap mode: NCCL's thread held off, what was placed kept */
    pthread_mutex_lock(&c->mu);
    __atomic_store_n(&c->active, target, __ATOMIC_RELEASE);
    c->active_path = p;
    __atomic_store_n(&c->epoch, epoch, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    /* Before the RESYNC: nothing late lands after it (TCP: every reader drops what is not
     * of `epoch` from here, and those inside a step that began before are waited for). */
    c->tr->commit_end(c, old, p);
    pthread_mutex_lock(&c->mu);
    uint64_t base = c->win.base;
    int reset = lg_resync_rx_reset(c->reqs, base, __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE));
    __atomic_store_n(&c->rx_open, epoch, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    fo->wd_commit_ns = now;
    struct lg_ctrl f = {.type = LG_CTRL_RESYNC, .flags = (uint8_t)target, .epoch = epoch,
                        .value = base};
    lg_path_ctrl_send(p, &f);
    c->tr->resume(p);
    if (old && old != p)
        c->tr->resume(old); /* standby again: its streams go back to waking a worker */
    uint64_t t0 = fo->trigger_ns && fo->trigger_ns < rx_ns ? fo->trigger_ns : rx_ns;
    LG_INFO(NCCL_NET, "recv conn %016llx: %s: %s path on NIC %s -> %s path on NIC %s at epoch "
            "%u (asked by the sender); %d partial receive(s) reset, resuming at message #%llu; "
            "switch took %.2f ms", (unsigned long long)c->nonce, switch_word(from, target),
            lg_slot_name(from), lg_conn_nic(c, from), lg_slot_name(target), p->nic, epoch, reset,
            (unsigned long long)base, lg_ms_since(t0, now));
    census_count(c, from, target);
    fo->trigger_ns = 0;
    fo->hb_force = 1;
    if (old && old != p && old->index == 0 && !old->retired) {
        fo->slot[0].noted = 1;
        lg_path_retire_later(old);
    } else if (old && old != p && c->tr->fresh_on_leave && !old->retired) {
        c->tr->rearm(old); /* fenced before the RESYNC; now its next comm */
    }
}

static void rx_step(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    pthread_mutex_lock(&c->mb_mu);
    uint32_t e = c->mb.switch_epoch, gen = c->mb.switch_gen;
    int t = c->mb.switch_target;
    uint64_t rx_ns = c->mb.switch_rx_ns;
    pthread_mutex_unlock(&c->mb_mu);
    if (lg_epoch_newer(e, __atomic_load_n(&c->epoch, __ATOMIC_RELAXED))) {
        struct lg_path *p = c->paths[t];
        if (lg_path_up(p) && p->gen == gen)
            rx_commit(c, e, t, rx_ns, now);
        else if (e > fo->seen)
            fo->seen = e;
    }
    for (int i = 0; i < LG_NPATHS; i++)
        lg_rejoin_rx_step(c, i, now);
}

/* ---- a connection built without its backup ------------------------------------------------ */

/* The sender keeps trying to build the backup path (as a rebuild: same backoff, same rule that
 * our daemon must call the NIC usable); the receiver files it like any rebuilt path. Both
 * send heartbeats meanwhile. */
static uint64_t add_backup(struct lg_conn *c, uint64_t now)
{
    struct lg_fo_slot *sl = &c->fo.slot[1];
    eval_health(c, now);
    if (c->kind == LG_CONN_SEND)
        tx_rejoin(c, 1, now);
    else
        lg_rejoin_rx_step(c, 1, now);
    /* Heartbeats already: the receiver counts itself protected as soon as it has filed the
     * path, and judges our primary's silence from then on. */
    heartbeats(c, now);
    if (sl->rj.path)
        return now + LG_MS(2);
    uint64_t next = now + LG_MS(lg_params.heartbeat_ms);
    return c->kind == LG_CONN_SEND && sl->next_try_ns > now && sl->next_try_ns < next
               ? sl->next_try_ns : next;
}

/* ---- a connection without protection ---------------------------------------------------- */

/* No backup path (its NIC was down at connect, LINKGUARD_BACKUP=0, the standalone lgtcp):
 * nothing to fail over to, but a peer that went silent must end in a clear error, never a
 * hang. Both sides send heartbeats, so an idle connection is heard; nothing read for
 * LINKGUARD_DEAD_TIMEOUT_MS fails it. Silence is counted run by run, each at most what the
 * protected check allows (time this process was starved is not held against the peer), and
 * only once the peer has sent a heartbeat (one that never does predates them: no verdict). */
static uint64_t unprotected_step(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    uint64_t hb = LG_MS(lg_params.heartbeat_ms);
    struct lg_path *p = c->paths[c->active];
    uint64_t gap = fo->last_run_ns ? now - fo->last_run_ns : 0;
    fo->last_run_ns = now;
    if (c->kind == LG_CONN_SEND) {
        pump(p, now); /* test() reads it only while NCCL polls */
    }
    c->tr->watch(c, now);
    heartbeats(c, now);
    pthread_mutex_lock(&c->mb_mu);
    int heard_hb = c->mb.hb_valid;
    pthread_mutex_unlock(&c->mb_mu);
    if (!heard_hb || !lg_path_up(p) || !silent(p, now)) {
        fo->stall_since = 0;
        return now + hb;
    }
    if (!fo->stall_since) {
        fo->stall_since = now;
        fo->stalled_ns = LG_MS(lg_params.silent_timeout_ms);
        return now + hb;
    }
    fo->stalled_ns += LG_MIN(gap, late_gap_ns());
    if (fo->stalled_ns < LG_MS(lg_params.dead_timeout_ms))
        return now + hb;
    double quiet = lg_ms_since(lg_path_rx_ns(p), now);
    if (lg_conn_fail(c, LG_FAIL_TIMEOUT, ncclRemoteError, "nothing heard from the peer for %.0f ms",
                     quiet))
        LG_WARN("%s conn %016llx on dev %d: nothing heard from the peer for %.0f ms on the %s "
                "path on NIC %s to %s, and the connection has no backup path "
                "(LINKGUARD_DEAD_TIMEOUT_MS=%lld); failing the connection",
                lg_conn_kind_str(c), (unsigned long long)c->nonce, c->dev, quiet, lg_slot_name(p->index),
                p->nic, p->peer, (long long)lg_params.dead_timeout_ms);
    return now + 20 * hb;
}

/* ---- one run ------------------------------------------------------------------------------- */

/* A connection with nothing in flight needs few runs: its silence is judged when due (the run
 * is woken then), the peer's frames and its paths' failures wake it, and so does a change in
 * the daemon's table. Its runs come this many heartbeat periods apart, still well inside
 * late_gap_ns (a run that late judges nothing). */
#define LG_IDLE_RUN_PERIODS 4

static int idle(const struct lg_conn *c)
{
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    uint64_t done = c->kind == LG_CONN_SEND ? __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE)
                                            : __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE);
    /* A receiver holding a batched ack (window.c) is not idle: its next run sends it. */
    return posted == done &&
           (c->kind == LG_CONN_SEND || __atomic_load_n(&c->ack_sent, __ATOMIC_ACQUIRE) == done);
}

uint64_t lg_fo_run(struct lg_conn *c, uint64_t now)
{
    struct lg_fo *fo = &c->fo;
    uint64_t hb = LG_MS(lg_params.heartbeat_ms);
    int handshaking = c->tr->step(c, now); /* wrap mode: inner comms of new paths */
    if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE))
        return now + 20 * hb;
    if (!__atomic_load_n(&c->protected_, __ATOMIC_ACQUIRE)) {
        uint64_t next = unprotected_step(c, now);
        if (c->upgradable) {
            uint64_t up = add_backup(c, now);
            next = up < next ? up : next;
        }
        return handshaking ? now + LG_MS(1) : next;
    }
    if (c->kind == LG_CONN_SEND)
        /* test() reads the active control channel only while NCCL polls: read it here too,
         * so heartbeats are seen on an idle connection. */
        for (int i = 0; i < LG_NPATHS; i++)
            pump(c->paths[i], now);
    /* A run far behind its schedule means this process was starved (CPU, a stop): silence
     * measured across it says nothing about the paths. Judge at the next run instead. */
    uint64_t gap = fo->last_run_ns ? now - fo->last_run_ns : 0;
    int late = gap > late_gap_ns();
    /* ... but a process that stays that slow must still see dead paths: a few runs at most. */
    fo->late_runs = late ? fo->late_runs + 1 : 0;
    late = late && fo->late_runs <= 3;
    fo->late = late;
    fo->last_run_ns = now;
    eval_health(c, now);
    read_peer(c, now);
    if (note_failures(c, now))
        return now + 20 * hb;
    if (!late) {
        check_silence(c, now);
        c->tr->watch(c, now);
        if (c->kind == LG_CONN_SEND)
            c->tr->goodput(c, now);
    }
    if (note_failures(c, now))
        return now + 20 * hb;
    if (c->kind == LG_CONN_SEND)
        tx_step(c, now);
    else
        rx_step(c, now);
    heartbeats(c, now);
    if (c->kind == LG_CONN_RECV && lg_path_up(c->active_path))
        lg_recv_flush_ack(c->active_path); /* a batched ack waits at most one run */
    if (late)
        return now + LG_MS(1);
    if (dead_check(c, now, gap))
        return now + 20 * hb;
    uint64_t next = now + (idle(c) ? LG_IDLE_RUN_PERIODS * hb : hb);
    if (fo->sw_phase != LG_SW_NONE || fo->slot[0].rj.path || fo->slot[1].rj.path)
        next = now + LG_MS(2);
    if (handshaking)
        next = now + LG_MS(1);
    struct lg_path *pa = c->paths[c->active];
    if (lg_path_up(pa)) { /* wake up right when the active path would count as silent */
        uint64_t due = lg_path_rx_ns(pa) + LG_MS(lg_params.silent_timeout_ms) + LG_MS(1);
        if (due > now && due < next)
            next = due;
    }
    for (int i = 0; c->kind == LG_CONN_SEND && i < LG_NPATHS; i++)
        if (fo->slot[i].next_try_ns > now && fo->slot[i].next_try_ns < next &&
            !lg_path_up(c->paths[i]))
            next = fo->slot[i].next_try_ns;
    return next;
}
