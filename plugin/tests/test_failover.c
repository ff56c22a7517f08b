/* The pure parts of failover: epochs, the receiver's chunk verdict, resync accounting on both
 * sides, the sender's switch decision (from tables), and a randomized model of the whole
 * epoch protocol (paths failing and coming back, frames lost with them, switches proposed
 * again, both sides noticing at once) checked for: every chunk placed, nothing placed into a
 * completed message, nothing acknowledged before it is placed, and convergence. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "transport/tcp/goodput.h"

static void test_epochs(void)
{
    CHECK_EQ(lg_epoch_next(0, 0, 0), 1);
    CHECK_EQ(lg_epoch_next(3, 7, 5), 8);
    CHECK_EQ(lg_epoch_next(9, 2, 4), 10);
    CHECK_EQ(lg_epoch_next(1, 1, 6), 7); /* a re-proposal goes above our own last one */
    /* Never beyond one step above the committed epoch, never past the limit: the same epoch
     * is proposed again instead (issue #16, finding 5: 0xffffffff wrapped to 0). */
    CHECK_EQ(lg_epoch_next(5, 5, 5 + LG_EPOCH_MAX_STEP), 5 + LG_EPOCH_MAX_STEP);
    CHECK_EQ(lg_epoch_next(5, 5, 4 + LG_EPOCH_MAX_STEP), 5 + LG_EPOCH_MAX_STEP);
    CHECK_EQ(lg_epoch_next(LG_EPOCH_LIMIT - 1, 0, 0), LG_EPOCH_LIMIT);
    CHECK_EQ(lg_epoch_next(LG_EPOCH_LIMIT, 0, LG_EPOCH_LIMIT), LG_EPOCH_LIMIT);
    CHECK_EQ(lg_epoch_next(0, UINT32_MAX, UINT32_MAX), LG_EPOCH_MAX_STEP);
    CHECK(lg_epoch_plausible(1, 0));
    CHECK(lg_epoch_plausible(LG_EPOCH_MAX_STEP, 0));
    CHECK(!lg_epoch_plausible(LG_EPOCH_MAX_STEP + 1, 0));
    CHECK(!lg_epoch_plausible(UINT32_MAX, 0));
    CHECK(!lg_epoch_plausible(UINT32_MAX, UINT32_MAX - 1)); /* a step, but past the limit */
    CHECK(lg_epoch_plausible(LG_EPOCH_LIMIT, LG_EPOCH_LIMIT - 1));
    CHECK(!lg_epoch_plausible(7, 7));
    CHECK(!lg_epoch_plausible(6, 7));
    CHECK(lg_epoch_newer(2, 1));
    CHECK(!lg_epoch_newer(1, 1));
    CHECK(!lg_epoch_newer(0, 1));
    CHECK(lg_epoch_matches(5, 5));
    CHECK(lg_epoch_matches(5, 0x10005)); /* chunks carry the low 16 bits */
    CHECK(!lg_epoch_matches(4, 5));
}

static void test_chunk_verdict(void)
{
    const uint32_t P = LG_REQ_POSTED, D = LG_REQ_POSTED | LG_REQ_DONE;
    struct {
        uint16_t hdr_epoch;
        uint32_t epoch;
        uint64_t seq, slot_seq;
        uint32_t state;
        enum lg_chunk_verdict want;
    } t[] = {
        {3, 3, 10, 10, P, LG_CHUNK_PLACE},
        {2, 3, 10, 10, P, LG_CHUNK_STALE},  /* sent before the switch */
        {4, 3, 10, 10, P, LG_CHUNK_STALE},  /* from an epoch we never committed */
        {3, 3, 10, 10, D, LG_CHUNK_DUP},    /* complete: a replay of it is dropped */
        {3, 3, 10, 10, 0, LG_CHUNK_DUP},    /* complete and handed to NCCL */
        {3, 3, 10, 74, P, LG_CHUNK_DUP},    /* ... and its slot reposted */
        {3, 3, 10, 74, 0, LG_CHUNK_DUP},
        {3, 3, 74, 10, P, LG_CHUNK_BAD},    /* a slot behind the chunk: impossible */
        {2, 3, 10, 74, P, LG_CHUNK_STALE},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        CHECK_EQ(lg_resync_chunk_verdict(t[i].hdr_epoch, t[i].epoch, t[i].seq, t[i].slot_seq,
                                         t[i].state),
                 t[i].want);
}

/* What a sender accepts from the receiver (issue #16, findings 2 and 3). */
static void test_peer_claims(void)
{
    CHECK(lg_ack_plausible(0, 0));
    CHECK(lg_ack_plausible(5, 5));
    CHECK(!lg_ack_plausible(6, 5)); /* a message whose chunks were not all handed out */
    CHECK_EQ(lg_resync_check(5, 5, 9), 0);
    CHECK_EQ(lg_resync_check(9, 5, 9), 0);
    CHECK_EQ(lg_resync_check(4, 5, 9), -1); /* below what it acknowledged: a replay of
                                             * finished messages */
    CHECK_EQ(lg_resync_check(10, 5, 9), -2);
}

static void test_rx_reset(void)
{
    static struct lg_req reqs[LG_WINDOW];
    memset(reqs, 0, sizeof(reqs));
    /* Messages 60..69 posted (the window wraps); 60 done, 61 partial, 62 untouched, 63 done
     * out of order, 64 partial with its size known, 65.. untouched. */
    for (uint64_t s = 60; s < 70; s++) {
        struct lg_req *r = &reqs[s % LG_WINDOW];
        r->seq = s;
        r->state = LG_REQ_POSTED;
        r->total = UINT64_MAX;
    }
    reqs[60 % LG_WINDOW].state |= LG_REQ_DONE;
    reqs[60 % LG_WINDOW].placed = 100;
    reqs[60 % LG_WINDOW].total = 100;
    reqs[61 % LG_WINDOW].placed = 4096;
    reqs[61 % LG_WINDOW].total = 10000;
    reqs[63 % LG_WINDOW].state |= LG_REQ_DONE;
    reqs[63 % LG_WINDOW].placed = 7;
    reqs[63 % LG_WINDOW].total = 7;
    reqs[64 % LG_WINDOW].total = 0; /* a zero-byte message whose header came */
    /* 61 has chunks 0 and 2 of 3 claimed, one of them placed: all forgotten. */
    uint64_t cover61 = 0x5;
    reqs[61 % LG_WINDOW].cover = &cover61;
    reqs[61 % LG_WINDOW].cover_words = 1;
    reqs[61 % LG_WINDOW].chunks = 1;
    /* base 61: message 60 is below it and not touched even though listed. */
    CHECK_EQ(lg_resync_rx_reset(reqs, 61, 70), 2);
    CHECK_EQ(reqs[60 % LG_WINDOW].placed, 100);
    CHECK_EQ(reqs[61 % LG_WINDOW].placed, 0);
    CHECK(reqs[61 % LG_WINDOW].total == UINT64_MAX);
    CHECK_EQ(cover61, 0);
    CHECK_EQ(reqs[61 % LG_WINDOW].chunks, 0);
    CHECK_EQ(reqs[63 % LG_WINDOW].placed, 7); /* complete: kept (its replay is dropped) */
    CHECK(reqs[63 % LG_WINDOW].total == 7);
    CHECK(reqs[64 % LG_WINDOW].total == UINT64_MAX);
    CHECK_EQ(lg_resync_rx_reset(reqs, 61, 70), 0); /* idempotent */
    CHECK_EQ(lg_resync_rx_reset(reqs, 70, 70), 0);
}

static void test_tx_rewind(void)
{
    uint64_t seq = 12, acked = 9;
    /* Receiver placed 10: replay 10, 11 and the partly cut 12 (the cursor inside it). */
    CHECK_EQ(lg_resync_tx_rewind(&seq, 1, &acked, 10), 3);
    CHECK_EQ(seq, 10);
    CHECK_EQ(acked, 10); /* the RESYNC count is an ack */
    seq = 12, acked = 9;
    CHECK_EQ(lg_resync_tx_rewind(&seq, 0, &acked, 10), 2); /* at 12's start: 10 and 11 */
    seq = 20, acked = 20;
    CHECK_EQ(lg_resync_tx_rewind(&seq, 0, &acked, 20), 0); /* drained: nothing again */
    CHECK_EQ(seq, 20);
    seq = 30, acked = 29;
    CHECK_EQ(lg_resync_tx_rewind(&seq, 0, &acked, 25), 5);
    CHECK_EQ(acked, 29); /* never backwards */
}

/* ---- the decision, from tables ---------------------------------------------------------- */

#define S(up_, sil, pf, dn, lv, cm) {.up = up_, .silent = sil, .peer_failed = pf, .down = dn, .leave = lv, .committed = cm}
/* A path that carries but loses data (goodput.h), or is held off since it did. */
#define G(lv, cm) {.up = 1, .leave = lv, .gray = 1, .committed = cm}

static void test_decide(void)
{
    struct {
        const char *what;
        struct lg_fo_view v;
        enum lg_fo_action act;
        int target;
        enum lg_fo_why why;
    } t[] = {
        {"healthy primary", {0, 0, 1, {S(1, 0, 0, 0, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_NONE, 0, LG_WHY_NONE},
        {"primary failed", {0, 0, 1, {S(0, 0, 0, 0, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 1, LG_WHY_FAILED},
        {"primary silent", {0, 0, 1, {S(1, 1, 0, 0, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 1, LG_WHY_SILENT},
        {"peer says failed", {0, 0, 1, {S(1, 0, 1, 0, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 1, LG_WHY_PEER_FAILED},
        {"daemon: DOWN", {0, 0, 1, {S(1, 0, 0, 1, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 1, LG_WHY_DOWN},
        {"daemon: DRAINED", {0, 0, 1, {S(1, 0, 0, 0, 1, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_GRACEFUL, 1, LG_WHY_LEAVE},
        {"DRAINED, backup DEGRADED too: stay", {0, 0, 1, {S(1, 0, 0, 0, 1, 1), S(1, 0, 0, 0, 1, 0)}},
         LG_FO_NONE, 0, LG_WHY_NONE},
        {"DOWN, backup DOWN too: stay while it carries", {0, 0, 1, {S(1, 0, 0, 1, 0, 1), S(1, 0, 0, 1, 0, 0)}},
         LG_FO_NONE, 0, LG_WHY_NONE},
        {"DOWN, backup DRAINED: better than DOWN", {0, 0, 1, {S(1, 0, 0, 1, 0, 1), S(1, 0, 0, 0, 1, 0)}},
         LG_FO_URGENT, 1, LG_WHY_DOWN},
        {"failed, backup only DEGRADED: still go", {0, 0, 1, {S(0, 0, 0, 0, 0, 1), S(1, 0, 0, 0, 1, 0)}},
         LG_FO_URGENT, 1, LG_WHY_FAILED},
        {"failed, backup DOWN but alive: try it", {0, 0, 1, {S(0, 0, 0, 0, 0, 1), S(1, 0, 0, 1, 0, 0)}},
         LG_FO_URGENT, 1, LG_WHY_FAILED},
        {"both failed", {0, 0, 1, {S(0, 0, 0, 0, 0, 1), S(0, 0, 0, 0, 0, 0)}},
         LG_FO_STALL, 0, LG_WHY_FAILED},
        {"failed, backup silent", {0, 0, 1, {S(0, 0, 0, 0, 0, 1), S(1, 1, 0, 0, 0, 0)}},
         LG_FO_STALL, 0, LG_WHY_FAILED},
        {"on backup, primary rebuilt", {1, 0, 1, {S(1, 0, 0, 0, 0, 0), S(1, 0, 0, 0, 0, 1)}},
         LG_FO_GRACEFUL, 0, LG_WHY_REINTEGRATE},
        {"on backup, primary rebuilt, no reintegration", {1, 0, 0, {S(1, 0, 0, 0, 0, 0), S(1, 0, 0, 0, 0, 1)}},
         LG_FO_NONE, 1, LG_WHY_NONE},
        {"on backup, primary RECOVERING: stays out", {1, 0, 1, {S(1, 0, 0, 0, 1, 0), S(1, 0, 0, 0, 0, 1)}},
         LG_FO_NONE, 1, LG_WHY_NONE},
        {"on backup, primary not rebuilt", {1, 0, 1, {S(0, 0, 0, 0, 0, 0), S(1, 0, 0, 0, 0, 1)}},
         LG_FO_NONE, 1, LG_WHY_NONE},
        {"on backup, backup dies, primary back", {1, 0, 1, {S(1, 0, 0, 0, 0, 0), S(0, 0, 0, 0, 0, 1)}},
         LG_FO_URGENT, 0, LG_WHY_FAILED},
        {"peer ahead (lost RESYNC): re-enter where we are", {0, 1, 1, {S(1, 0, 0, 0, 0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 0, LG_WHY_RESYNC},
        {"active slot rebuilt while both were dead", {0, 0, 1, {S(1, 0, 0, 0, 0, 0), S(0, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 0, LG_WHY_NEW_PATH},
        {"primary lossy, backup healthy: leave at a message boundary", {0, 0, 1, {G(0, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_GRACEFUL, 1, LG_WHY_GRAY},
        {"primary lossy, backup lossy too: stay", {0, 0, 1, {G(0, 1), G(0, 0)}},
         LG_FO_NONE, 0, LG_WHY_NONE},
        {"primary lossy, backup DEGRADED: stay", {0, 0, 1, {G(0, 1), S(1, 0, 0, 0, 1, 0)}},
         LG_FO_NONE, 0, LG_WHY_NONE},
        {"primary lossy and DRAINED: the daemon's word is the reason", {0, 0, 1, {G(1, 1), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_GRACEFUL, 1, LG_WHY_LEAVE},
        {"on backup, primary rebuilt but held off for loss: stays out", {1, 0, 1, {G(0, 0), S(1, 0, 0, 0, 0, 1)}},
         LG_FO_NONE, 1, LG_WHY_NONE},
        {"on backup, which fails: a lossy primary is better than none", {1, 0, 1, {G(0, 0), S(0, 0, 0, 0, 0, 1)}},
         LG_FO_URGENT, 0, LG_WHY_FAILED},
        {"active slot rebuilt, backup healthy too: stay on the slot", {0, 0, 1, {S(1, 0, 0, 0, 0, 0), S(1, 0, 0, 0, 0, 0)}},
         LG_FO_URGENT, 0, LG_WHY_NEW_PATH},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lg_fo_decision d = lg_fo_decide(&t[i].v);
        int ok = d.action == t[i].act && (d.action == LG_FO_NONE || d.target == t[i].target) &&
                 d.why == t[i].why;
        if (!ok)
            fprintf(stderr, "decide '%s': action %d target %d why %s\n", t[i].what,
                    (int)d.action, d.target, lg_fo_why_str(d.why));
        CHECK(ok);
    }
}

/* ---- a model of the protocol -------------------------------------------------------------- */

#define M_MSGS 40
#define M_CHUNKS 3
#define M_Q 512

struct m_item {
    int kind; /* 1 chunk, 2 SWITCH, 3 RESYNC, 4 ACK */
    uint32_t epoch;
    uint64_t a, b;
};
struct m_fifo {
    struct m_item q[M_Q];
    int head, n;
};
static void m_push(struct m_fifo *f, struct m_item it)
{
    if (f->n < M_Q)
        f->q[(f->head + f->n++) % M_Q] = it;
}
static int m_pop(struct m_fifo *f, struct m_item *it)
{
    if (!f->n)
        return 0;
    *it = f->q[f->head];
    f->head = (f->head + 1) % M_Q;
    f->n--;
    return 1;
}

static uint64_t rng;
static uint64_t st_commits, st_fails, st_stale, st_dups, st_reproposals;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

struct model {
    /* per path: two data streams and the control channel each way (messages complete out of
     * order across streams, as with LINKGUARD_STREAMS) */
    struct m_fifo data[2][2], fwd[2], back[2];
    int up[2];
    uint32_t gen[2]; /* +1 each time a path dies: a rebuilt one is another path */
    /* sender */
    uint32_t s_epoch, s_seen, s_proposed, s_pending; /* pending: proposed epoch awaited */
    int s_active, s_target;
    uint32_t s_gen, s_target_gen; /* generation of the committed / proposed path */
    uint64_t cursor_seq, cursor_chunk, acked;
    /* receiver */
    uint32_t r_epoch;
    int r_active;
    int placed[M_MSGS][M_CHUNKS];
    int nplaced[M_MSGS], done[M_MSGS];
    uint64_t base;
    int violations;
};

static void m_fail_path(struct model *m, int p)
{
    m->up[p] = 0;
    m->gen[p]++;
    m->fwd[p].n = m->back[p].n = m->data[p][0].n = m->data[p][1].n = 0; /* in flight: lost */
}

static void m_propose(struct model *m, int target)
{
    m->s_pending = m->s_proposed = lg_epoch_next(m->s_epoch, m->s_seen, m->s_proposed);
    m->s_target = target;
    m->s_target_gen = m->gen[target];
    m_push(&m->fwd[target], (struct m_item){2, m->s_pending, (uint64_t)target, 0});
}

static void m_receiver(struct model *m, int p)
{
    struct m_item it;
    if (!m_pop(rnd(3) ? &m->data[p][rnd(2)] : &m->fwd[p], &it))
        return;
    if (it.kind == 2) {
        if (!lg_epoch_newer(it.epoch, m->r_epoch))
            return;
        m->r_epoch = it.epoch;
        m->r_active = (int)it.a;
        st_commits++;
        for (int s = 0; s < M_MSGS; s++) /* the reset lg_resync_rx_reset does */
            if (!m->done[s]) {
                memset(m->placed[s], 0, sizeof(m->placed[s]));
                m->nplaced[s] = 0;
            }
        m_push(&m->back[p], (struct m_item){3, it.epoch, (uint64_t)p, m->base});
        return;
    }
    uint64_t seq = it.a, ck = it.b;
    uint32_t state = LG_REQ_POSTED | (m->done[seq] ? LG_REQ_DONE : 0);
    enum lg_chunk_verdict v = lg_resync_chunk_verdict((uint16_t)it.epoch, m->r_epoch, seq, seq,
                                                      state);
    st_stale += v == LG_CHUNK_STALE;
    st_dups += v == LG_CHUNK_DUP;
    if (v != LG_CHUNK_PLACE)
        return;
    if (m->done[seq] || m->placed[seq][ck])
        m->violations++; /* placed into a complete message, or twice in one epoch */
    m->placed[seq][ck] = 1;
    if (++m->nplaced[seq] == M_CHUNKS) {
        m->done[seq] = 1;
        while (m->base < M_MSGS && m->done[m->base])
            m->base++;
        m_push(&m->back[p], (struct m_item){4, 0, m->base, 0});
    }
}

static void m_sender_rx(struct model *m, int p)
{
    struct m_item it;
    if (!m_pop(&m->back[p], &it))
        return;
    if (it.kind == 4) {
        if (it.a > m->acked)
            m->acked = it.a;
        for (uint64_t s = 0; s < m->acked; s++)
            if (!m->done[s])
                m->violations++; /* acknowledged before it was placed */
        return;
    }
    if (it.epoch > m->s_seen)
        m->s_seen = it.epoch;
    if (!lg_epoch_newer(it.epoch, m->s_epoch) || !m->up[it.a])
        return;
    lg_resync_tx_rewind(&m->cursor_seq, m->cursor_chunk != 0, &m->acked, it.b);
    m->cursor_chunk = 0; /* the transport's own cursor, back to the message's start */
    m->s_epoch = it.epoch;
    m->s_active = (int)it.a;
    m->s_gen = m->gen[it.a];
    if (m->s_pending <= it.epoch)
        m->s_pending = 0;
}

static void m_sender_tx(struct model *m)
{
    if (m->s_pending || m->cursor_seq >= M_MSGS || !m->up[m->s_active] ||
        m->gen[m->s_active] != m->s_gen)
        return;
    m_push(&m->data[m->s_active][rnd(2)],
           (struct m_item){1, m->s_epoch, m->cursor_seq, m->cursor_chunk});
    if (++m->cursor_chunk == M_CHUNKS) {
        m->cursor_seq++;
        m->cursor_chunk = 0;
    }
}

static int model_run(uint64_t seed)
{
    struct model *m = calloc(1, sizeof(*m));
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    m->up[0] = m->up[1] = 1;
    int steps = 0;
    while (m->base < M_MSGS && steps++ < 200000) {
        switch (rnd(12)) {
        case 0:
            if (rnd(15) == 0) { /* a path dies (sometimes both) */
                st_fails++;
                m_fail_path(m, (int)rnd(2));
                if (rnd(4) == 0)
                    m_fail_path(m, (int)rnd(2));
            }
            break;
        case 1:
            if (rnd(20) == 0) /* rebuilt */
                m->up[rnd(2)] = 1;
            break;
        case 2: { /* the sender decides (one of the ways it learns: error, silence, daemon) */
            int a = m->s_active, o = 1 - a;
            int a_ok = m->up[a] && m->gen[a] == m->s_gen; /* a rebuilt slot needs an epoch */
            int peer_ahead = m->r_epoch > m->s_epoch && rnd(3) == 0; /* via a heartbeat */
            if (m->s_pending &&
                (!m->up[m->s_target] || m->gen[m->s_target] != m->s_target_gen))
                m->s_pending = 0; /* target died: decide again */
            if (m->s_pending && rnd(50) == 0)
                m_propose(m, m->s_target), st_reproposals++; /* switch timeout: again, higher */
            else if (!m->s_pending && (!a_ok || peer_ahead) && (m->up[o] || m->up[a]))
                m_propose(m, m->up[o] && !a_ok ? o : a);
            else if (!m->s_pending && a_ok && m->up[o] && rnd(40) == 0)
                m_propose(m, o); /* a graceful move or a reintegration */
            break;
        }
        default: {
            int p = (int)rnd(2);
            if (rnd(2))
                m_receiver(m, p);
            else
                m_sender_rx(m, p);
            m_sender_tx(m);
        }
        }
        /* Liveness: if both paths stay down forever nothing moves; bring one back. */
        if (!m->up[0] && !m->up[1] && rnd(10) == 0)
            m->up[rnd(2)] = 1;
    }
    int ok = m->base == M_MSGS && m->violations == 0;
    for (int s = 0; ok && s < M_MSGS; s++)
        for (int k = 0; k < M_CHUNKS; k++)
            ok &= m->placed[s][k];
    if (!ok)
        fprintf(stderr, "model seed %llu: base %llu violations %d after %d steps\n",
                (unsigned long long)seed, (unsigned long long)m->base, m->violations, steps);
    free(m);
    return ok;
}

static void test_model(void)
{
    int bad = 0;
    for (uint64_t seed = 1; seed <= 3000; seed++)
        bad += !model_run(seed);
    CHECK_EQ(bad, 0);
    /* The model must actually exercise the protocol. */
    printf("model: %llu path failures, %llu commits, %llu re-proposals, %llu stale and %llu "
           "duplicate chunks dropped\n", (unsigned long long)st_fails,
           (unsigned long long)st_commits, (unsigned long long)st_reproposals,
           (unsigned long long)st_stale, (unsigned long long)st_dups);
    CHECK(st_fails > 3000 && st_commits > 3000 && st_reproposals > 100 && st_stale > 1000 &&
          st_dups > 100);
}

/* ---- goodput verdicts (goodput.h) -------------------------------------------------------- */

static void test_goodput_judge(void)
{
    unsigned pm = 0;
    const uint64_t M = 1 << 20;
    struct lg_tcp_counters d = {.sent = 100 * M, .retrans = 2 * M};
    CHECK_EQ(lg_gp_judge(&d, 4 * M, 1, &pm), LG_GP_LOSSY); /* 2 % >= 1 % */
    CHECK_EQ(pm, 20);
    CHECK_EQ(lg_gp_judge(&d, 4 * M, 3, &pm), LG_GP_HEALTHY); /* 2 % < 3 % */
    d.retrans = M - 1; /* just under 1 % */
    CHECK_EQ(lg_gp_judge(&d, 4 * M, 1, &pm), LG_GP_HEALTHY);
    d.retrans = M; /* exactly 1 %: lossy */
    CHECK_EQ(lg_gp_judge(&d, 4 * M, 1, &pm), LG_GP_LOSSY);
    struct lg_tcp_counters idle = {.sent = 3 * M, .retrans = 3 * M}; /* all retransmitted ... */
    CHECK_EQ(lg_gp_judge(&idle, 4 * M, 1, &pm), LG_GP_UNKNOWN);    /* ... but too little */
    CHECK_EQ(pm, 1000);
    CHECK_EQ(lg_gp_judge(&d, 4 * M, 0, &pm), LG_GP_UNKNOWN); /* disabled */
    struct lg_tcp_counters none = {0};
    CHECK_EQ(lg_gp_judge(&none, 0, 1, &pm), LG_GP_UNKNOWN);
    CHECK_EQ(pm, 0);
    struct lg_tcp_counters odd = {.sent = 10 * M, .retrans = 20 * M}; /* retrans > sent */
    CHECK_EQ(lg_gp_judge(&odd, 0, 1, &pm), LG_GP_LOSSY);
    CHECK_EQ(pm, 1000);
    /* A counter that went backwards (the socket was replaced) moves by nothing. */
    struct lg_tcp_counters a = {.sent = 50, .retrans = 5, .acked = 40, .segs_retrans = 3};
    struct lg_tcp_counters b = {.sent = 20, .retrans = 9, .acked = 60, .segs_retrans = 1};
    struct lg_tcp_counters x = lg_gp_delta(&b, &a);
    CHECK_EQ(x.sent, 0);
    CHECK_EQ(x.retrans, 4);
    CHECK_EQ(x.acked, 20);
    CHECK_EQ(x.segs_retrans, 0);
}

int main(void)
{
    test_goodput_judge();
    test_epochs();
    test_chunk_verdict();
    test_rx_reset();
    test_peer_claims();
    test_tx_rewind();
    test_decide();
    test_model();
    LG_TEST_DONE();
}
