/* The monitor: one thread per process that runs the failover state machine of every
 * connection (failover.c), sends heartbeats, watches for silence and the dead timeout, rebuilds
 * paths (reconnect.c) and accepts rebuilt paths on the listening sockets that outlive their
 * listen comms. It sleeps in epoll_wait between ticks (LINKGUARD_HEARTBEAT_MS) and is woken at
 * once by handlers that saw something (a path failed, a SWITCH/RESYNC/READY came) and by the
 * hot-path health poll when the daemon's table changed. Not a progress worker: it may detach
 * tasks and wait for readers to leave a placement step. */
#ifndef LG_MONITOR_H
#define LG_MONITOR_H

#include <stdint.h>

struct lg_conn;

int lg_monitor_start(void);
void lg_monitor_stop(void);

/* Connections it looks after (connect/accept done; close). Remove returns once the monitor
 * no longer touches c. */
void lg_monitor_add(struct lg_conn *c);
void lg_monitor_remove(struct lg_conn *c);

/* Any thread: look at c soon (NULL: every connection). Cheap when already awake. */
void lg_monitor_wake(struct lg_conn *c);

/* Hot path (isend/irecv/test): one load of the daemon table's generation; wakes the monitor
 * when it moved. */
void lg_monitor_health_poll(void);

/* Listening sockets shared by a listen comm and the connections accepted on it, kept open
 * for rebuilt paths until the last of them closes. */
struct lg_lsock {
    int fd;
    int path;            /* NIC slot it listens on */
    uint64_t listen_id;
    int refs;            /* under the monitor's lock */
    int listen_open;     /* the listen comm still accepts on it */
    int registered;      /* in the monitor's epoll set */
};
struct lg_lsock *lg_lsock_new(int fd, int path, uint64_t listen_id);
void lg_lsock_ref(struct lg_lsock *ls);
void lg_lsock_unref(struct lg_lsock *ls);
/* closeListen: the listen comm lets go; the monitor accepts rebuilt paths on it from now. */
void lg_lsock_listen_closed(struct lg_lsock *ls);

/* For reconnect.c, under the monitor's lock: the live receive connection with this nonce. */
struct lg_conn *lg_monitor_find_locked(uint64_t nonce, uint64_t listen_id);

#endif
