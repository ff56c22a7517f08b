/* Progress engine: a fixed pool of threads shared by every connection of the process. Each
 * socket is a task owned by one thread's epoll (edge-triggered); threads block in epoll_wait
 * when idle. A task's handler runs serialized: whoever calls lg_task_run first runs it, and a
 * call that arrives meanwhile makes that runner go around once more, so no event is lost and
 * no two threads ever touch one socket's state at once. */
#ifndef LG_PROGRESS_H
#define LG_PROGRESS_H

#include <stdint.h>

struct lg_task;
struct lg_worker;

/* Handler event bit (not an epoll one): the run was asked for by lg_task_kick. */
#define LG_EV_KICK (1u << 31)
typedef void (*lg_task_fn)(struct lg_task *t, uint32_t events);

struct lg_task {
    int fd;
    lg_task_fn fn;
    struct lg_worker *worker; /* set by lg_task_attach */
    uint32_t run_state;       /* LG_RS_* (atomic) */
    uint32_t pend_events;     /* epoll events not yet seen by the handler (atomic) */
    int queued;               /* on the worker's ready list (atomic) */
    int dead;                 /* being detached: never run again (atomic) */
    uint32_t events;          /* registered epoll events (lg_task_attach/lg_task_set_events) */
    struct lg_task *next_ready;
};

/* Starts nthreads workers (no-op if running). 0 on success. */
int lg_progress_start(int nthreads);
/* Stops and joins the workers; every task must have been detached. */
void lg_progress_stop(void);

/* Registers t->fd with a worker, chosen round-robin, for `events` (EPOLLIN, EPOLLOUT; hang-up
 * and errors are always reported), edge-triggered. */
int lg_task_attach(struct lg_task *t, uint32_t events);
/* Changes the events t is registered for (from t's handler: not thread-safe per task). An
 * event that is already pending is reported at once. */
int lg_task_set_events(struct lg_task *t, uint32_t events);
/* Runs the handler on this thread now, or makes the thread running it go around again. */
void lg_task_run(struct lg_task *t, uint32_t events);
/* Asks t's worker to run the handler soon (cheap when the worker is awake). */
void lg_task_kick(struct lg_task *t);
/* Detaches tasks: when this returns, no thread runs, and no worker holds or will run, any of
 * them, and their fds are out of every epoll set (the caller closes them). Blocks briefly;
 * never call it from a worker or from inside one of the tasks' handlers. */
void lg_tasks_detach(struct lg_task **tasks, int n);

/* Non-zero on a progress worker thread (handlers bound their work when called inline from
 * NCCL's thread). */
int lg_progress_on_worker(void);

#endif
