/* The daemon's unix datagram socket (LINKGUARD_VERDICT_SOCKET): the one channel from a job to
 * its host's daemon, shared by the verdicts (verdict.h) and the census (census.h), which the
 * daemon tells apart by their magic. A send never blocks and never fails the caller: a
 * datagram that cannot go out (no daemon, someone else's socket, a full queue) is dropped. */
#ifndef LG_DAEMON_SOCK_H
#define LG_DAEMON_SOCK_H

#include <stddef.h>

/* 1 if a socket path is set (LINKGUARD_VERDICT_SOCKET not empty) and fits a unix address. */
int lg_daemon_sock_enabled(void);

/* Sends `len` bytes as one datagram (MSG_DONTWAIT). 1 sent; 0 not, with why in `why` (NULL:
 * not wanted). Only to a socket the daemon bound: owned by root, us or LINKGUARD_SHM_OWNER.
 * Thread-safe. */
int lg_daemon_sock_send(const void *msg, size_t len, char *why, size_t why_len);

/* Tests: close the socket (the next send opens another and re-reads the path). */
void lg_daemon_sock_reset(void);

#endif
