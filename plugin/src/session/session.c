/* Control sessions (session.h): the socket, its channels, its queue and its heartbeats. */
#include "session/session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "runtime/wake.h"
#include "session/dial.h"

static pthread_mutex_t lg_sess_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lg_session *lg_sessions; /* under lg_sess_mu */

/* A pump finds the session read empty this recently: nothing to gain from another read. */
#define LG_SESS_PUMP_NS 1000000ull
/* Paths failed per round when a session fails (collected under ch_mu, failed outside it). */
#define LG_SESS_FAIL_BATCH 64

static void sess_handler(struct lg_task *t, uint32_t events);
static void send_locked(struct lg_session *s, struct lg_chan *ch, struct lg_ctrl *f, int queue_only);

static struct lg_session *sess_new(int fd, uint64_t id, int outgoing, int state)
{
    struct lg_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->task.fd = fd;
    s->task.fn = sess_handler;
    s->id = id;
    s->outgoing = outgoing;
    s->state = state;
    s->refs = 1;
    s->next_chan = 1;
    pthread_mutex_init(&s->ch_mu, NULL);
    pthread_mutex_init(&s->tx_mu, NULL);
    s->t0 = s->last_rx_ns = s->prev_rx_ns = s->last_tx_ns = lg_now_ns();
    return s;
}

static void registry_add(struct lg_session *s)
{
    pthread_mutex_lock(&lg_sess_mu);
    s->next = lg_sessions;
    lg_sessions = s;
    pthread_mutex_unlock(&lg_sess_mu);
}

static void registry_unlink_locked(struct lg_session *s)
{
    for (struct lg_session **pp = &lg_sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

/* Unregistered, no reference left: its task is detached and the socket closed (read empty
 * first, so that the close sends FIN, not RST). */
static void sess_free(struct lg_session *s)
{
    if (s->started) {
        struct lg_task *t = &s->task;
        lg_tasks_detach(&t, 1);
    }
    if (s->task.fd >= 0) {
        char buf[4096];
        for (int i = 0; i < 64 && recv(s->task.fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
            ;
        close(s->task.fd);
    }
    pthread_mutex_destroy(&s->ch_mu);
    pthread_mutex_destroy(&s->tx_mu);
    free(s);
}

void lg_session_put(struct lg_session *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&lg_sess_mu);
    int last = --s->refs == 0;
    if (last)
        registry_unlink_locked(s);
    pthread_mutex_unlock(&lg_sess_mu);
    if (last)
        sess_free(s);
}

/* Every channel on s: the peer said BYE(FENCE) for all of them at once. */
static void note_bye_all(struct lg_session *s)
{
    pthread_mutex_lock(&s->ch_mu);
    for (int b = 0; b < LG_SESS_BUCKETS; b++)
        for (struct lg_chan *ch = s->bucket[b]; ch; ch = ch->next)
            ch->ops->bye(ch);
    pthread_mutex_unlock(&s->ch_mu);
}

/* The session is over: every channel on it is told (its path fails, and the monitor fails it
 * over), and the socket is shut down so that the peer's side fails too (its fd stays ours
 * until the last channel lets go). `alive`: we end it on purpose (garbage, a stall, silence), and say so first
 * (BYE(FENCE) on channel 0): the peer must not take the EOF for this process's death. Any
 * thread but with none of the session's locks held. */
static void sess_end(struct lg_session *s, int err, const char *why, int alive)
{
    if (alive && lg_session_up(s)) {
        pthread_mutex_lock(&s->tx_mu);
        struct lg_ctrl bye = {.type = LG_CTRL_BYE, .flags = LG_BYE_FENCE};
        send_locked(s, NULL, &bye, 0);
        pthread_mutex_unlock(&s->tx_mu);
    }
    int none = 0; /* the first to end it names the errno, before anyone can see it failed */
    __atomic_compare_exchange_n(&s->err, &none, err ? err : ECONNRESET, 0, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
    if (__atomic_exchange_n(&s->state, LG_SESS_FAILED, __ATOMIC_ACQ_REL) == LG_SESS_FAILED)
        return;
    snprintf(s->why, sizeof(s->why), "%s%s%s", why, err ? ": " : "", err ? strerror(err) : "");
    /* An accepted one knows its local address, not its NIC's name. */
    char local[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &(struct in_addr){.s_addr = s->local_ip}, local, sizeof(local));
    LG_INFO(NCCL_NET, "control session %016llx to %s %s %s ended (%s); failing its %d path(s)",
            (unsigned long long)s->id, lg_addr_format(s->peer_ip, s->peer_port).s,
            s->nic[0] ? "via NIC" : "from local address",
            s->nic[0] ? s->nic : local, s->why,
            __atomic_load_n(&s->nchan, __ATOMIC_RELAXED));
    if (s->task.fd >= 0)
        shutdown(s->task.fd, SHUT_RDWR);
    char what[128];
    snprintf(what, sizeof(what), "control session: %s", why);
    for (;;) {
        struct lg_chan *batch[LG_SESS_FAIL_BATCH];
        int n = 0;
        pthread_mutex_lock(&s->ch_mu);
        for (int b = 0; b < LG_SESS_BUCKETS && n < LG_SESS_FAIL_BATCH; b++)
            for (struct lg_chan *ch = s->bucket[b]; ch && n < LG_SESS_FAIL_BATCH; ch = ch->next)
                if (!ch->lost) {
                    ch->lost = 1;
                    __atomic_add_fetch(&ch->busy, 1, __ATOMIC_ACQ_REL);
                    batch[n++] = ch;
                }
        pthread_mutex_unlock(&s->ch_mu);
        if (!n)
            break;
        for (int i = 0; i < n; i++) {
            batch[i]->ops->lost(batch[i], err, !err && !alive, what);
            __atomic_sub_fetch(&batch[i]->busy, 1, __ATOMIC_RELEASE);
        }
    }
    lg_wake_monitor(0); /* reaping */
}

static void sess_fail(struct lg_session *s, int err, const char *why) { sess_end(s, err, why, 0); }

/* ---- connector ---------------------------------------------------------------------------- */

static int reusable(const struct lg_session *s, uint64_t now)
{
    int st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (st == LG_SESS_CONNECTING)
        return lg_age_ns(now, s->t0) < LG_MS(lg_params.rejoin_timeout_ms);
    /* A silent one may be the dead NIC's: a rebuild must not bet on it, nor on one that was
     * ever silent that long (after a cut its TCP retransmissions back off, each way on its
     * own clock: hearing the peer again says nothing of the peer hearing us). */
    uint64_t heard = __atomic_load_n(&s->last_rx_ns, __ATOMIC_RELAXED);
    return st == LG_SESS_UP && !__atomic_load_n(&s->suspect, __ATOMIC_ACQUIRE) &&
           lg_age_ns(now, heard) < LG_MS(lg_params.silent_timeout_ms);
}

struct lg_session *lg_session_open(const char *nic, uint32_t local_ip, uint32_t peer_ip,
                                   uint16_t peer_port)
{
    uint64_t now = lg_now_ns();
    pthread_mutex_lock(&lg_sess_mu);
    for (struct lg_session *s = lg_sessions; s; s = s->next)
        if (s->outgoing && s->local_ip == local_ip && s->peer_ip == peer_ip &&
            s->peer_port == peer_port && reusable(s, now)) {
            s->refs++;
            pthread_mutex_unlock(&lg_sess_mu);
            return s;
        }
    pthread_mutex_unlock(&lg_sess_mu);
    int fd = lg_sock_connect_start(nic, local_ip, peer_ip, peer_port, LG_SOCK_CTRL);
    if (fd < 0)
        return NULL;
    struct lg_session *s = sess_new(fd, lg_random_u64() | 1, 1, LG_SESS_CONNECTING);
    if (!s) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    s->local_ip = local_ip;
    s->peer_ip = peer_ip;
    s->peer_port = peer_port;
    snprintf(s->nic, sizeof(s->nic), "%s", nic);
    registry_add(s);
    return s;
}

/* Under tx_mu: connect, then the hello, then the workers. 1 up, 0 not yet, -1 failed. */
static int connect_step_locked(struct lg_session *s)
{
    if (s->hello_sent == 0) {
        int rc = lg_sock_connect_check(s->task.fd);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
    }
    const struct lg_hello h = {.flags = LG_HELLO_F_SESSION, .conn_nonce = s->id};
    int sent = lg_hello_send(s->task.fd, &h, &s->hello_sent);
    if (sent <= 0)
        return sent;
    if (lg_task_attach(&s->task, EPOLLIN | EPOLLOUT) != 0)
        return -1;
    __atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&s->last_rx_ns, lg_now_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, LG_SESS_UP, __ATOMIC_RELEASE);
    return 1;
}

/* Why another thread ended s, as an errno: its reason is in s->why, not in our errno. */
static int ended_with(struct lg_session *s)
{
    int err = __atomic_load_n(&s->err, __ATOMIC_ACQUIRE);
    return err ? err : ECONNRESET; /* an end with no errno: the peer's EOF, garbage, a stall */
}

/* 1 up, 0 still connecting, -1 failed. */
static int session_progress(struct lg_session *s)
{
    int st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (st == LG_SESS_UP)
        return 1;
    int rc = -1, err = ended_with(s);
    if (st == LG_SESS_CONNECTING) {
        pthread_mutex_lock(&s->tx_mu);
        st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
        rc = st == LG_SESS_UP ? 1 : st == LG_SESS_CONNECTING ? connect_step_locked(s) : -1;
        err = st == LG_SESS_CONNECTING ? errno : ended_with(s);
        pthread_mutex_unlock(&s->tx_mu);
        if (rc == 0 && lg_now_ns() - s->t0 > LG_MS(lg_params.connect_timeout_ms))
            rc = -1, err = ETIMEDOUT;
        if (rc < 0)
            sess_fail(s, err, "connect");
    }
    errno = err;
    return rc;
}

int lg_session_connect_check(struct lg_session *s)
{
    int rc = session_progress(s);
    return rc > 0 ? 0 : rc == 0 ? 1 : -1;
}

/* ---- acceptor ----------------------------------------------------------------------------- */

int lg_session_accept(int fd, const struct lg_hello *h, uint32_t local_ip)
{
    pthread_mutex_lock(&lg_sess_mu);
    for (struct lg_session *s = lg_sessions; s; s = s->next)
        if (!s->outgoing && s->id == h->conn_nonce && s->local_ip == local_ip) {
            pthread_mutex_unlock(&lg_sess_mu);
            return -1; /* a second socket claiming a live session */
        }
    pthread_mutex_unlock(&lg_sess_mu);
    lg_sock_setup_accepted(fd, LG_SOCK_CTRL);
    struct lg_session *s = sess_new(fd, h->conn_nonce, 0, LG_SESS_UP);
    if (!s)
        return -1;
    struct sockaddr_in peer = {0};
    socklen_t len = sizeof(peer);
    getpeername(fd, (struct sockaddr *)&peer, &len);
    s->local_ip = local_ip;
    s->peer_ip = peer.sin_addr.s_addr;
    s->peer_port = ntohs(peer.sin_port); /* (only for the logs: it is not the peer's listener) */
    if (lg_task_attach(&s->task, EPOLLIN | EPOLLOUT) != 0) {
        s->task.fd = -1; /* the acceptor closes it */
        sess_free(s);
        return -1;
    }
    __atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
    registry_add(s);
    return 0;
}

struct lg_session *lg_session_find(uint64_t id, uint32_t local_ip)
{
    pthread_mutex_lock(&lg_sess_mu);
    struct lg_session *s = lg_sessions;
    while (s && (s->outgoing || s->id != id || s->local_ip != local_ip ||
                 __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != LG_SESS_UP))
        s = s->next;
    if (s)
        s->refs++;
    pthread_mutex_unlock(&lg_sess_mu);
    return s;
}

struct lg_session *lg_session_adopt(int fd, uint64_t id)
{
    struct lg_session *s = sess_new(fd, id, 1, LG_SESS_UP);
    if (!s)
        return NULL;
    if (lg_task_attach(&s->task, EPOLLIN | EPOLLOUT) != 0) {
        s->task.fd = -1;
        sess_free(s);
        return NULL;
    }
    __atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
    registry_add(s); /* no address: lg_session_open never hands it out */
    return s;
}

/* ---- channels ----------------------------------------------------------------------------- */

int lg_session_attach(struct lg_session *s, struct lg_chan *ch, uint32_t id,
                      const struct lg_chan_ops *ops)
{
    pthread_mutex_lock(&s->ch_mu);
    int ok = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != LG_SESS_FAILED;
    if (ok && id == 0) {
        id = s->next_chan++;
        if (s->next_chan == 0)
            s->next_chan = 1;
    }
    for (struct lg_chan *q = ok ? s->bucket[id % LG_SESS_BUCKETS] : NULL; q; q = q->next)
        if (q->id == id)
            ok = 0;
    if (ok) {
        ch->sess = s;
        ch->id = id;
        ch->ops = ops;
        ch->lost = 0;
        ch->ack_off = -1;
        ch->next = s->bucket[id % LG_SESS_BUCKETS];
        s->bucket[id % LG_SESS_BUCKETS] = ch;
        __atomic_add_fetch(&s->nchan, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&ch->attached, 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&s->attach_gen, 1, __ATOMIC_RELEASE); /* held frames may be its */
    }
    pthread_mutex_unlock(&s->ch_mu);
    /* Its reader hands the frames held for it over now, not at the next frame (a connector's
     * session still connecting has no task with the workers yet, and holds nothing). */
    if (ok && __atomic_load_n(&s->started, __ATOMIC_ACQUIRE))
        lg_task_kick(&s->task);
    return ok ? 0 : -1;
}

void lg_session_detach(struct lg_chan *ch)
{
    struct lg_session *s = ch->sess;
    if (!s || !__atomic_exchange_n(&ch->attached, 0, __ATOMIC_ACQ_REL))
        return;
    pthread_mutex_lock(&s->ch_mu);
    for (struct lg_chan **pp = &s->bucket[ch->id % LG_SESS_BUCKETS]; *pp; pp = &(*pp)->next)
        if (*pp == ch) {
            *pp = ch->next;
            __atomic_sub_fetch(&s->nchan, 1, __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&s->ch_mu);
    while (__atomic_load_n(&ch->busy, __ATOMIC_ACQUIRE))
        sched_yield(); /* a frame being handed to it */
}

/* ---- writing ------------------------------------------------------------------------------ */

static void write_locked(struct lg_session *s)
{
    while (s->txq_off < s->txq_len) {
        struct iovec iov = {s->txq + s->txq_off, s->txq_len - s->txq_off};
        ssize_t n = lg_sock_writev(s->task.fd, &iov, 1);
        if (n < 0)
            return; /* EAGAIN: EPOLLOUT brings the handler back; errors show up on read */
        s->txq_off += (size_t)n;
        __atomic_store_n(&s->last_tx_ns, lg_now_ns(), __ATOMIC_RELAXED);
    }
    s->txq_off = s->txq_len = 0;
    s->txq_gen++;
}

/* Under tx_mu: room for one more frame, or 0 (the peer has read nothing for a long while). */
static int make_room_locked(struct lg_session *s)
{
    if (s->txq_len + LG_CTRL_SIZE <= sizeof(s->txq))
        return 1;
    memmove(s->txq, s->txq + s->txq_off, s->txq_len - s->txq_off);
    s->txq_len -= s->txq_off;
    s->txq_off = 0;
    s->txq_gen++;
    return s->txq_len + LG_CTRL_SIZE <= sizeof(s->txq);
}

static int sess_stalled(struct lg_session *s)
{
    return __atomic_load_n(&s->overflowed, __ATOMIC_ACQUIRE);
}

static void send_locked(struct lg_session *s, struct lg_chan *ch, struct lg_ctrl *f, int queue_only)
{
    /* Acks are cumulative: an unsent one is simply updated. */
    if (ch && f->type == LG_CTRL_ACK && ch->ack_off >= 0 && ch->ack_gen == s->txq_gen &&
        (size_t)ch->ack_off >= s->txq_off) {
        lg_ctrl_encode(s->txq + ch->ack_off, f);
        return;
    }
    if (!make_room_locked(s)) {
        if (!__atomic_exchange_n(&s->overflowed, 1, __ATOMIC_ACQ_REL))
            lg_wake_monitor(0); /* failed by the monitor: not under the locks a sender holds */
        return;
    }
    if (ch && f->type == LG_CTRL_ACK) {
        ch->ack_off = (long)s->txq_len;
        ch->ack_gen = s->txq_gen;
    }
    lg_ctrl_encode(s->txq + s->txq_len, f);
    s->txq_len += LG_CTRL_SIZE;
    if (!queue_only)
        write_locked(s);
}

void lg_session_send(struct lg_chan *ch, const struct lg_ctrl *f, int queue_only)
{
    struct lg_session *s = ch->sess;
    if (!s || !__atomic_load_n(&ch->attached, __ATOMIC_ACQUIRE))
        return; /* detached: the path is retired */
    struct lg_ctrl g = *f;
    g.chan = ch->id;
    pthread_mutex_lock(&s->tx_mu);
    if (lg_session_up(s))
        send_locked(s, ch, &g, queue_only);
    pthread_mutex_unlock(&s->tx_mu);
}

static void session_flush(struct lg_session *s)
{
    pthread_mutex_lock(&s->tx_mu);
    if (lg_session_up(s))
        write_locked(s);
    pthread_mutex_unlock(&s->tx_mu);
}

void lg_session_drain(struct lg_session *s, int timeout_ms)
{
    uint64_t end = lg_now_ns() + LG_MS(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&s->tx_mu);
        int up = lg_session_up(s);
        if (up)
            write_locked(s);
        int left = up && s->txq_off < s->txq_len;
        pthread_mutex_unlock(&s->tx_mu);
        if (!left || lg_now_ns() >= end)
            return;
        struct pollfd pfd = {.fd = s->task.fd, .events = POLLOUT};
        poll(&pfd, 1, 10);
    }
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The channel a frame names, held busy; NULL when the session has none of that id. */
static struct lg_chan *chan_hold(struct lg_session *s, uint32_t id)
{
    pthread_mutex_lock(&s->ch_mu);
    struct lg_chan *ch = s->bucket[id % LG_SESS_BUCKETS];
    while (ch && ch->id != id)
        ch = ch->next;
    if (ch)
        __atomic_add_fetch(&ch->busy, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&s->ch_mu);
    return ch;
}

static void deliver(struct lg_chan *ch, const struct lg_ctrl *f, uint64_t now)
{
    ch->ops->frame(ch, f, now);
    __atomic_sub_fetch(&ch->busy, 1, __ATOMIC_RELEASE);
}

/* Reader: keeps f for a channel not attached yet (LG_SESS_HELD). */
static void hold_frame(struct lg_session *s, const struct lg_ctrl *f, uint64_t now)
{
    if (s->nheld == LG_SESS_HELD) { /* the oldest goes: a peer cannot make us hold more */
        memmove(&s->held[0], &s->held[1], (LG_SESS_HELD - 1) * sizeof(s->held[0]));
        memmove(&s->held_ns[0], &s->held_ns[1], (LG_SESS_HELD - 1) * sizeof(s->held_ns[0]));
        s->nheld--;
    }
    s->held[s->nheld] = *f;
    s->held_ns[s->nheld++] = now;
}

/* Reader, once a channel was attached since the last look: hands each held frame whose
 * channel is here now to it, in the order they came (before any newer frame of it), and
 * drops those held too long. */
static void release_held(struct lg_session *s, uint64_t now)
{
    if (!s->nheld)
        return;
    uint32_t gen = __atomic_load_n(&s->attach_gen, __ATOMIC_ACQUIRE);
    if (gen == s->held_gen)
        return;
    s->held_gen = gen;
    uint64_t keep_ns = (uint64_t)lg_params.connect_timeout_ms * 1000000ull;
    int kept = 0;
    for (int i = 0; i < s->nheld; i++) {
        struct lg_chan *ch = chan_hold(s, s->held[i].chan);
        if (ch) {
            struct lg_ctrl f = s->held[i];
            deliver(ch, &f, now);
        } else if (lg_age_ns(now, s->held_ns[i]) < keep_ns) {
            s->held[kept] = s->held[i];
            s->held_ns[kept++] = s->held_ns[i];
        }
    }
    s->nheld = kept;
}

static void dispatch(struct lg_session *s, const struct lg_ctrl *f, uint64_t now)
{
    release_held(s, now);
    if (f->chan == 0) { /* the session's own: heartbeats (their arrival is noted) and BYE */
        if (f->type == LG_CTRL_BYE && f->flags == LG_BYE_FENCE && !f->epoch && !f->value)
            note_bye_all(s); /* the peer ends the session on purpose: EOF follows */
        else if (f->type != LG_CTRL_HB || f->flags || f->epoch || f->value)
            sess_end(s, 0, "a frame no session sends on channel 0", 1);
        return;
    }
    struct lg_chan *ch = chan_hold(s, f->chan);
    if (ch)
        deliver(ch, f, now);
    else /* a path not attached yet (its accept is to come), or one closed since */
        hold_frame(s, f, now);
}

static void sess_handler(struct lg_task *t, uint32_t events)
{
    struct lg_session *s = (struct lg_session *)t;
    if (events & EPOLLOUT)
        session_flush(s);
    if (s->nheld) /* a channel may have been attached since (lg_session_attach kicks us) */
        release_held(s, lg_now_ns());
    while (lg_session_up(s)) {
        struct iovec iov = {s->rbuf + s->rgot, sizeof(s->rbuf) - s->rgot};
        ssize_t n = lg_sock_readv(t->fd, &iov, 1);
        uint64_t now = lg_now_ns();
        if (n == 0) {
            sess_fail(s, 0, "closed by the peer");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                __atomic_store_n(&s->drained_ns, now, __ATOMIC_RELAXED);
            else
                sess_fail(s, errno, "read");
            return;
        }
        s->rgot += (size_t)n;
        uint64_t last = __atomic_load_n(&s->last_rx_ns, __ATOMIC_RELAXED);
        if (now > last && now - last >= LG_RX_DISTINCT_NS)
            __atomic_store_n(&s->prev_rx_ns, last, __ATOMIC_RELAXED);
        __atomic_store_n(&s->last_rx_ns, now, __ATOMIC_RELAXED);
        size_t off = 0;
        for (; s->rgot - off >= LG_CTRL_SIZE && lg_session_up(s); off += LG_CTRL_SIZE) {
            struct lg_ctrl f;
            if (lg_ctrl_decode(s->rbuf + off, &f) != 0) {
                sess_end(s, 0, "garbage on the control session", 1);
                return;
            }
            dispatch(s, &f, now);
        }
        memmove(s->rbuf, s->rbuf + off, s->rgot - off);
        s->rgot -= off;
    }
}

void lg_session_pump(struct lg_session *s, uint64_t now)
{
    uint64_t drained = __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED);
    if (!lg_session_up(s) || (now && lg_age_ns(now, drained) < LG_SESS_PUMP_NS))
        return;
    lg_task_run(&s->task, EPOLLIN);
}

/* ---- the monitor's tick ---------------------------------------------------------------------- */

/* Under lg_sess_mu: what the tick does to one session; 1 when it is to be failed, 2 when its
 * acceptor-side hold goes (failed, or abandoned), 0 otherwise. *next gets its next due time. */
static int tick_one(struct lg_session *s, uint64_t now, uint64_t *next)
{
    uint64_t hb = LG_MS(lg_params.heartbeat_ms);
    int st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (st == LG_SESS_FAILED)
        return !s->outgoing && !s->reaped ? 2 : 0;
    if (st == LG_SESS_CONNECTING)
        return lg_age_ns(now, s->t0) > LG_MS(lg_params.connect_timeout_ms);
    if (sess_stalled(s))
        return 1;
    uint64_t heard = __atomic_load_n(&s->last_rx_ns, __ATOMIC_RELAXED);
    if (lg_age_ns(now, heard) > LG_MS(lg_params.silent_timeout_ms))
        __atomic_store_n(&s->suspect, 1, __ATOMIC_RELEASE); /* never handed out again */
    if (!s->outgoing && !__atomic_load_n(&s->nchan, __ATOMIC_RELAXED) &&
        lg_age_ns(now, heard) > LG_MS(lg_params.dead_timeout_ms))
        return 1; /* no path left, and the connector went quiet: it is gone */
    pthread_mutex_lock(&s->tx_mu);
    uint64_t sent = __atomic_load_n(&s->last_tx_ns, __ATOMIC_RELAXED);
    if (lg_age_ns(now, sent) >= hb && s->txq_off == s->txq_len) {
        struct lg_ctrl f = {.type = LG_CTRL_HB};
        send_locked(s, NULL, &f, 0);
        sent = now;
    } else if (s->txq_off < s->txq_len) {
        write_locked(s); /* the heartbeat refreshes the connections queued */
    }
    pthread_mutex_unlock(&s->tx_mu);
    if (sent + hb < *next)
        *next = sent + hb;
    return 0;
}

uint64_t lg_sessions_tick(uint64_t now)
{
    uint64_t next = now + LG_MS(lg_params.heartbeat_ms);
    struct lg_session *fail[16], *drop[16];
    int nfail = 0, ndrop = 0;
    pthread_mutex_lock(&lg_sess_mu);
    for (struct lg_session *s = lg_sessions; s; s = s->next) {
        int what = tick_one(s, now, &next);
        if (what == 1 && nfail < 16) {
            s->refs++;
            fail[nfail++] = s;
        } else if (what == 2 && ndrop < 16) {
            s->reaped = 1; /* its hold is dropped below */
            drop[ndrop++] = s;
        }
    }
    pthread_mutex_unlock(&lg_sess_mu);
    for (int i = 0; i < nfail; i++) {
        int stall = sess_stalled(fail[i]);
        sess_end(fail[i], stall ? 0 : ETIMEDOUT,
                 stall ? "stalled: the peer reads nothing" : "no answer", 1);
        if (!fail[i]->outgoing && !fail[i]->reaped) {
            fail[i]->reaped = 1;
            lg_session_put(fail[i]);
        }
        lg_session_put(fail[i]);
    }
    for (int i = 0; i < ndrop; i++)
        lg_session_put(drop[i]);
    if (nfail == 16 || ndrop == 16)
        next = now; /* more to do */
    return next;
}

void lg_sessions_shutdown(void)
{
    pthread_mutex_lock(&lg_sess_mu);
    struct lg_session *s = lg_sessions;
    lg_sessions = NULL;
    pthread_mutex_unlock(&lg_sess_mu);
    while (s) {
        struct lg_session *next = s->next;
        sess_free(s);
        s = next;
    }
}

int lg_sessions_count(void)
{
    int n = 0;
    pthread_mutex_lock(&lg_sess_mu);
    for (struct lg_session *s = lg_sessions; s; s = s->next)
        n++;
    pthread_mutex_unlock(&lg_sess_mu);
    return n;
}
