/* Dialing: the sockets a connector opens to the peer's listener of one NIC (acceptor.h), each
 * connected without blocking and then introduced by a hello (wire.h) that the acceptor routes.
 * A control session's socket (session.c) says only its session id; a path's data sockets name
 * their connection, stream and the session and channel the path's frames travel on.
 *
 * Here, below the transports, because every transport's paths have these sockets today (the
 * inner one keeps one idle data socket per path, for the hello) and the acceptor that answers
 * them is here: a first connect (connect.c) and a rebuild (reconnect.c) dial a path with the
 * same code, and the path's owner decides only what a failure means.
 *
 * One thread drives a dial at a time (NCCL's service thread, or the monitor). */
#ifndef LG_DIAL_H
#define LG_DIAL_H

#include <stddef.h>
#include <stdint.h>

#include "session/wire.h"

struct lg_chan;

/* What a failed dial was doing (for the caller's message). */
enum lg_dial_part { LG_DIAL_SESSION, LG_DIAL_CONNECT, LG_DIAL_HELLO };

/* A path's dial. Stream 0 is the path's channel on its control session, 1..nstreams its data
 * sockets; these are the path's (the dial writes each into the slot it was given and never
 * closes one), so a dial lives no longer than its path. */
struct lg_dial {
    const struct lg_chan *ch; /* attached: its session is connected by whoever opened it */
    int nstreams;
    int *fd[LG_MAX_STREAMS + 1]; /* [k]: where the path keeps data socket k */
    int held;                    /* a stream whose hello waits for lg_dial_hello (0: none) */
    int connected[LG_MAX_STREAMS + 1];
    size_t hello_sent[LG_MAX_STREAMS + 1];
    struct lg_hello hello;  /* every data hello but its stream (session, chan from ch) */
    enum lg_dial_part part; /* what the last failure was */
};

/* Starts connecting d->nstreams data sockets from (nic, local_ip) to (peer_ip, peer_port) into
 * *d->fd[k]; d->ch, d->nstreams, d->fd, d->held and d->hello are set by the caller. 0, or -1
 * with errno set (the sockets opened before are in their slots). */
int lg_dial_start(struct lg_dial *d, const char *nic, uint32_t local_ip, uint32_t peer_ip,
                  uint16_t peer_port);
/* Checks every connect in progress, the session's among them, and sends the data hellos once
 * the session is up (the receiver looks it up by them). 1: all connected and every hello but
 * the held one sent; 0: in progress; -1: failed (errno set, d->part says what). `expired`: a
 * connect still in progress fails with ETIMEDOUT. */
int lg_dial_step(struct lg_dial *d, int expired);
/* Sends (the rest of) data stream k's hello: 1 sent, 0 not yet (the socket is full), -1
 * failed (errno set). */
int lg_dial_hello(struct lg_dial *d, int k);
/* 1 when the session and every data socket are connected. */
int lg_dial_connected(const struct lg_dial *d);

/* Writes what is left of hello h on fd; *sent counts across calls. 1 all sent, 0 not yet, -1
 * failed (errno set). */
int lg_hello_send(int fd, const struct lg_hello *h, size_t *sent);

#endif
