/* Waking the monitor thread (monitor.h) from any thread, without knowing it: the wake-up
 * eventfd it sleeps on. Below everything that
 * wakes it (handlers, the transports, the protocol), so that none of them depends on the
 * monitor. */
#ifndef LG_WAKE_H
#define LG_WAKE_H

/* Any thread: the monitor runs a pass soon; `all`: every connection in it, not only the
 * ones marked dirty (conn.h: lg_monitor_wake). Cheap when it is awake. */
void lg_wake_monitor(int all);

/* The monitor thread's side. open: the eventfd it sleeps on (-1 on failure); close at stop.
 * sleep_begin before its epoll_wait returns 1 when a wake-up is already pending (do not
 * sleep), sleep_end after it; take_all: whether a wake-up asked for every connection. */
int lg_wake_open(void);
void lg_wake_close(void);
int lg_wake_sleep_begin(void);
void lg_wake_sleep_end(void);
int lg_wake_take_all(void);
/* Reads the eventfd empty (after it polled readable). */
void lg_wake_drain(void);

#endif
