/* The acceptor: one listening socket per local NIC address per process, shared by every listen
 * comm and by every connection accepted through it (rebuilt paths come back to the same port).
 * NCCL opens one listen comm per connection, so per-comm listeners would cost two descriptors
 * per receive connection and a listening port each.
 *
 * Accepted sockets introduce themselves with a hello (wire.h). Whichever thread progresses the
 * acceptor (NCCL's service thread inside accept(), the monitor when a listener or a waiting
 * socket is readable) reads the hellos and routes each complete one: a first-connect hello to
 * the listen comm registered under its listen id, a REJOIN hello to a queue the monitor drains.
 * Nothing waits in a fixed-size table: only strangers (a hello that does not decode, names no
 * registered listen comm, or is refused) and sockets silent for the connect timeout are
 * closed. It never takes the monitor's lock. */
#ifndef LG_ACCEPTOR_H
#define LG_ACCEPTOR_H

#include <stdint.h>

#include "session/wire.h"

struct lg_listener;

/* The listener on `ip` (created on first use), with one more reference; *port gets its port
 * (host order). NULL with errno set. */
struct lg_listener *lg_listener_get(uint32_t ip, uint16_t *port);
void lg_listener_ref(struct lg_listener *l);
void lg_listener_put(struct lg_listener *l); /* the last reference closes it */
uint32_t lg_listener_ip(const struct lg_listener *l);

/* Called under the acceptor's lock with a socket whose first-connect hello names the listen
 * comm (local_ip: the listener it came through). 0: taken; -1: the acceptor closes it. It must
 * not call into the acceptor. */
typedef int (*lg_accept_sink)(void *arg, const struct lg_hello *h, int fd, uint32_t local_ip,
                              uint64_t now);
int lg_acceptor_register(uint64_t listen_id, lg_accept_sink sink, void *arg);
/* Returns once no call of its sink runs. */
void lg_acceptor_unregister(uint64_t listen_id);

/* Accepts what is waiting, reads hellos, routes the complete ones, closes the expired. Any
 * thread; sinks get the clock read under the acceptor's lock, so the times they stamp only
 * grow. */
void lg_acceptor_progress(void);
/* The monitor: the next socket with a REJOIN hello. 1: one taken, 0: none. */
int lg_acceptor_take_rejoin(struct lg_hello *h, int *fd, uint32_t *local_ip);
/* Readable while the acceptor has work: an epoll set of its listeners and waiting sockets. */
int lg_acceptor_fd(void);
/* `fn` runs (any thread, outside the acceptor's lock) after a REJOIN socket was queued. */
void lg_acceptor_on_rejoin(void (*fn)(void));
/* Closes every waiting and queued socket and the epoll set (the last comm is gone). */
void lg_acceptor_shutdown(void);

#endif
