/* The TCP transport's own objects (tcp.h), which the protocol holds as opaque pointers
 * (transport.h): a connection's endpoint (c->ep, made by the open op, ended by release) and
 * each path object's chunk state of its data streams (p->tp, path_open and path_close). The
 * sockets and their tasks are the path's (proto/conn.h, struct lg_stream), and the message
 * the cursor is at, the connection's (c->cursor_seq, which every transport has). Types only. */
#ifndef LG_TCP_CONN_H
#define LG_TCP_CONN_H

#include <pthread.h>

#include "session/wire.h"
#include "transport/tcp/goodput.h"
#include "transport/transport.h"

/* A connection's endpoint: the progress watchdogs' and the lossy judge's state (tcp_watch.c;
 * monitor thread, but for the STALLED mailbox). */
struct lg_tcp_conn {
    /* what the connection is (upcall.h, lg_conn_facts), copied at open */
    int send;
    int dev;
    int nstreams;
    uint64_t nonce;
    /* sender, under the connection's mu: the chunk cursor's place inside the message at
     * c->cursor_seq, and the data streams with nothing to send (bit k-1: stream k) */
    uint64_t cursor_chunk;
    uint32_t parked;
    /* both sides: the connector's chunk size, from its hello (the facts' blob) */
    uint32_t chunk_size;
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

struct lg_req;

/* A data stream's chunk state (tcp_send.c, tcp_recv.c): the chunk its socket is writing or
 * reading now. */
struct lg_tcp_stream {
    /* send side: the chunk being written */
    struct {
        int active; /* (atomic: the monitor reads it) */
        uint8_t hdr[LG_CHUNK_HDR_SIZE];
        const char *payload;
        struct lg_req *req; /* the chunk's message: holds one of its `writers` */
        uint32_t len;
        size_t done; /* bytes of hdr + payload written */
    } tx;
    /* receive side: header being read / chunk being placed */
    struct {
        uint8_t hdr[LG_CHUNK_HDR_SIZE];
        size_t hgot;
        /* What the header's read brought beyond it: a small chunk's payload (placed from
         * here once matched) and, past it, the next header's first bytes. */
        uint8_t ahead[LG_CHUNK_HDR_SIZE];
        size_t ahead_len, ahead_used;
        int have_hdr;
        int checked; /* the chunk was matched against its posted receive */
        int big;     /* a worker's chunk (bigger than inline_send): test() keeps off (atomic) */
        int drop;    /* the chunk is read and dropped (stale epoch, duplicate) */
        uint32_t epoch; /* the connection epoch the chunk was matched in */
        struct lg_chunk_hdr h;
        size_t done;
    } rx;
    uint32_t placing; /* receive: 0, or inside a placement step of epoch placing - 1 (atomic) */
};

/* A path object's state: stream k (1..nstreams) is s[k - 1]. A new object for every path
 * (a rebuild too), so a rebuilt path's streams start from nothing. */
struct lg_tcp_path {
    struct lg_tcp_stream s[LG_MAX_STREAMS];
};

/* The chunk state of data stream `index` (1..nstreams) of the path whose state is `tp`. */
static inline struct lg_tcp_stream *lg_tcp_stream_at(struct lg_ep_path *tp, int index)
{
    return &((struct lg_tcp_path *)tp)->s[index - 1];
}

#endif
