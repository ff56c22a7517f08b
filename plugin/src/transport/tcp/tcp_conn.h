/* The TCP transport's own object for a connection (tcp.h): its endpoint, c->ep, which the
 * protocol holds as an opaque pointer (transport.h), made by the transport's open op for a
 * sender and ended by its release. The data streams and the chunk cursor are still the
 * protocol's fields (lg_path.data[], lg_conn.cursor_*: issue 27). Types only. */
#ifndef LG_TCP_CONN_H
#define LG_TCP_CONN_H

#include "session/wire.h"
#include "transport/tcp/goodput.h"
#include "transport/transport.h"

/* A sending connection's endpoint (a receiver has none: c->ep NULL). */
struct lg_tcp_conn {
    /* the lossy judge's window of each slot (monitor thread; tcp_watch.c) */
    struct lg_gp_window gp[LG_NPATHS];
};

static inline struct lg_tcp_conn *lg_tcp_ep(struct lg_endpoint *ep)
{
    return (struct lg_tcp_conn *)ep;
}

#endif
