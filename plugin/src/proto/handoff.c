/* What a transport hands out and places, through the upcall API (upcall.h): the messages the
 * sender's cursor has not handed out yet, the receive a message goes to by the protocol's
 * rules, and the few facts of a connection and its paths a transport needs to name a wire. */
#include <stddef.h>

#include "proto/conn.h"
#include "proto/upcall.h"

struct lg_path_id lg_path_id(const struct lg_path *p)
{
    return (struct lg_path_id){.nonce = p->conn->nonce, .gen = p->gen, .slot = p->index};
}

struct lg_conn *lg_path_conn(const struct lg_path *p) { return p->conn; }
int lg_path_is_up(const struct lg_path *p) { return lg_path_up(p); }
int lg_conn_is_send(const struct lg_conn *c) { return c->kind == LG_CONN_SEND; }

struct lg_conn_facts lg_conn_facts(const struct lg_conn *c)
{
    return (struct lg_conn_facts){.send = c->kind == LG_CONN_SEND, .dev = c->dev,
                                  .nstreams = c->nstreams, .blob = c->blob, .nonce = c->nonce};
}

const char *lg_path_nic(const struct lg_path *p) { return p->nic; }
struct lg_task *lg_path_stream(struct lg_path *p, int k) { return &p->data[k].task; }
int lg_path_heard(const struct lg_path *p, uint64_t now) { return lg_path_heard_recently(p, now); }
void lg_path_ctrl_out(struct lg_path *p, const struct lg_ctrl *f) { lg_path_ctrl_send(p, f); }
void lg_conn_ctrl_out(struct lg_conn *c, const struct lg_ctrl *f)
{
    uint32_t ph = lg_conn_enter(c);
    struct lg_path *p = lg_conn_active_path(c);
    if (lg_path_up(p))
        lg_path_ctrl_send(p, f);
    lg_conn_exit(c, ph);
}
void lg_conn_wake(struct lg_conn *c) { lg_monitor_wake(c); }
uint64_t lg_conn_posted(struct lg_conn *c) { return __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE); }
uint64_t lg_conn_acked(struct lg_conn *c) { return __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE); }
int lg_conn_take_polled(struct lg_conn *c)
{
    return __atomic_exchange_n(&c->polled, 0, __ATOMIC_RELAXED) != 0;
}
void lg_conn_note_polled(struct lg_conn *c)
{
    if (!__atomic_load_n(&c->polled, __ATOMIC_RELAXED)) /* no store (a shared line) if set */
        __atomic_store_n(&c->polled, 1, __ATOMIC_RELAXED);
}
uint64_t lg_conn_placed(struct lg_conn *c) { return __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE); }
uint64_t lg_send_cursor(struct lg_conn *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->cursor_seq;
    pthread_mutex_unlock(&c->mu);
    return seq;
}
int lg_send_kept_unacked(struct lg_conn *c)
{
    return __atomic_load_n(&c->kept_hi, __ATOMIC_ACQUIRE) >
           __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE);
}
int lg_send_steady(struct lg_conn *c)
{
    return __atomic_load_n(&c->hold, __ATOMIC_RELAXED) == LG_HOLD_NONE &&
           c->fo.sw_phase == LG_SW_NONE;
}
struct lg_req_info lg_req_info(const struct lg_req *r)
{
    int send = r->conn->kind == LG_CONN_SEND;
    return (struct lg_req_info){.seq = r->seq, .size = send ? r->size : 0,
                                .nmsgs = send ? 1 : r->g_n};
}
int lg_req_written(const struct lg_req *r)
{
    return __atomic_load_n(&r->writers, __ATOMIC_ACQUIRE) == 0;
}

struct lg_path *lg_conn_path(struct lg_conn *c, int slot)
{
    return slot >= 0 && slot < LG_NPATHS ? __atomic_load_n(&c->paths[slot], __ATOMIC_ACQUIRE)
                                         : NULL;
}

struct lg_path *lg_conn_committed(struct lg_conn *c)
{
    pthread_mutex_lock(&c->mu); /* a rebuild of the committed path's slot clears it */
    struct lg_path *p = c->active_path;
    pthread_mutex_unlock(&c->mu);
    return p;
}

/* Under mu: p is up and the committed path, the only one that carries data. */
static int carries_committed(const struct lg_conn *c, const struct lg_path *p)
{
    return lg_path_up(p) && c->active_path == p && c->paths[c->active] == p;
}

int lg_send_unsent(struct lg_conn *c, struct lg_path *p, lg_send_put_fn put, void *arg)
{
    int n = 0;
    pthread_mutex_lock(&c->mu);
    /* ... and only while no hold (a switch) stops it */
    if (carries_committed(c, p)) {
        uint64_t posted = __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE);
        while (c->cursor_seq < posted &&
               __atomic_load_n(&c->hold, __ATOMIC_RELAXED) == LG_HOLD_NONE) {
            const struct lg_req *r = &c->reqs[c->cursor_seq % LG_WINDOW];
            struct lg_out_msg m = {.seq = c->cursor_seq,
                                   .epoch = __atomic_load_n(&c->epoch, __ATOMIC_RELAXED),
                                   .data = r->data, .size = r->size};
            if (put(arg, &m) != 0)
                break;
            c->cursor_seq++;
            n++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

struct lg_path *lg_stream_path(struct lg_task *t, int *index)
{
    struct lg_stream *s = lg_stream_of(t);
    *index = s->index;
    return s->path;
}

void lg_conn_locked(struct lg_conn *c, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&c->mu);
    fn(arg);
    pthread_mutex_unlock(&c->mu);
}

struct lg_path *lg_conn_enter_active(struct lg_conn *c, uint32_t *ph)
{
    *ph = lg_conn_enter(c);
    return lg_conn_active_path(c);
}
void lg_conn_leave_active(struct lg_conn *c, uint32_t ph) { lg_conn_exit(c, ph); }

int lg_send_cut(struct lg_conn *c, struct lg_path *p, lg_send_cut_fn cut, void *arg)
{
    pthread_mutex_lock(&c->mu);
    int ok = c->cursor_seq < __atomic_load_n(&c->posted, __ATOMIC_RELAXED) &&
             c->hold != LG_HOLD_ALL && (c->hold != LG_HOLD_BOUNDARY || lg_conn_mid_message(c)) &&
             carries_committed(c, p);
    if (!ok) {
        cut(arg, NULL);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    struct lg_req *r = &c->reqs[c->cursor_seq % LG_WINDOW];
    struct lg_out_cut m = {.req = r, .seq = c->cursor_seq, .epoch = c->epoch, .data = r->data,
                           .size = r->size, .tag = (uint32_t)r->tag, .kept = r->kept};
    int did = cut(arg, &m);
    if (did != LG_CUT_PEEK) /* under mu, like a rewind: completion waits for this hold */
        __atomic_add_fetch(&r->writers, 1, __ATOMIC_ACQ_REL);
    if (did == LG_CUT_LAST)
        c->cursor_seq++;
    pthread_mutex_unlock(&c->mu);
    return 1;
}

void lg_req_writer_done(struct lg_req *r) { __atomic_sub_fetch(&r->writers, 1, __ATOMIC_RELEASE); }

enum lg_place lg_recv_target(struct lg_conn *c, uint64_t seq, uint32_t epoch, struct lg_req **r,
                             void **buf, size_t *cap)
{
    uint32_t now_epoch = __atomic_load_n(&c->epoch, __ATOMIC_SEQ_CST);
    struct lg_req *q = &c->reqs[seq % LG_WINDOW];
    uint32_t st = __atomic_load_n(&q->state, __ATOMIC_ACQUIRE);
    /* Sent in another epoch, before the receiver opened this one, or placed already. */
    if (epoch != now_epoch || __atomic_load_n(&c->rx_open, __ATOMIC_SEQ_CST) != now_epoch ||
        seq < __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) ||
        ((st & LG_REQ_POSTED) && q->seq == seq && (st & LG_REQ_DONE)))
        return LG_PLACE_STALE;
    if (seq >= __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE) || !(st & LG_REQ_POSTED) ||
        q->seq != seq)
        return LG_PLACE_LATER; /* its receive is not posted yet */
    *r = q;
    *buf = q->buf;
    *cap = q->cap;
    return LG_PLACE_INTO;
}
