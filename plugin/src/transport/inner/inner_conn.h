/* The inner transport's own objects (inner_endpoint.h): its endpoint of a connection and its
 * state of each path object. The protocol holds them only as opaque pointers (transport.h:
 * c->ep, p->tp), made by this transport's open/path_open ops and ended by release/path_close,
 * and never looks inside; none of this is in struct lg_conn, lg_path or lg_req. Types only.
 *
 * A path's state follows its object, not its slot: a rebuilt path is a new lg_path, and while
 * it is being built the one it replaces still stands in its slot (the receiver's may still
 * carry the data), so each object gets fresh state of its own, as it always had.
 *
 * Locks: ep->wmu serialises the inner data calls of NCCL's thread with the monitor's commits
 * and fences (NCCL's thread only try-locks it); ep->mr_mu guards the list of registrations and
 * each path's comm/ready pair. Order: wmu, then the protocol's c->mu; mr_mu alone. */
#ifndef LG_INNER_CONN_H
#define LG_INNER_CONN_H

#include <pthread.h>
#include <stdint.h>

#include "nccl_net_abi.h"
#include "session/wire.h"
#include "transport/inner/rate.h"
#include "transport/transport.h"

struct lg_inner_connecting;
struct lg_inner_mr;

/* One path object's inner comm (p->tp). */
struct lg_inner_path {
    void *comm;   /* the inner send/recv comm; set with `ready` under ep->mr_mu */
    int ready;    /* atomic */
    int dead;     /* atomic, set under ep->wmu: no inner call on `comm` from then on */
    void *lcomm;  /* receiver: the inner listen comm of the handshake */
    struct lg_inner_connecting *cg; /* sender: connect in progress */
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE]; /* sender: from the INNER frames */
    uint32_t parts; /* sender: frames received, bit i = part i (atomic) */
    uint32_t parts_igen; /* sender: the inner generation those frames are of (atomic) */
    uint32_t igen;  /* inner generation: +1 each time the path gets a new inner comm */
    uint64_t t0;    /* handshake start */
    int ready_owed; /* receiver, rebuilt path: READY goes out once the comm is accepted */
};

/* One message slot of the window (the request in c->reqs[] of the same index), under wmu
 * unless said. */
struct lg_inner_req {
    struct lg_inner_mr *imr; /* NCCL's registration of its buffer (set when posted, cleared by
                              * its deregMr; atomic) */
    void *ireq;              /* the inner request of its current post, NULL: none */
    int slot;                /* receiver: slot of the path whose inner comm placed it */
    struct lg_inner_mr *copy_mr; /* sender: the slot's kept-copy buffer, registered at its
                              * first replay (in the endpoint's list, under mr_mu) */
    uint64_t before[2];      /* sender: {seq + 1, bytes posted before it}, a seqlock pair that
                              * the goodput judge reads (inner_transport.c; atomics) */
};

/* The sender's completion-rate window of one slot's path (rate.h; monitor thread). */
struct lg_inner_rate {
    struct lg_rate_state rate;  /* its baseline and strikes, kept across rebuilds */
    const struct lg_path *path; /* the path (and generation) the window belongs to */
    uint32_t gen;
    uint64_t t0, seen_ns;       /* the window's start (0: none open); the last look */
    uint64_t bytes0, idle0;     /* bytes completed and drained time at its start */
};

/* lg_inner_conn.grouped. Sender: the receiver posts grouped receives, so a send completes on
 * the ack (or kept), never on its inner completion alone. Receiver: it asked, the sender
 * answered (its groups may go to the inner plugin from then). */
enum { LG_GROUPED_NONE = 0, LG_GROUPED_SENDER, LG_GROUPED_ASKED, LG_GROUPED_ANSWERED };

/* A connection's endpoint (c->ep). */
struct lg_inner_conn {
    /* what the connection is (upcall.h, lg_conn_facts), copied at open */
    int send;
    int dev;
    uint64_t nonce;
    pthread_mutex_t wmu;     /* inner data calls vs commits and fences */
    pthread_mutex_t mr_mu;   /* mrs, and each path's comm/ready */
    struct lg_inner_mr *mrs; /* registrations (list through ->next) */
    uint64_t test_seq;       /* oldest message whose inner request is not seen complete */
    uint64_t post_seq;       /* receiver: next message to post an inner receive for (the
                              * sender uses c->cursor_seq) */
    uint64_t since;          /* connect/accept first asked for the inner comms (0: not yet) */
    int peer_placed;         /* receiver: the sender said its sends complete on placement
                              * (a DELIVERED came), so acks may wait (atomic) */
    uint64_t peer_keeps;     /* receiver: the sender keeps sends up to this size and waits
                              * for no ack of them (a KEEPS came), so acks may wait (atomic) */
    int grouped;             /* LG_GROUPED_*: receives of n > 1 buffers and what the sender
                              * made of them (wire.h, GROUPED) (atomic) */
    uint64_t grouped_asked_ns; /* receiver: when it last asked (under wmu) ... */
    int grouped_ask;           /* ... and that the question goes once wmu is released */
    uint64_t peer_delivered; /* receiver: newest DELIVERED: its commit holds at least these */
    uint64_t peer_posted;    /* receiver: newest POSTED (messages the sender handed to its
                              * inner plugin), for the watchdog (both atomic, raised only) */
    int keeps_told;          /* sender: a KEEPS went out, so a small send it could not keep
                              * asks for its ack (POSTED) (atomic) */
    uint64_t ask_upto;       /* sender: such a send was handed to the inner: ask for the acks
                              * up to here once wmu is released (under wmu) */
    uint64_t bytes[2];       /* sender: {messages posted, their bytes}, likewise */
    uint64_t busy_ns;        /* sender: NCCL's thread last saw a send unfinished (atomic) */
    uint64_t idle_ns;        /* sender: time it had nothing unacknowledged, summed (atomic) */
    int frozen;              /* sender, LINKGUARD_INNER_PLACED: a SWITCH told the receiver
                              * what to hold; no inner send completes until the switch ends
                              * (under wmu) */
    struct lg_inner_rate rate[LG_NPATHS]; /* sender: the slow judge's windows */
    uint64_t posted_told_ns; /* sender: when POSTED last went out (monitor) */
    uint64_t polled_ns;      /* receiver: a watchdog run that saw NCCL poll (monitor) */
    struct lg_inner_req req[LG_WINDOW];
};

/* What the protocol's opaque pointers are here (inner_transport.c makes them). */
static inline struct lg_inner_conn *lg_inner_ep(struct lg_endpoint *ep)
{
    return (struct lg_inner_conn *)ep;
}
static inline struct lg_inner_path *lg_inner_tp(struct lg_ep_path *tp)
{
    return (struct lg_inner_path *)tp;
}

/* A path carries data: its comm is there and not fenced. */
static inline int lg_inner_path_carries(const struct lg_inner_path *w)
{
    return __atomic_load_n(&w->ready, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&w->dead, __ATOMIC_ACQUIRE);
}

#endif
