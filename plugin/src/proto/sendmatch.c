/* Matching at the sender for varying tags (see sendmatch.h). */
#include "proto/sendmatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "runtime/log.h"
#include "runtime/util.h"

#define SEQ_MASK ((1ull << LG_MATCH_GEN_SHIFT) - 1)
#define ALL(n) ((uint8_t)((1u << (n)) - 1))

enum { MODE_FIRST = 0, MODE_UNIFORM, MODE_MATCHING };

/* A group of the receiver as the sender's mirror holds it, in slot head % LG_WINDOW (live
 * groups span less than the window, so their heads never share a slot). */
struct mgroup {
    uint64_t head1; /* head seq + 1; 0: none */
    uint8_t n;
    uint8_t got;   /* bit i: buffer i announced */
    uint8_t bound; /* bit i: buffer i holds a message (the receiver's, or one we admitted) */
    int32_t tag[LG_MAX_RECVS];
};

struct lg_match {
    /* sender (under mu) */
    uint32_t gen;         /* of the last question; frames of another are stale */
    uint32_t asked_epoch; /* the connection's epoch when it was asked */
    uint64_t asked_ns;    /* ... and when */
    int lo_known;         /* the answer came */
    uint64_t lo;   /* head of the oldest group with a free buffer */
    uint64_t next; /* the next message to bind in the mirror (the receiver had bound those
                    * below the answer's count; the mirror binds the rest as it does) */
    uint64_t uniform_below; /* messages below were all sent with the tag... */
    int uniform_tag;        /* ... this one (match_tag before the first that differed) */
    int32_t sent_tag[LG_WINDOW]; /* the tag of each message sent since, by seq */
    struct mgroup g[LG_WINDOW];
    /* receiver (under mu) */
    uint32_t ann_gen; /* the answer went out: announce each post with this gen (0: none) */
};

static uint64_t pack(uint64_t seq, uint32_t gen)
{
    return (seq & SEQ_MASK) | (uint64_t)(gen & 0xffffu) << LG_MATCH_GEN_SHIFT;
}

static void send_frames(struct lg_conn *c, const struct lg_ctrl *f, int n)
{
    uint32_t ph = lg_conn_enter(c);
    struct lg_path *p = lg_conn_active_path(c);
    for (int i = 0; i < n && lg_path_up(p); i++)
        lg_path_ctrl_send(p, &f[i]);
    lg_conn_exit(c, ph);
}

/* ---- sender --------------------------------------------------------------------------- */

static int full_group(const struct mgroup *g, uint64_t head)
{
    return g->head1 == head + 1 && g->n && g->got == ALL(g->n);
}

/* The receiver's rule (tcp_recv.c bind_to_posted) on the mirror, for message seq: the
 * earliest free buffer with its tag, among the groups known from lo on without a gap,
 * provided one of them covers seq (the receiver binds a message only once its slot is
 * posted). Binds it there; 0 when the mirror cannot tell yet. */
static int bind_one(struct lg_match *m, uint64_t seq, int tag)
{
    struct mgroup *hit = NULL;
    int hit_i = -1, covered = 0;
    uint64_t h = m->lo;
    for (int steps = 0; steps < LG_WINDOW && !(hit && covered); steps++) {
        struct mgroup *g = &m->g[h % LG_WINDOW];
        if (!full_group(g, h))
            break;
        for (int i = 0; !hit && i < g->n; i++)
            if (!(g->bound >> i & 1) && g->tag[i] == (int32_t)tag)
                hit = g, hit_i = i;
        covered |= seq >= h && seq < h + g->n;
        h += g->n;
    }
    if (!hit || !covered)
        return 0;
    hit->bound |= (uint8_t)(1u << hit_i);
    for (;;) { /* the groups now wholly bound leave the front */
        struct mgroup *g = &m->g[m->lo % LG_WINDOW];
        if (!full_group(g, m->lo) || g->bound != ALL(g->n))
            break;
        uint64_t next = m->lo + g->n;
        memset(g, 0, sizeof(*g));
        m->lo = next;
    }
    return 1;
}

static int tag_of(const struct lg_match *m, uint64_t seq)
{
    return seq < m->uniform_below ? m->uniform_tag : m->sent_tag[seq % LG_WINDOW];
}

/* Binds, in the mirror, the messages sent that the receiver had not bound when it answered,
 * then seq; 1 when seq found its buffer. */
static int mirror_place(struct lg_match *m, uint64_t seq, int tag)
{
    if (!m->lo_known)
        return 0;
    for (; m->next < seq; m->next++)
        if (!bind_one(m, m->next, tag_of(m, m->next)))
            return 0;
    if (!bind_one(m, seq, tag))
        return 0;
    m->sent_tag[seq % LG_WINDOW] = tag;
    m->next = seq + 1;
    return 1;
}

int lg_match_admit(struct lg_conn *c, uint64_t seq, int tag, struct lg_ctrl *ask)
{
    ask->type = 0;
    if (c->tr->matches_tags)
        return 1;
    if (c->match_mode == MODE_FIRST || (c->match_mode == MODE_UNIFORM && tag == c->match_tag)) {
        c->match_mode = MODE_UNIFORM;
        c->match_tag = tag;
        return 1;
    }
    struct lg_match *m = c->match;
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m) {
            LG_WARN("send conn %016llx: no memory to match tags at the sender; sending "
                    "eagerly", (unsigned long long)c->nonce);
            c->match_tag = tag;
            return 1;
        }
        __atomic_store_n(&c->match, m, __ATOMIC_RELEASE);
        c->match_mode = MODE_MATCHING;
        m->uniform_below = seq;
        m->uniform_tag = c->match_tag;
        LG_INFO(NCCL_NET, "send conn %016llx: message #%llu has tag %d after tag %d: sends are "
                "matched against the receiver's posted groups from here on",
                (unsigned long long)c->nonce, (unsigned long long)seq, tag, c->match_tag);
    }
    uint32_t epoch = __atomic_load_n(&c->epoch, __ATOMIC_ACQUIRE);
    if (m->gen && mirror_place(m, seq, tag))
        return 1; /* (after a switch too: what the mirror knows holds, frames may be lost) */
    uint64_t now = lg_now_ns();
    if (m->gen && m->asked_epoch == epoch && now - m->asked_ns < LG_MS(lg_params.heartbeat_ms))
        return 0; /* asked lately in this epoch: the answer or the group's post is on its way */
    /* First question; one after a switch (its answer or announcements may be lost); or one
     * unanswered for a heartbeat period: a question that reaches the receiver before its
     * accept has attached the channel is dropped there, and nothing else would ask again. */
    memset(m->g, 0, sizeof(m->g));
    m->lo_known = 0;
    m->gen = (m->gen + 1) & 0xffffu ? m->gen + 1 : 1;
    m->asked_epoch = epoch;
    m->asked_ns = now;
    *ask = (struct lg_ctrl){.type = LG_CTRL_TAGS, .value = pack(seq, m->gen)};
    return 0;
}

void lg_match_send(struct lg_conn *c, const struct lg_ctrl *f) { send_frames(c, f, 1); }

/* Under mu: a GROUP frame into the mirror; 0, or -1 with what is wrong in `lie`. */
static int on_group(struct lg_conn *c, struct lg_match *m, const struct lg_ctrl *f, char *lie,
                    size_t len)
{
    uint64_t head = f->value & SEQ_MASK;
    int i = f->flags & 7, n = (f->flags >> 3 & 7) + 1, bound = !!(f->flags & 0x40);
    uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
    if ((f->flags & 0x80) || i >= n || head + (uint64_t)n > posted + LG_WINDOW ||
        (m->lo_known && head + (uint64_t)n > m->lo + LG_WINDOW)) {
        snprintf(lie, len, "GROUP for buffer %d of %d of the group at #%llu, which no window "
                 "holds", i, n, (unsigned long long)head);
        return -1;
    }
    if (m->lo_known && head < m->lo)
        return 0; /* a group wholly bound already (a repeat) */
    struct mgroup *g = &m->g[head % LG_WINDOW];
    if (!g->head1) {
        g->head1 = head + 1;
        g->n = (uint8_t)n;
    }
    if (g->head1 != head + 1 || g->n != n ||
        ((g->got >> i & 1) && g->tag[i] != (int32_t)f->epoch)) {
        snprintf(lie, len, "GROUP frames disagree on the group at #%llu",
                 (unsigned long long)head);
        return -1;
    }
    g->tag[i] = (int32_t)f->epoch;
    g->got |= (uint8_t)(1u << i);
    g->bound |= (uint8_t)(bound << i);
    return 0;
}

int lg_match_on_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    char lie[128] = "";
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    struct lg_match *m = c->match;
    if (!m || (uint32_t)(f->value >> LG_MATCH_GEN_SHIFT) != m->gen) {
        pthread_mutex_unlock(&c->mu);
        return 0; /* the answer to an older question, or to none */
    }
    uint64_t lo = f->value & SEQ_MASK;
    if (f->type == LG_CTRL_GROUP) {
        rc = on_group(c, m, f, lie, sizeof(lie));
    } else if (lo > __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE) + LG_WINDOW) {
        snprintf(lie, sizeof(lie), "TAGS answer from #%llu, beyond any window",
                 (unsigned long long)lo);
        rc = -1;
    } else if (!m->lo_known) {
        m->lo = lo;
        m->next = lo + f->epoch; /* what the receiver had bound */
        m->lo_known = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc)
        lg_conn_peer_lied(c, "%s", lie);
    return rc;
}

/* ---- receiver ------------------------------------------------------------------------- */

/* Under mu: the frames of the group posted at head, into out[room] (n = its size; 0 when
 * none is posted there, or it would not fit). */
static int group_frames(struct lg_conn *c, uint64_t head, uint32_t gen, struct lg_ctrl *out,
                        int room)
{
    const struct lg_req *h = &c->reqs[head % LG_WINDOW];
    int n = h->g_n;
    if (n < 1 || n > LG_MAX_RECVS || n > room || h->g_head != head)
        return 0;
    for (int i = 0; i < n; i++)
        out[i] = (struct lg_ctrl){.type = LG_CTRL_GROUP,
                                  .flags = lg_match_flags(i, n, h->sub[i].bound),
                                  .epoch = (uint32_t)h->sub[i].tag, .value = pack(head, gen)};
    return n;
}

void lg_match_on_ask(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    struct lg_ctrl out[1 + LG_WINDOW]; /* the answer, then the buffers of the groups: from
                                        * unbound_lo to next_seq, they span a window at most */
    int nf = 0;
    pthread_mutex_lock(&c->mu);
    struct lg_match *m = c->match;
    if (!m && (m = calloc(1, sizeof(*m))) != NULL)
        __atomic_store_n(&c->match, m, __ATOMIC_RELEASE);
    if (m) {
        /* The groups as they stand, from the oldest with a free buffer, and how many
         * messages are bound: the sender binds the others in its mirror as we will. Then
         * each later post (lg_match_posted). */
        uint32_t gen = (uint32_t)(f->value >> LG_MATCH_GEN_SHIFT);
        out[nf++] = (struct lg_ctrl){.type = LG_CTRL_TAGS,
                                     .epoch = (uint32_t)(c->bind_next - c->unbound_lo),
                                     .value = pack(c->unbound_lo, gen)};
        for (uint64_t g = c->unbound_lo; g < c->next_seq;) {
            int n = group_frames(c, g, gen, &out[nf], (int)(sizeof(out) / sizeof(out[0])) - nf);
            if (!n)
                break;
            nf += n;
            g += (uint64_t)n;
        }
        m->ann_gen = gen;
    }
    pthread_mutex_unlock(&c->mu);
    if (!m) {
        lg_conn_fail(c, LG_FAIL_OTHER, ncclSystemError,
                     "no memory to tell the sender the posted receives it asked for");
        return;
    }
    send_frames(c, out, nf);
}

void lg_match_posted(struct lg_conn *c, uint64_t head)
{
    struct lg_ctrl f[LG_MAX_RECVS];
    struct lg_match *m = __atomic_load_n(&c->match, __ATOMIC_ACQUIRE);
    if (!m)
        return;
    pthread_mutex_lock(&c->mu);
    int n = m->ann_gen ? group_frames(c, head, m->ann_gen, f, LG_MAX_RECVS) : 0;
    pthread_mutex_unlock(&c->mu);
    if (n)
        send_frames(c, f, n);
}

void lg_match_free(struct lg_conn *c)
{
    free(c->match);
    c->match = NULL;
}
