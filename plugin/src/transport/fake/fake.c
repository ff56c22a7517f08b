/* The fake transport (see fake.h). */
#include "transport/fake/fake.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "proto/upcall.h"
#include "session/wire.h"

struct fake_msg {
    uint64_t seq;
    uint32_t epoch;
    size_t size;
    struct fake_msg *next;
    char data[];
};

struct fake_wire {
    uint64_t nonce;
    int slot;
    uint32_t gen;
    int broken, fenced;
    struct fake_msg *head, *tail;
    struct fake_wire *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_mutex_t pump_mu; /* a commit (the monitor) vs the pumps (NCCL's thread): one for
                              * every connection, which is plenty for a test's few */
    struct fake_wire *wires;
    int hold; /* receivers take nothing off the wires (messages pile up; atomic) */
    struct lg_fake_counts n; /* under mu */
} fake_tr = {.mu = PTHREAD_MUTEX_INITIALIZER, .pump_mu = PTHREAD_MUTEX_INITIALIZER};

/* Under mu. */
static struct fake_wire *fake_wire_of(const struct lg_path *p)
{
    struct lg_path_id id = lg_path_id(p);
    for (struct fake_wire *w = fake_tr.wires; w; w = w->next)
        if (w->nonce == id.nonce && w->slot == id.slot && w->gen == id.gen)
            return w;
    struct fake_wire *w = calloc(1, sizeof(*w));
    if (!w)
        abort();
    w->nonce = id.nonce;
    w->slot = id.slot;
    w->gen = id.gen;
    w->next = fake_tr.wires;
    fake_tr.wires = w;
    return w;
}

/* Under mu: everything in flight on w is gone. */
static void fake_wire_drop(struct fake_wire *w, uint64_t *count)
{
    while (w->head) {
        struct fake_msg *m = w->head;
        w->head = m->next;
        free(m);
        if (count)
            (*count)++;
    }
    w->tail = NULL;
}

void lg_fake_break(int slot)
{
    pthread_mutex_lock(&fake_tr.mu);
    for (struct fake_wire *w = fake_tr.wires; w; w = w->next)
        if (w->slot == slot && !w->fenced && !w->broken) {
            w->broken = 1;
            fake_wire_drop(w, &fake_tr.n.lost);
        }
    fake_tr.n.breaks++;
    pthread_mutex_unlock(&fake_tr.mu);
}

/* p's wire is broken: the path fails (once), like a transport error. 1 if so. */
static int fake_check_broken(struct lg_path *p)
{
    pthread_mutex_lock(&fake_tr.mu);
    int broken = fake_wire_of(p)->broken;
    pthread_mutex_unlock(&fake_tr.mu);
    if (broken && lg_path_is_up(p)) {
        pthread_mutex_lock(&fake_tr.mu);
        fake_tr.n.fails++;
        pthread_mutex_unlock(&fake_tr.mu);
        lg_conn_path_failed(p, EIO, "fake transport: path broken");
    }
    return broken;
}

int lg_fake_unseen_break(struct lg_conn *c)
{
    int unseen = 0;
    pthread_mutex_lock(&fake_tr.mu);
    for (int i = 0; i < LG_NPATHS; i++) {
        struct lg_path *p = lg_conn_path(c, i);
        unseen = unseen || (lg_path_is_up(p) && fake_wire_of(p)->broken);
    }
    pthread_mutex_unlock(&fake_tr.mu);
    return unseen;
}

/* Sender: one message onto the committed path's wire (lg_send_unsent, under its lock). */
static int fake_put(void *arg, const struct lg_out_msg *out)
{
    struct fake_wire *w = arg;
    pthread_mutex_lock(&fake_tr.mu);
    int broken = w->broken;
    if (!broken && w->fenced) {
        fake_tr.n.pushed++; /* the receiver left this path: it is lost, and the RESYNC says so */
    } else if (!broken) {
        struct fake_msg *m = malloc(sizeof(*m) + out->size);
        if (!m)
            abort();
        *m = (struct fake_msg){.seq = out->seq, .epoch = out->epoch, .size = out->size};
        memcpy(m->data, out->data, out->size);
        if (w->tail)
            w->tail->next = m;
        else
            w->head = m;
        w->tail = m;
        fake_tr.n.pushed++;
    }
    pthread_mutex_unlock(&fake_tr.mu);
    return broken;
}

/* Sender: copies every message the cursor has not handed out yet onto the committed path's
 * wire. */
static void fake_send_pump(struct lg_conn *c, struct lg_path *p)
{
    pthread_mutex_lock(&fake_tr.mu);
    struct fake_wire *w = fake_wire_of(p); /* (freed only by lg_fake_reset, between tests) */
    pthread_mutex_unlock(&fake_tr.mu);
    lg_send_unsent(c, p, fake_put, w);
}

/* Receiver: places what its committed path's wire holds, in order, while receives are
 * posted for it. */
static void fake_recv_pump(struct lg_conn *c, struct lg_path *p)
{
    if (!lg_path_is_up(p))
        return;
    for (;;) {
        pthread_mutex_lock(&fake_tr.mu);
        struct fake_wire *w = fake_wire_of(p);
        struct fake_msg *m = w->head;
        if (!m || w->broken || __atomic_load_n(&fake_tr.hold, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&fake_tr.mu);
            break;
        }
        struct lg_req *r = NULL;
        void *buf = NULL;
        size_t cap = 0;
        enum lg_place to = lg_recv_target(c, m->seq, m->epoch, &r, &buf, &cap);
        if (to == LG_PLACE_LATER) {
            pthread_mutex_unlock(&fake_tr.mu);
            break;
        }
        int stale = to == LG_PLACE_STALE;
        w->head = m->next;
        if (!w->head)
            w->tail = NULL;
        if (stale)
            fake_tr.n.stale++;
        else
            fake_tr.n.placed++;
        pthread_mutex_unlock(&fake_tr.mu);
        if (!stale) {
            if (m->size > cap) {
                lg_conn_fail(c, LG_FAIL_OTHER, ncclInternalError, "fake transport: message %llu too large",
                             (unsigned long long)m->seq);
                free(m);
                return;
            }
            memcpy(buf, m->data, m->size);
            if (lg_recv_complete(p, r, m->size, 0) != 0) {
                free(m);
                return;
            }
        }
        free(m);
    }
    lg_recv_flush_ack(p);
}

/* NCCL's thread and the monitor's resume: pump_mu keeps a pump out of a commit. */
static void fake_pump(struct lg_conn *c)
{
    if (pthread_mutex_trylock(&fake_tr.pump_mu) != 0)
        return; /* a commit is changing the committed path: the next call moves the data */
    struct lg_path *p = lg_conn_committed(c);
    if (p && !fake_check_broken(p)) {
        if (lg_conn_is_send(c))
            fake_send_pump(c, p);
        else
            fake_recv_pump(c, p);
    }
    pthread_mutex_unlock(&fake_tr.pump_mu);
}

static int fake_nstreams(void) { return 1; }
static int fake_usable(struct lg_conn *c, uint64_t now) { return (void)c, (void)now, 1; }
static ncclResult_t fake_reg_mr(struct lg_conn *c, void *data, size_t size, int type,
                                uint64_t offset, int fd, struct lg_inner_mr **out)
{
    (void)c, (void)data, (void)size, (void)type, (void)offset, (void)fd;
    *out = NULL;
    return ncclSuccess;
}
static ncclResult_t fake_dereg_mr(struct lg_conn *c, struct lg_inner_mr *mr)
{
    return (void)c, (void)mr, ncclSuccess;
}
static ncclResult_t fake_iflush(struct lg_conn *c, int n, void **data, int *sizes,
                                struct lg_inner_mr **mrs, void **request)
{
    (void)c, (void)n, (void)data, (void)sizes, (void)mrs;
    *request = NULL;
    return ncclSuccess;
}
static int fake_flush_test(void *request, int *done, ncclResult_t *rc)
{
    return (void)request, (void)done, (void)rc, 0;
}
static void fake_release(struct lg_endpoint *ep) { (void)ep; }
static int fake_recv_prepare(struct lg_conn *c, struct lg_req *r, size_t maxcap)
{
    return (void)c, (void)r, (void)maxcap, 0;
}
static void fake_posted(struct lg_conn *c, const struct lg_req *r, struct lg_inner_mr *const *mrs,
                        uint32_t wake)
{
    (void)r, (void)mrs, (void)wake;
    fake_pump(c);
}
static void fake_progress(struct lg_conn *c, struct lg_req *r)
{
    (void)r;
    fake_pump(c);
    if (lg_conn_is_send(c))
        lg_conn_poll_ctrl(c); /* the acks */
}
static int fake_step(struct lg_conn *c, uint64_t now) { return (void)c, (void)now, 0; }
static int fake_carries(const struct lg_path *p) { return (void)p, 1; }
/* The monitor notices a broken standby too (nobody pumps it). */
static void fake_watch(struct lg_conn *c, uint64_t now)
{
    (void)now;
    for (int i = 0; i < LG_NPATHS; i++)
        if (lg_path_is_up(lg_conn_path(c, i)))
            fake_check_broken(lg_conn_path(c, i));
}
static void fake_nothing(struct lg_conn *c, uint64_t now) { (void)c, (void)now; }
static int fake_on_frame(struct lg_path *p, const struct lg_ctrl *f) { return (void)p, (void)f, 0; }
static void fake_resume(struct lg_path *p) { fake_pump(lg_path_conn(p)); }
/* Nothing lands from a fenced path's wire. */
static void fake_fence(struct lg_path *p)
{
    pthread_mutex_lock(&fake_tr.mu);
    struct fake_wire *w = fake_wire_of(p);
    w->fenced = 1;
    fake_wire_drop(w, NULL);
    pthread_mutex_unlock(&fake_tr.mu);
}
static void fake_path_nothing(struct lg_path *p) { (void)p; }
static void fake_switching(struct lg_conn *c, struct lg_path *t) { (void)c, (void)t; }
static void fake_commit_begin(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    (void)c, (void)from, (void)to;
    pthread_mutex_lock(&fake_tr.pump_mu);
}
static void fake_commit_end(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    (void)c, (void)from, (void)to;
    pthread_mutex_unlock(&fake_tr.pump_mu);
}

static struct lg_transport fake_transport = {
    .name = "fake",
    .matches_tags = 1, /* one message per buffer, in order: the tests post single receives */
    .keeps_order_in_place = 1,
    .hold_is_request = 1,
    .id = LG_TRANSPORT_FAKE,
    .stream_fn = {lg_stream_idle_handler, lg_stream_idle_handler},
    .nstreams = fake_nstreams,
    .usable = fake_usable,
    .reg_mr = fake_reg_mr,
    .dereg_mr = fake_dereg_mr,
    .iflush = fake_iflush,
    .flush_test = fake_flush_test,
    .release = fake_release,
    .recv_prepare = fake_recv_prepare,
    .posted = fake_posted,
    .progress = fake_progress,
    .step = fake_step,
    .carries = fake_carries,
    .watch = fake_watch,
    .goodput = fake_nothing,
    .heartbeat = fake_nothing,
    .on_frame = fake_on_frame,
    .resume = fake_resume,
    .fence = fake_fence,
    .rearm = fake_path_nothing,
    .rebuilt = NULL, /* lg_fake_transport: the base transport's (READY at once) */
    .switching = fake_switching,
    .commit_begin = fake_commit_begin,
    .commit_end = fake_commit_end,
};

const struct lg_transport *lg_fake_transport(const struct lg_transport *base)
{
    fake_transport.get_properties = base->get_properties;
    fake_transport.ctx_open = base->ctx_open;
    fake_transport.ctx_close = base->ctx_close;
    fake_transport.rebuilt = base->rebuilt;
    return &fake_transport;
}

void lg_fake_reset(void)
{
    pthread_mutex_lock(&fake_tr.mu);
    while (fake_tr.wires) {
        struct fake_wire *w = fake_tr.wires;
        fake_tr.wires = w->next;
        fake_wire_drop(w, NULL);
        free(w);
    }
    pthread_mutex_unlock(&fake_tr.mu);
}

void lg_fake_hold(int on) { __atomic_store_n(&fake_tr.hold, on, __ATOMIC_RELEASE); }

struct lg_fake_counts lg_fake_counts(void)
{
    pthread_mutex_lock(&fake_tr.mu);
    struct lg_fake_counts n = fake_tr.n;
    pthread_mutex_unlock(&fake_tr.mu);
    return n;
}
