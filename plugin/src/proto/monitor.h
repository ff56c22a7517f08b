/* The monitor: one thread per process that runs the failover state machine of every
 * connection (failover.c), sends heartbeats, watches for silence and the dead timeout, rebuilds
 * paths (reconnect.c) and hands the rebuilt paths the acceptor received (acceptor.h) to their
 * connections. It sleeps in epoll_wait between ticks (LINKGUARD_HEARTBEAT_MS) and is woken at
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

/* Waking it: lg_monitor_wake (conn.h) and wake.h. */

#endif
