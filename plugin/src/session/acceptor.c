/* The acceptor (acceptor.h): shared listeners, sockets waiting for their hello, routing. */
#include "session/acceptor.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "session/session.h"

struct lg_listener {
    uint32_t ip;
    uint16_t port;
    int fd;
    int refs;
};

struct waiting { /* an accepted socket whose hello is not complete */
    int fd;
    uint32_t local_ip;
    uint64_t t0;
    size_t got;
    uint8_t buf[LG_HELLO_SIZE];
};

struct rejoin { /* a complete REJOIN hello for the monitor */
    int fd;
    uint32_t local_ip;
    struct lg_hello h;
};

struct sink {
    uint64_t listen_id;
    lg_accept_sink fn;
    void *arg;
};

/* A growable array: nothing is refused for want of room. */
#define GROW(arr, n, cap)                                                                    \
    ((n) < (cap) || grow((void **)&(arr), &(cap), sizeof(*(arr))) == 0)

static struct {
    pthread_mutex_t mu;
    int epfd;
    void (*on_rejoin)(void);
    struct lg_listener **ls;
    int nls, capls;
    struct waiting *w;
    int nw, capw;
    struct rejoin *rj;
    int nrj, caprj;
    struct sink *sinks;
    int nsinks, capsinks;
} A = {.mu = PTHREAD_MUTEX_INITIALIZER, .epfd = -1};

static int grow(void **arr, int *cap, size_t elem)
{
    int ncap = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Under mu. */
static int epfd_locked(void)
{
    if (A.epfd < 0)
        A.epfd = epoll_create1(EPOLL_CLOEXEC);
    return A.epfd;
}

static int watch(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN};
    return epfd_locked() >= 0 && epoll_ctl(A.epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -1;
}

static void unwatch(int fd)
{
    if (A.epfd >= 0)
        epoll_ctl(A.epfd, EPOLL_CTL_DEL, fd, NULL);
}

int lg_acceptor_fd(void)
{
    pthread_mutex_lock(&A.mu);
    int fd = epfd_locked();
    pthread_mutex_unlock(&A.mu);
    return fd;
}

void lg_acceptor_on_rejoin(void (*fn)(void))
{
    pthread_mutex_lock(&A.mu);
    A.on_rejoin = fn;
    pthread_mutex_unlock(&A.mu);
}

/* ---- listeners ------------------------------------------------------------------------------ */

struct lg_listener *lg_listener_get(uint32_t ip, uint16_t *port)
{
    pthread_mutex_lock(&A.mu);
    for (int i = 0; i < A.nls; i++)
        if (A.ls[i]->ip == ip) {
            A.ls[i]->refs++;
            *port = A.ls[i]->port;
            pthread_mutex_unlock(&A.mu);
            return A.ls[i];
        }
    struct lg_listener *l = NULL;
    int fd = -1, e = ENOMEM;
    if (!GROW(A.ls, A.nls, A.capls) || !(l = calloc(1, sizeof(*l))))
        goto fail;
    fd = lg_sock_listen(ip, &l->port);
    if (fd < 0 || watch(fd) != 0) {
        e = errno;
        goto fail;
    }
    l->ip = ip;
    l->fd = fd;
    l->refs = 1;
    A.ls[A.nls++] = l;
    *port = l->port;
    pthread_mutex_unlock(&A.mu);
    return l;
fail:
    if (fd >= 0)
        close(fd);
    free(l);
    pthread_mutex_unlock(&A.mu);
    errno = e;
    return NULL;
}

void lg_listener_ref(struct lg_listener *l)
{
    pthread_mutex_lock(&A.mu);
    l->refs++;
    pthread_mutex_unlock(&A.mu);
}

void lg_listener_put(struct lg_listener *l)
{
    pthread_mutex_lock(&A.mu);
    if (--l->refs == 0) {
        for (int i = 0; i < A.nls; i++)
            if (A.ls[i] == l) {
                A.ls[i] = A.ls[--A.nls];
                break;
            }
        close(l->fd); /* leaves the epoll set with it */
        free(l);
    }
    pthread_mutex_unlock(&A.mu);
}

uint32_t lg_listener_ip(const struct lg_listener *l) { return l->ip; }

/* ---- listen comms ---------------------------------------------------------------------------- */

int lg_acceptor_register(uint64_t listen_id, lg_accept_sink fn, void *arg)
{
    pthread_mutex_lock(&A.mu);
    int ok = GROW(A.sinks, A.nsinks, A.capsinks);
    if (ok)
        A.sinks[A.nsinks++] = (struct sink){.listen_id = listen_id, .fn = fn, .arg = arg};
    pthread_mutex_unlock(&A.mu);
    return ok ? 0 : -1;
}

void lg_acceptor_unregister(uint64_t listen_id)
{
    pthread_mutex_lock(&A.mu); /* sinks run under it: none runs once we hold it */
    for (int i = 0; i < A.nsinks; i++)
        if (A.sinks[i].listen_id == listen_id) {
            A.sinks[i] = A.sinks[--A.nsinks];
            break;
        }
    pthread_mutex_unlock(&A.mu);
}

/* ---- progress ------------------------------------------------------------------------------ */

/* Under mu: a socket's hello is complete. 0: handed on (or queued), -1: close it. */
static int route(struct waiting *w, uint64_t now)
{
    struct lg_hello h;
    if (lg_hello_decode(w->buf, &h) != 0)
        return -1;
    if (h.flags & LG_HELLO_F_SESSION)
        return lg_session_accept(w->fd, &h, w->local_ip);
    if (h.flags & LG_HELLO_F_REJOIN) {
        if (!GROW(A.rj, A.nrj, A.caprj))
            return -1;
        A.rj[A.nrj++] = (struct rejoin){.fd = w->fd, .local_ip = w->local_ip, .h = h};
        return 0;
    }
    for (int i = 0; i < A.nsinks; i++)
        if (A.sinks[i].listen_id == h.listen_id)
            return A.sinks[i].fn(A.sinks[i].arg, &h, w->fd, w->local_ip, now);
    return -1; /* its listen comm is closed, or it never was ours */
}

static void accept_all(uint64_t now)
{
    for (int i = 0; i < A.nls; i++)
        for (;;) {
            if (!GROW(A.w, A.nw, A.capw))
                return; /* out of memory: they wait in the backlog */
            int fd = accept4(A.ls[i]->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            if (watch(fd) != 0) {
                close(fd);
                continue;
            }
            A.w[A.nw++] = (struct waiting){.fd = fd, .local_ip = A.ls[i]->ip, .t0 = now};
        }
}

void lg_acceptor_progress(void)
{
    uint64_t timeout = (uint64_t)lg_params.connect_timeout_ms * 1000000ull;
    pthread_mutex_lock(&A.mu);
    /* Read under the lock: every socket's t0 comes from some thread's run of this, and a
     * reading from before the lock could lie before it (now - t0 would wrap). */
    uint64_t now = lg_now_ns();
    if (A.epfd >= 0) {
        /* One look, bounded: the scan below does the work. The set is level-triggered, so a
         * loop until fewer than 64 come back never ends while 64 sockets are ready (a restore
         * under hundreds of connections); the readiness goes once they are read. */
        struct epoll_event evs[64];
        (void)epoll_wait(A.epfd, evs, 64, 0);
    }
    accept_all(now);
    int queued = A.nrj;
    for (int i = 0; i < A.nw; i++) {
        struct waiting *w = &A.w[i];
        int drop = lg_sock_read_exact(w->fd, w->buf, LG_HELLO_SIZE, &w->got) != 0;
        if (!drop && w->got == LG_HELLO_SIZE) {
            unwatch(w->fd); /* its new owner polls it from now */
            drop = route(w, now) != 0;
            if (!drop) {
                A.w[i--] = A.w[--A.nw];
                continue;
            }
        }
        if (drop || now - w->t0 > timeout) {
            close(w->fd);
            A.w[i--] = A.w[--A.nw];
        }
    }
    void (*fn)(void) = A.nrj > queued ? A.on_rejoin : NULL;
    pthread_mutex_unlock(&A.mu);
    if (fn)
        fn();
}

int lg_acceptor_take_rejoin(struct lg_hello *h, int *fd, uint32_t *local_ip)
{
    pthread_mutex_lock(&A.mu);
    int got = A.nrj > 0;
    if (got) {
        struct rejoin *r = &A.rj[0];
        *h = r->h;
        *fd = r->fd;
        *local_ip = r->local_ip;
        memmove(A.rj, A.rj + 1, (size_t)--A.nrj * sizeof(*A.rj)); /* in arrival order */
    }
    pthread_mutex_unlock(&A.mu);
    return got;
}

void lg_acceptor_shutdown(void)
{
    pthread_mutex_lock(&A.mu);
    for (int i = 0; i < A.nw; i++)
        close(A.w[i].fd);
    for (int i = 0; i < A.nrj; i++)
        close(A.rj[i].fd);
    A.nw = A.nrj = 0;
    if (A.epfd >= 0 && A.nls == 0) {
        close(A.epfd);
        A.epfd = -1;
    }
    pthread_mutex_unlock(&A.mu);
}
