/* Progress engine: fixed pool of epoll threads (see progress.h). */
#include "runtime/progress.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "runtime/log.h"

#define LG_RS_RUNNING 1u
#define LG_RS_AGAIN 2u
#define LG_MAX_WORKERS 64

struct lg_detach_cmd {
    struct lg_task **tasks;
    int n;
    int *pending; /* workers still to process it (under lg_pool.mu) */
    struct lg_detach_cmd *next;
};

struct lg_worker {
    pthread_t tid;
    int epfd, evfd;
    pthread_mutex_t mu; /* ready list and commands */
    struct lg_task *ready_head, *ready_tail;
    struct lg_detach_cmd *cmds;
    int sleeping; /* atomic: about to block or blocked in epoll_wait */
    int stop;
};

static struct {
    pthread_mutex_t mu; /* start/stop and detach completion */
    pthread_cond_t cond;
    int n;
    unsigned rr;
    struct lg_worker w[LG_MAX_WORKERS];
} lg_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static __thread int lg_in_worker;

int lg_progress_on_worker(void) { return lg_in_worker; }

static void worker_wake(struct lg_worker *w)
{
    uint64_t one = 1;
    ssize_t rc = write(w->evfd, &one, sizeof(one));
    (void)rc; /* EAGAIN: the counter is already non-zero, the worker will wake */
}

void lg_task_run(struct lg_task *t, uint32_t events)
{
    if (events)
        __atomic_fetch_or(&t->pend_events, events, __ATOMIC_RELAXED);
    /* Sequentially consistent with the `dead` load below: pairs with lg_tasks_detach, which
     * stores `dead` and then waits for run_state to be idle (store-load on both sides). */
    uint32_t s = __atomic_fetch_or(&t->run_state, LG_RS_RUNNING | LG_RS_AGAIN, __ATOMIC_SEQ_CST);
    if (s & LG_RS_RUNNING)
        return; /* the current runner sees AGAIN and goes around */
    for (;;) {
        __atomic_fetch_and(&t->run_state, ~LG_RS_AGAIN, __ATOMIC_ACQ_REL);
        uint32_t ev = __atomic_exchange_n(&t->pend_events, 0, __ATOMIC_ACQ_REL);
        if (!__atomic_load_n(&t->dead, __ATOMIC_SEQ_CST))
            t->fn(t, ev);
        uint32_t expect = LG_RS_RUNNING;
        if (__atomic_compare_exchange_n(&t->run_state, &expect, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return;
    }
}

void lg_task_kick(struct lg_task *t)
{
    if (__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE))
        return; /* detached: a late kick would leave it on a ready list */
    if (__atomic_exchange_n(&t->queued, 1, __ATOMIC_ACQ_REL))
        return;
    struct lg_worker *w = t->worker;
    pthread_mutex_lock(&w->mu);
    t->next_ready = NULL;
    if (w->ready_tail)
        w->ready_tail->next_ready = t;
    else
        w->ready_head = t;
    w->ready_tail = t;
    pthread_mutex_unlock(&w->mu);
    /* Pairs with the worker's store of `sleeping` before its last look at the list. */
    if (__atomic_load_n(&w->sleeping, __ATOMIC_SEQ_CST))
        worker_wake(w);
}

/* Drops dead tasks from the ready list and this worker's epoll set. */
static void worker_detach(struct lg_worker *w, struct lg_detach_cmd *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->tasks[i]->worker == w && c->tasks[i]->fd >= 0)
            epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->tasks[i]->fd, NULL);
    pthread_mutex_lock(&w->mu);
    struct lg_task **pp = &w->ready_head, *last = NULL;
    while (*pp) {
        if (__atomic_load_n(&(*pp)->dead, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&(*pp)->queued, 0, __ATOMIC_RELEASE);
            *pp = (*pp)->next_ready;
        } else {
            last = *pp;
            pp = &(*pp)->next_ready;
        }
    }
    w->ready_tail = last;
    pthread_mutex_unlock(&w->mu);
}

static void *worker_main(void *arg)
{
    struct lg_worker *w = arg;
    struct epoll_event evs[64];
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the application */
    lg_in_worker = 1;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        struct lg_task *ready = w->ready_head;
        w->ready_head = w->ready_tail = NULL;
        struct lg_detach_cmd *cmds = w->cmds;
        w->cmds = NULL;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);

        while (ready) {
            struct lg_task *t = ready;
            ready = t->next_ready;
            __atomic_store_n(&t->queued, 0, __ATOMIC_RELEASE);
            lg_task_run(t, LG_EV_KICK);
        }
        /* Commands after the ready list: tasks taken off the list above have run by now. */
        while (cmds) {
            struct lg_detach_cmd *c = cmds;
            cmds = c->next;
            worker_detach(w, c);
            pthread_mutex_lock(&lg_pool.mu);
            if (--*c->pending == 0)
                pthread_cond_broadcast(&lg_pool.cond);
            pthread_mutex_unlock(&lg_pool.mu);
        }
        if (stop)
            break;

        __atomic_store_n(&w->sleeping, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&w->mu);
        int busy = w->ready_head || w->cmds || w->stop;
        pthread_mutex_unlock(&w->mu);
        int n = 0;
        if (!busy)
            n = epoll_wait(w->epfd, evs, 64, -1);
        __atomic_store_n(&w->sleeping, 0, __ATOMIC_SEQ_CST);
        for (int i = 0; i < n; i++) {
            struct lg_task *t = evs[i].data.ptr;
            if (!t) {
                uint64_t v;
                ssize_t rc = read(w->evfd, &v, sizeof(v));
                (void)rc;
                continue;
            }
            lg_task_run(t, evs[i].events);
        }
    }
    return NULL;
}

int lg_progress_start(int nthreads)
{
    pthread_mutex_lock(&lg_pool.mu);
    if (lg_pool.n > 0) {
        pthread_mutex_unlock(&lg_pool.mu);
        return 0;
    }
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > LG_MAX_WORKERS)
        nthreads = LG_MAX_WORKERS;
    int started = 0;
    for (; started < nthreads; started++) {
        struct lg_worker *w = &lg_pool.w[started];
        memset(w, 0, sizeof(*w));
        pthread_mutex_init(&w->mu, NULL);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0 ||
            pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            LG_WARN("cannot start progress thread %d: %s", started, strerror(errno));
            if (w->epfd >= 0)
                close(w->epfd);
            if (w->evfd >= 0)
                close(w->evfd);
            pthread_mutex_destroy(&w->mu);
            break;
        }
        char name[16];
        snprintf(name, sizeof(name), "lg-progress-%d", started);
        pthread_setname_np(w->tid, name);
    }
    lg_pool.n = started;
    pthread_mutex_unlock(&lg_pool.mu);
    if (started == 0)
        return -1;
    if (started < nthreads)
        lg_progress_stop(), started = 0;
    return started ? 0 : -1;
}

void lg_progress_stop(void)
{
    pthread_mutex_lock(&lg_pool.mu);
    int n = lg_pool.n;
    lg_pool.n = 0;
    pthread_mutex_unlock(&lg_pool.mu);
    for (int i = 0; i < n; i++) {
        struct lg_worker *w = &lg_pool.w[i];
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_mutex_unlock(&w->mu);
        worker_wake(w);
        pthread_join(w->tid, NULL);
        close(w->epfd);
        close(w->evfd);
        pthread_mutex_destroy(&w->mu);
    }
}

int lg_task_attach(struct lg_task *t, uint32_t events)
{
    pthread_mutex_lock(&lg_pool.mu);
    int n = lg_pool.n;
    unsigned k = lg_pool.rr++;
    pthread_mutex_unlock(&lg_pool.mu);
    if (n == 0)
        return -1;
    t->worker = &lg_pool.w[k % (unsigned)n];
    t->run_state = t->pend_events = 0;
    t->queued = t->dead = 0;
    t->next_ready = NULL;
    t->events = events;
    struct epoll_event ev = {.events = events | EPOLLRDHUP | EPOLLET, .data.ptr = t};
    if (epoll_ctl(t->worker->epfd, EPOLL_CTL_ADD, t->fd, &ev) != 0) {
        LG_WARN("epoll_ctl(ADD fd %d): %s", t->fd, strerror(errno));
        return -1;
    }
    return 0;
}

int lg_task_set_events(struct lg_task *t, uint32_t events)
{
    if (t->events == events)
        return 0;
    t->events = events;
    struct epoll_event ev = {.events = events | EPOLLRDHUP | EPOLLET, .data.ptr = t};
    return epoll_ctl(t->worker->epfd, EPOLL_CTL_MOD, t->fd, &ev);
}

/* One round: every worker removes the tasks from its epoll set and ready list, between two
 * handler runs. */
static void detach_round(struct lg_task **tasks, int n)
{
    struct lg_detach_cmd cs[LG_MAX_WORKERS];
    int pending;
    pthread_mutex_lock(&lg_pool.mu);
    int nw = lg_pool.n;
    pending = nw;
    pthread_mutex_unlock(&lg_pool.mu);
    for (int i = 0; i < nw; i++) {
        struct lg_worker *w = &lg_pool.w[i];
        cs[i] = (struct lg_detach_cmd){.tasks = tasks, .n = n, .pending = &pending};
        pthread_mutex_lock(&w->mu);
        cs[i].next = w->cmds;
        w->cmds = &cs[i];
        pthread_mutex_unlock(&w->mu);
        worker_wake(w);
    }
    pthread_mutex_lock(&lg_pool.mu);
    while (pending > 0)
        pthread_cond_wait(&lg_pool.cond, &lg_pool.mu);
    pthread_mutex_unlock(&lg_pool.mu);
}

void lg_tasks_detach(struct lg_task **tasks, int n)
{
    for (int i = 0; i < n; i++)
        __atomic_store_n(&tasks[i]->dead, 1, __ATOMIC_SEQ_CST);
    /* Round 1: out of epoll; when every worker has answered, none is inside a handler of
     * these tasks. Round 2: a handler that was still running during round 1 may have
     * kicked a sibling task onto some ready list; purge those too. */
    detach_round(tasks, n);
    detach_round(tasks, n);
    /* A handler may also run inline on a thread that is not a worker (NCCL's, in test()):
     * wait for it to leave; later runs see `dead` and skip the handler. */
    for (int i = 0; i < n; i++)
        while (__atomic_load_n(&tasks[i]->run_state, __ATOMIC_SEQ_CST) & LG_RS_RUNNING)
            sched_yield();
}
