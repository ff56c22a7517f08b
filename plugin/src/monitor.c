/* The monitor thread (see monitor.h): registry of connections, wake-ups, listening sockets
 * for rebuilt paths and the sockets waiting for their hello. */
#include "monitor.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "health.h"
#include "log.h"
#include "params.h"
#include "reconnect.h"
#include "sock.h"
#include "util.h"

#define LG_PEND_MAX 256

/* An accepted socket that has not sent its whole hello yet. */
struct lg_pend {
    int fd;
    int path;
    uint64_t listen_id, t0;
    size_t got;
    uint8_t buf[LG_HELLO_SIZE];
};

static struct {
    pthread_mutex_t mu; /* registry, lsock refs, pending sockets; held while a conn is run */
    pthread_t tid;
    int running, stop; /* under mu */
    int epfd, evfd;
    int asleep;        /* in epoll_wait (atomic) */
    int pending;       /* a wake-up since the last pass (atomic) */
    int wake_all;      /* run every connection at the next pass (atomic) */
    uint64_t gen_told; /* daemon table generation last announced (atomic) */
    struct lg_conn *conns;
    struct lg_pend pend[LG_PEND_MAX];
    int npend;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .evfd = -1};

void lg_monitor_wake(struct lg_conn *c)
{
    if (c)
        __atomic_store_n(&c->dirty, 1, __ATOMIC_SEQ_CST);
    else
        __atomic_store_n(&M.wake_all, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&M.pending, 1, __ATOMIC_SEQ_CST);
    int fd = __atomic_load_n(&M.evfd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && __atomic_load_n(&M.asleep, __ATOMIC_SEQ_CST)) {
        uint64_t one = 1;
        ssize_t rc = write(fd, &one, sizeof(one));
        (void)rc; /* EAGAIN: already signalled */
    }
}

void lg_monitor_health_poll(void)
{
    uint64_t gen = lg_health_poll();
    if (gen != __atomic_load_n(&M.gen_told, __ATOMIC_RELAXED)) {
        __atomic_store_n(&M.gen_told, gen, __ATOMIC_RELAXED);
        lg_monitor_wake(NULL);
    }
}

void lg_monitor_add(struct lg_conn *c)
{
    pthread_mutex_lock(&M.mu);
    c->mon_next = M.conns;
    M.conns = c;
    pthread_mutex_unlock(&M.mu);
    lg_monitor_wake(c);
}

void lg_monitor_remove(struct lg_conn *c)
{
    pthread_mutex_lock(&M.mu);
    for (struct lg_conn **pp = &M.conns; *pp; pp = &(*pp)->mon_next)
        if (*pp == c) {
            *pp = c->mon_next;
            break;
        }
    lg_rejoin_abort(c, 0);
    lg_rejoin_abort(c, 1);
    pthread_mutex_unlock(&M.mu);
}

struct lg_conn *lg_monitor_find_locked(uint64_t nonce, uint64_t listen_id)
{
    for (struct lg_conn *c = M.conns; c; c = c->mon_next)
        if (c->nonce == nonce && c->listen_id == listen_id && c->kind == LG_CONN_RECV)
            return c;
    return NULL;
}

/* ---- listening sockets ----------------------------------------------------------------- */

struct lg_lsock *lg_lsock_new(int fd, int path, uint64_t listen_id)
{
    struct lg_lsock *ls = calloc(1, sizeof(*ls));
    if (!ls)
        return NULL;
    ls->fd = fd;
    ls->path = path;
    ls->listen_id = listen_id;
    ls->refs = 1;
    ls->listen_open = 1;
    return ls;
}

void lg_lsock_ref(struct lg_lsock *ls)
{
    pthread_mutex_lock(&M.mu);
    ls->refs++;
    pthread_mutex_unlock(&M.mu);
}

static void lsock_unref_locked(struct lg_lsock *ls)
{
    if (--ls->refs > 0)
        return;
    if (ls->registered && M.epfd >= 0)
        epoll_ctl(M.epfd, EPOLL_CTL_DEL, ls->fd, NULL);
    close(ls->fd);
    free(ls);
}

void lg_lsock_unref(struct lg_lsock *ls)
{
    pthread_mutex_lock(&M.mu);
    lsock_unref_locked(ls);
    pthread_mutex_unlock(&M.mu);
}

void lg_lsock_listen_closed(struct lg_lsock *ls)
{
    pthread_mutex_lock(&M.mu);
    ls->listen_open = 0;
    if (ls->refs > 1 && M.epfd >= 0 && !ls->registered) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ls};
        ls->registered = epoll_ctl(M.epfd, EPOLL_CTL_ADD, ls->fd, &ev) == 0;
    }
    lsock_unref_locked(ls);
    pthread_mutex_unlock(&M.mu);
}

/* Under mu. */
static void lsock_accept(struct lg_lsock *ls, uint64_t now)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(ls->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (M.npend == LG_PEND_MAX) {
            close(fd);
            continue;
        }
        M.pend[M.npend++] = (struct lg_pend){.fd = fd, .path = ls->path,
                                             .listen_id = ls->listen_id, .t0 = now};
    }
}

/* Under mu: read hellos; hand complete ones to reconnect.c. */
static void pend_progress(uint64_t now)
{
    uint64_t timeout = (uint64_t)lg_params.rejoin_timeout_ms * 1000000ull;
    for (int i = 0; i < M.npend; i++) {
        struct lg_pend *a = &M.pend[i];
        int drop = lg_sock_read_exact(a->fd, a->buf, LG_HELLO_SIZE, &a->got) != 0;
        if (!drop && a->got == LG_HELLO_SIZE) {
            struct lg_hello h;
            if (lg_hello_decode(a->buf, &h) == 0 && (h.flags & LG_HELLO_F_REJOIN) &&
                h.path == a->path && h.listen_id == a->listen_id &&
                lg_rejoin_file(&h, a->fd, now) == 0) {
                M.pend[i--] = M.pend[--M.npend];
                continue;
            }
            drop = 1;
        }
        if (drop || now - a->t0 > timeout) {
            close(a->fd);
            M.pend[i--] = M.pend[--M.npend];
        }
    }
}

/* ---- the thread ------------------------------------------------------------------------ */

static void *monitor_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct epoll_event evs[16];
    uint64_t hb = (uint64_t)lg_params.heartbeat_ms * 1000000ull;
    uint64_t next = 0;
    for (;;) {
        uint64_t now = lg_now_ns();
        int timeout = next > now ? (int)((next - now + 999999) / 1000000) : 0;
        /* Dekker with lg_monitor_wake: it sets `pending` then looks at `asleep`. */
        __atomic_store_n(&M.asleep, 1, __ATOMIC_SEQ_CST);
        int busy = __atomic_load_n(&M.pending, __ATOMIC_SEQ_CST);
        int n = epoll_wait(M.epfd, evs, 16, busy ? 0 : timeout);
        __atomic_store_n(&M.asleep, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&M.pending, 0, __ATOMIC_SEQ_CST);
        now = lg_now_ns();
        lg_health_tick(now);
        lg_monitor_health_poll();
        pthread_mutex_lock(&M.mu);
        if (M.stop) {
            pthread_mutex_unlock(&M.mu);
            break;
        }
        for (int i = 0; i < n; i++) {
            if (!evs[i].data.ptr) {
                uint64_t v;
                ssize_t rc = read(M.evfd, &v, sizeof(v));
                (void)rc;
            } else {
                lsock_accept(evs[i].data.ptr, now);
            }
        }
        if (M.npend)
            pend_progress(now);
        int all = __atomic_exchange_n(&M.wake_all, 0, __ATOMIC_SEQ_CST);
        next = now + hb;
        for (struct lg_conn *c = M.conns; c; c = c->mon_next) {
            int dirty = __atomic_exchange_n(&c->dirty, 0, __ATOMIC_SEQ_CST);
            if (dirty || all || now >= c->fo.next_run_ns)
                c->fo.next_run_ns = lg_fo_run(c, now);
            if (c->fo.next_run_ns < next)
                next = c->fo.next_run_ns;
        }
        if (M.npend && next > now + 2000000ull)
            next = now + 2000000ull; /* hellos are polled */
        pthread_mutex_unlock(&M.mu);
    }
    return NULL;
}

int lg_monitor_start(void)
{
    pthread_mutex_lock(&M.mu);
    if (M.running) {
        pthread_mutex_unlock(&M.mu);
        return 0;
    }
    M.stop = 0;
    M.epfd = epoll_create1(EPOLL_CLOEXEC);
    int evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (M.epfd < 0 || evfd < 0 || epoll_ctl(M.epfd, EPOLL_CTL_ADD, evfd, &ev) != 0 ||
        pthread_create(&M.tid, NULL, monitor_main, NULL) != 0) {
        LG_WARN("cannot start the monitor thread: %s", strerror(errno));
        if (M.epfd >= 0)
            close(M.epfd);
        if (evfd >= 0)
            close(evfd);
        M.epfd = -1;
        pthread_mutex_unlock(&M.mu);
        return -1;
    }
    __atomic_store_n(&M.evfd, evfd, __ATOMIC_RELEASE);
    pthread_setname_np(M.tid, "lg-monitor");
    M.running = 1;
    pthread_mutex_unlock(&M.mu);
    return 0;
}

void lg_monitor_stop(void)
{
    pthread_mutex_lock(&M.mu);
    if (!M.running) {
        pthread_mutex_unlock(&M.mu);
        return;
    }
    M.stop = 1;
    M.running = 0;
    pthread_mutex_unlock(&M.mu);
    uint64_t one = 1;
    ssize_t rc = write(M.evfd, &one, sizeof(one));
    (void)rc;
    pthread_join(M.tid, NULL);
    pthread_mutex_lock(&M.mu);
    for (int i = 0; i < M.npend; i++)
        close(M.pend[i].fd);
    M.npend = 0;
    int evfd = M.evfd;
    __atomic_store_n(&M.evfd, -1, __ATOMIC_RELEASE);
    close(evfd);
    close(M.epfd);
    M.epfd = -1;
    pthread_mutex_unlock(&M.mu);
}
