/* The monitor thread (see monitor.h): registry of connections, wake-ups, and the hand-over of
 * rebuilt paths the acceptor received to the connections they belong to. */
#include "proto/monitor.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/census.h"
#include "daemon/devices.h"
#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "proto/reconnect.h"
#include "proto/spread.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/sock.h"
#include "runtime/util.h"
#include "runtime/wake.h"
#include "session/acceptor.h"
#include "session/session.h"

static struct {
    pthread_mutex_t mu; /* the registry, briefly: a connection runs under its own run_mu */
    pthread_t tid;
    int running, stop; /* under mu */
    int epfd;
    struct lg_conn *conns;
    struct lg_conn **due; /* a pass's connections to run, each held (monitor thread only) */
    int ndue, cap;
    uint64_t census_ns; /* the last census walk (monitor thread only) */
} M = {.mu = PTHREAD_MUTEX_INITIALIZER, .epfd = -1};

/* ---- the census (census.h) ------------------------------------------------------------- */

/* The registry is walked at most this often: a monitor busy with many connections wakes
 * thousands of times a second, and a change seen a few ms late is nothing beside the
 * LG_CENSUS_MIN_INTERVAL_MS between reports. */
#define LG_CENSUS_WALK_MS 5

/* The NIC of slot i is the connection's (lg_conn_nic), which every path of the slot is built
 * on, not the path's own copy: a close counting a failure must not read a path the monitor
 * may be replacing. */
/* Under mu: c's failure into the census, once (a close counts one the walk has not seen). */
static void census_failed(struct lg_conn *c)
{
    if (c->census_counted || !__atomic_load_n(&c->error, __ATOMIC_ACQUIRE))
        return;
    c->census_counted = 1;
    lg_census_count_failed(lg_conn_nic(c, 0), c->fail_reason);
}

/* After a pass: the registry's census, reported by the census rules. Returns when the
 * monitor should come back for it. Only atomics and what the monitor owns are read, under
 * the registry's lock alone (no connection's lock: NCCL's threads never wait for this). */
static uint64_t census_pass(uint64_t now)
{
    if (!lg_census_enabled())
        return UINT64_MAX;
    if (now - M.census_ns < LG_MS(LG_CENSUS_WALK_MS))
        return M.census_ns + LG_MS(LG_CENSUS_WALK_MS);
    M.census_ns = now;
    struct lg_census t = {0};
    int n = 0;
    pthread_mutex_lock(&M.mu);
    for (struct lg_conn *c = M.conns; c; c = c->mon_next, n++) {
        if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE)) {
            census_failed(c); /* counted in `failed` only */
            continue;
        }
        int a = __atomic_load_n(&c->active, __ATOMIC_ACQUIRE);
        const struct lg_path *standby = __atomic_load_n(&c->paths[1 - a], __ATOMIC_ACQUIRE);
        lg_census_tally_conn(&t, lg_conn_nic(c, 0), lg_conn_nic(c, a), a == 1,
                             lg_path_up(standby) ? lg_conn_nic(c, 1 - a) : NULL);
    }
    pthread_mutex_unlock(&M.mu);
    lg_census_tally_done(&t);
    return lg_census_report(&t, n);
}

static void wake_rejoin(void) { lg_wake_monitor(0); }

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
    census_failed(c);
    int last = !M.conns;
    pthread_mutex_unlock(&M.mu);
    if (last && lg_census_enabled())
        lg_wake_monitor(0); /* the census's goodbye */
    /* Waits for this connection's own run at most, never for the rest of a pass: a pass
     * that still holds c skips it from now on (and the object outlives the hold). */
    pthread_mutex_lock(&c->run_mu);
    __atomic_store_n(&c->closing, 1, __ATOMIC_RELEASE);
    lg_rejoin_abort(c, 0);
    lg_rejoin_abort(c, 1);
    pthread_mutex_unlock(&c->run_mu);
}

/* REJOIN sockets the acceptor queued go to the connection they name. */
static void take_rejoins(uint64_t now)
{
    struct lg_hello h;
    int fd;
    uint32_t ip;
    while (lg_acceptor_take_rejoin(&h, &fd, &ip)) {
        pthread_mutex_lock(&M.mu);
        struct lg_conn *c = M.conns;
        while (c && !(c->nonce == h.conn_nonce && c->listen_id == h.listen_id &&
                      c->kind == LG_CONN_RECV))
            c = c->mon_next;
        if (c)
            lg_conn_hold(c);
        pthread_mutex_unlock(&M.mu);
        int filed = 0;
        if (c) {
            pthread_mutex_lock(&c->run_mu);
            filed = !c->closing && lg_rejoin_file(c, &h, fd, ip, now) == 0;
            pthread_mutex_unlock(&c->run_mu);
            lg_conn_put(c);
        }
        if (!filed)
            close(fd);
    }
}

/* Under mu: c is due (marked, asked for, or its time came); held for the pass. 0, or -1 when
 * there is no room to note it (it runs at the next pass). */
static int note_due(struct lg_conn *c)
{
    if (M.ndue == M.cap) {
        int cap = M.cap ? 2 * M.cap : 64;
        struct lg_conn **nd = realloc(M.due, (size_t)cap * sizeof(*nd));
        if (!nd)
            return -1;
        M.due = nd;
        M.cap = cap;
    }
    lg_conn_hold(c);
    M.due[M.ndue++] = c;
    return 0;
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
        int busy = lg_wake_sleep_begin();
        int n = epoll_wait(M.epfd, evs, 16, busy ? 0 : timeout);
        lg_wake_sleep_end();
        now = lg_now_ns();
        lg_health_tick(now);
        lg_monitor_health_poll();
        lg_spread_watch(now); /* a NIC back: its devices' standbys re-spread */
        lg_acceptor_progress(); /* NCCL's accept() progresses it too */
        for (int i = 0; i < n; i++)
            if (!evs[i].data.ptr)
                lg_wake_drain();
        take_rejoins(now);
        int all = lg_wake_take_all();
        next = now + hb;
        /* The registry's lock only to pick the due connections: connect/accept (adding) and
         * close (removing) never wait behind a pass's failover work. */
        pthread_mutex_lock(&M.mu);
        if (M.stop) {
            pthread_mutex_unlock(&M.mu);
            break;
        }
        for (struct lg_conn *c = M.conns; c; c = c->mon_next) {
            int dirty = __atomic_exchange_n(&c->dirty, 0, __ATOMIC_SEQ_CST);
            if ((dirty || all || now >= c->fo.next_run_ns) && note_due(c) == 0)
                continue;
            if (dirty)
                __atomic_store_n(&c->dirty, 1, __ATOMIC_SEQ_CST); /* no room: next pass */
            if (c->fo.next_run_ns < next)
                next = c->fo.next_run_ns;
        }
        pthread_mutex_unlock(&M.mu);
        for (int i = 0; i < M.ndue; i++) {
            struct lg_conn *c = M.due[i];
            pthread_mutex_lock(&c->run_mu);
            if (!c->closing) {
                c->fo.next_run_ns = lg_fo_run(c, now);
                if (c->fo.next_run_ns < next)
                    next = c->fo.next_run_ns;
            }
            pthread_mutex_unlock(&c->run_mu);
        }
        for (int i = 0; i < M.ndue; i++)
            lg_conn_put(M.due[i]);
        M.ndue = 0;
        /* The paths the passes left (a storm's dead ones): a batch between two passes, so
         * that every connection switches first and none waits behind the clean-up. */
        if (lg_paths_retire_queued() > 0)
            next = now;
        /* The sessions' heartbeats, and the pass's queued heartbeat refreshes written out,
         * one write per session. */
        uint64_t sess_next = lg_sessions_tick(lg_now_ns());
        if (sess_next < next)
            next = sess_next;
        uint64_t census_next = census_pass(lg_now_ns());
        if (census_next < next)
            next = census_next;
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
    lg_census_start();
    M.epfd = epoll_create1(EPOLL_CLOEXEC);
    int evfd = lg_wake_open();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    struct epoll_event acc = {.events = EPOLLIN, .data.ptr = &M};
    int accfd = lg_acceptor_fd();
    if (M.epfd < 0 || evfd < 0 || accfd < 0 || epoll_ctl(M.epfd, EPOLL_CTL_ADD, evfd, &ev) != 0 ||
        epoll_ctl(M.epfd, EPOLL_CTL_ADD, accfd, &acc) != 0 ||
        pthread_create(&M.tid, NULL, monitor_main, NULL) != 0) {
        LG_WARN("cannot start the monitor thread: %s", strerror(errno));
        if (M.epfd >= 0)
            close(M.epfd);
        lg_wake_close();
        M.epfd = -1;
        pthread_mutex_unlock(&M.mu);
        return -1;
    }
    lg_acceptor_on_rejoin(wake_rejoin); /* REJOIN sockets wait for take_rejoins */
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
    lg_wake_monitor(0);
    pthread_join(M.tid, NULL);
    lg_census_stop(); /* the goodbye, if the last close did not send it */
    while (lg_paths_retire_queued() > 0) /* the last comm is closed: only the holds go */
        ;
    lg_acceptor_on_rejoin(NULL);
    lg_acceptor_shutdown();
    lg_sessions_shutdown(); /* what the peers left open to us */
    pthread_mutex_lock(&M.mu);
    lg_wake_close();
    close(M.epfd);
    M.epfd = -1;
    pthread_mutex_unlock(&M.mu);
}
