/* Waking the monitor (see wake.h). */
#include "runtime/wake.h"

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct {
    int evfd;          /* (atomic) */
    int asleep;        /* the monitor is in epoll_wait (atomic) */
    int pending;       /* a wake-up since its last pass (atomic) */
    int wake_all;      /* run every connection at the next pass (atomic) */
} W = {.evfd = -1};

void lg_wake_monitor(int all)
{
    if (all)
        __atomic_store_n(&W.wake_all, 1, __ATOMIC_SEQ_CST);
    /* Dekker with lg_wake_sleep_begin: set `pending`, then look at `asleep`. */
    __atomic_store_n(&W.pending, 1, __ATOMIC_SEQ_CST);
    int fd = __atomic_load_n(&W.evfd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && __atomic_load_n(&W.asleep, __ATOMIC_SEQ_CST)) {
        uint64_t one = 1;
        ssize_t rc = write(fd, &one, sizeof(one));
        (void)rc; /* EAGAIN: already signalled */
    }
}

int lg_wake_open(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    __atomic_store_n(&W.evfd, fd, __ATOMIC_RELEASE);
    return fd;
}

void lg_wake_close(void)
{
    int fd = __atomic_exchange_n(&W.evfd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0)
        close(fd);
}

int lg_wake_sleep_begin(void)
{
    __atomic_store_n(&W.asleep, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&W.pending, __ATOMIC_SEQ_CST);
}

void lg_wake_sleep_end(void)
{
    __atomic_store_n(&W.asleep, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&W.pending, 0, __ATOMIC_SEQ_CST);
}

int lg_wake_take_all(void) { return __atomic_exchange_n(&W.wake_all, 0, __ATOMIC_SEQ_CST); }

void lg_wake_drain(void)
{
    uint64_t v;
    int fd = __atomic_load_n(&W.evfd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        ssize_t rc = read(fd, &v, sizeof(v));
        (void)rc;
    }
}
