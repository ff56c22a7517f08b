/* The TCP transport's own object for a connection (tcp.h): its endpoint, c->ep, which the
 * protocol holds as an opaque pointer (transport.h), made by the transport's open op and
 * ended by its release. The data streams and the chunk cursor are still the protocol's fields
 * (lg_path.data[], lg_conn.cursor_*: issue 27). Types only. */
#ifndef LG_TCP_CONN_H
#define LG_TCP_CONN_H

#include <pthread.h>

#include "session/wire.h"
#include "transport/tcp/goodput.h"
#include "transport/transport.h"

/* A connection's endpoint: the progress watchdogs' and the lossy judge's state (tcp_watch.c;
 * monitor thread, but for the STALLED mailbox). */
struct lg_tcp_conn {
    /* sender: the lossy judge's window of each slot */
    struct lg_gp_window gp[LG_NPATHS];
    /* sender: the receiver's newest STALLED (the message that got no data), kept under ask_mu
     * by the control handler for the watchdog's next run */
    pthread_mutex_t ask_mu;
    uint64_t asked_seq;
    uint64_t asked_rx_ns; /* when it came; 0: none to answer */
    int asked_slot;       /* ... on which path, of which gen */
    uint32_t asked_gen;
    uint64_t denied_seq;  /* sender: the last STALLED it found nothing stuck for, + 1 */
    /* receiver: the stall it asks the sender about */
    uint64_t polled_ns;   /* a run that saw NCCL poll (conn->polled) */
    uint64_t ask_base, ask_placed, ask_path; /* its marker (path: gen << 1 | index) */
    uint64_t ask_from, ask_last;             /* since when, and when it last asked */
};

static inline struct lg_tcp_conn *lg_tcp_ep(struct lg_endpoint *ep)
{
    return (struct lg_tcp_conn *)ep;
}

#endif
