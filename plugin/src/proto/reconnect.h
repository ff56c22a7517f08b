/* Rebuilding one path of a live connection (see conn.h, "Rebuild and reintegration"). All of
 * it runs on the monitor thread, under the monitor's lock. */
#ifndef LG_RECONNECT_H
#define LG_RECONNECT_H

#include <stdint.h>

#include "session/wire.h"

struct lg_conn;
struct lg_path;

/* Sender: starts connecting slot `slot` afresh. 0, 1 when the process's rebuild budget is
 * spent (nothing started: try again soon), or -1 (failed, nothing started). */
int lg_rejoin_tx_start(struct lg_conn *c, int slot, uint64_t now);
/* Sender: 0 in progress, 1 the rebuilt path is in c->paths, -1 failed (torn down). */
int lg_rejoin_tx_progress(struct lg_conn *c, int slot, uint64_t now, char *why, size_t len);
/* Receiver: files an accepted socket whose REJOIN hello names connection c (it came through
 * the listener on local_ip). 0 when the socket was taken (filed, or closed after a rejection
 * that is already logged), -1: the caller closes it. */
int lg_rejoin_file(struct lg_conn *c, const struct lg_hello *h, int fd, uint32_t local_ip,
                   uint64_t now);
/* Either side: drops a rebuild in progress. */
void lg_rejoin_abort(struct lg_conn *c, int slot);
/* Receiver, each monitor run: a rebuild that timed out goes; one whose sockets are all filed
 * but whose control session was not here yet is built once it is. */
void lg_rejoin_rx_step(struct lg_conn *c, int slot, uint64_t now);
/* Puts `p` into slot `slot`, retiring and freeing the path it replaces. */
void lg_rejoin_publish(struct lg_conn *c, int slot, struct lg_path *p);

#endif
