/* Connections of the TCP transport.
 *
 * A connection (send or receive side of one NCCL comm) has up to two paths: [0] on the
 * primary NIC, [1] on the backup NIC. A path is a control channel (acks, later failover
 * control) plus `nstreams` data streams, each one TCP socket driven by a progress task.
 * Exactly one path, `active`, carries data; the other stands by.
 *
 * Messages carry sequence numbers 0, 1, 2 ... in posted order. The sender cuts each into
 * chunks (struct lg_chunk_hdr + payload) and hands them to whichever data stream of the
 * active path has room. The receiver reads each chunk straight into the posted buffer and,
 * when a message is complete, acknowledges the number of messages placed so far on the
 * control channel. A send completes only when that ack covers it (DESIGN.md invariant 2), so
 * the sender's buffer is intact until the data is placed: issue 6 replays from it.
 *
 * Requests live in a window of LG_WINDOW slots indexed by seq % LG_WINDOW; a slot is reused
 * only after NCCL has seen its request complete (test() done), so `*request = NULL` is the
 * back-pressure answer when the slot for the next seq is still taken.
 *
 * Threads: NCCL's progress thread calls isend/irecv/test; its service thread calls
 * connect/accept/regMr/close. Socket handlers run serialized per socket (progress.h) on
 * whichever thread gets there: NCCL's thread for small work (isend writes a small message,
 * test() reads acks and places small chunks, LINKGUARD_POLL_INLINE), a progress worker for
 * the rest (big chunks, a full socket, hang-ups). conn->mu guards the chunk cursor and the
 * placement window; request state words are atomics.
 *
 * Seams for failover (issue 6): `active` picks the path that carries data and every
 * handler checks it; lg_conn_path_failed() is the one place a path's death is decided;
 * chunk headers and control frames carry an epoch field (0 today); the receiver's `placed`
 * count is what the resync message will carry, and the sender can rewind its chunk cursor
 * to it because a send is only complete (and its buffer released to NCCL) once acked. */
#ifndef LG_CONN_H
#define LG_CONN_H

#include <net/if.h>
#include <pthread.h>
#include <stdint.h>

#include "nccl_net_abi.h"
#include "progress.h"
#include "wire.h"

#define LG_CONN_MAGIC 0x4c47434fu /* "LGCO" */
#define LG_REQ_MAGIC 0x4c475251u  /* "LGRQ" */
#define LG_MR_MAGIC 0x4c474d52u   /* "LGMR" */

enum lg_conn_kind { LG_CONN_SEND = 1, LG_CONN_RECV = 2 };

/* Request slot state bits. */
#define LG_REQ_POSTED 0x1u /* isend/irecv filled the slot */
#define LG_REQ_DONE 0x2u   /* recv: every byte placed */

struct lg_conn;
struct lg_path;

struct lg_stream {
    struct lg_task task;
    struct lg_path *path;
    int index; /* 0: control channel; 1..nstreams: data */
    /* send side: the chunk being written */
    struct {
        int active;
        uint8_t hdr[LG_CHUNK_HDR_SIZE];
        const char *payload;
        struct lg_req *req; /* the chunk's message: its `written` count is bumped at the end */
        uint32_t len;
        size_t done; /* bytes of hdr + payload written */
    } tx;
    /* receive side: header being read / chunk being placed */
    struct {
        uint8_t hdr[LG_CHUNK_HDR_SIZE];
        size_t hgot;
        int have_hdr;
        int checked; /* the chunk was matched against its posted receive */
        int big;     /* the chunk is a worker's (bigger than inline_send): test() keeps off (atomic) */
        struct lg_chunk_hdr h;
        size_t done;
    } rx;
    /* control channel: frames being read */
    struct {
        uint8_t buf[LG_CTRL_SIZE * 16];
        size_t got;
    } crx;
};

enum lg_path_state { LG_PATH_UP = 1, LG_PATH_FAILED = 2 };

struct lg_path {
    struct lg_conn *conn;
    int index; /* 0 primary, 1 backup */
    int nstreams;
    int state; /* enum lg_path_state (atomic) */
    int peer_bye; /* the peer said BYE: its EOF is a close, not a failure (atomic) */
    char nic[IFNAMSIZ];
    char peer[24];
    struct lg_stream ctrl;
    struct lg_stream data[LG_MAX_STREAMS];
    /* control frames waiting for room in the socket; written by any thread under ctrl_mu */
    pthread_mutex_t ctrl_mu;
    uint8_t txq[LG_CTRL_SIZE * 64];
    size_t txq_len, txq_off;
    int txq_last_ack; /* offset of an unsent ACK frame that a newer ack may overwrite, or -1 */
};

struct lg_req {
    uint32_t magic;
    struct lg_conn *conn;
    uint64_t seq;
    uint32_t state; /* LG_REQ_* (atomic) */
    int optional;   /* recv posted with NCCL_NET_OPTIONAL_RECV_COMPLETION */
    int tag;
    /* send */
    const char *data;
    size_t size;
    uint64_t nchunks; /* chunks the message is cut into */
    uint64_t written; /* chunks whose writer is done with the buffer (atomic, release) */
    /* recv */
    char *buf;
    size_t cap;
    uint64_t placed;  /* bytes placed (atomic) */
    uint64_t total;   /* message size from the chunk headers; UINT64_MAX until known */
};

struct lg_conn {
    uint32_t magic;
    enum lg_conn_kind kind;
    int dev;
    uint64_t nonce, listen_id;
    int nstreams;
    uint32_t chunk_size;
    int npaths;
    int active; /* index of the path carrying data */
    struct lg_path *paths[LG_NPATHS];
    pthread_mutex_t mu;
    struct lg_req reqs[LG_WINDOW];
    uint64_t next_seq; /* next seq to post (NCCL's thread) */
    uint64_t posted;   /* messages posted (atomic) */
    /* send side */
    uint64_t acked;        /* messages the receiver placed (atomic, from acks) */
    uint64_t cursor_seq;   /* next chunk to hand to a stream (under mu) */
    uint64_t cursor_chunk;
    uint32_t parked; /* data streams with nothing to send (bit i-1 = data[i]; under mu) */
    /* receive side */
    struct lg_seqwin win;  /* placement (under mu) */
    uint64_t placed;       /* win.base, readable without mu (atomic) */
    uint64_t ack_sent;     /* highest placement count acknowledged to the sender (atomic) */
    uint32_t rx_waiting;   /* data streams waiting for a receive to be posted (atomic bits) */
    /* failure */
    int error; /* ncclResult_t once the connection cannot deliver (atomic) */
    char errmsg[256];
    int nmr; /* live memory registrations (atomic) */
};

/* conn.c */
struct lg_conn *lg_conn_new(enum lg_conn_kind kind, int dev, int nstreams, uint32_t chunk_size);
struct lg_path *lg_path_new(struct lg_conn *c, int index, const char *nic, const char *peer);
/* Fds must be in path->ctrl.task.fd and data[i].task.fd; registers them with the workers. */
int lg_conn_start(struct lg_conn *c);
void lg_conn_free(struct lg_conn *c); /* detaches, closes every fd, frees */
/* A path broke (EOF, reset, protocol error). The one place that decides what it means:
 * today the active path failing fails the connection; issue 6 turns it into a failover. */
void lg_conn_path_failed(struct lg_path *p, int err, const char *why);
void lg_conn_fail(struct lg_conn *c, ncclResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Queues/sends a control frame on the path (any thread). */
void lg_path_ctrl_send(struct lg_path *p, const struct lg_ctrl *f);
void lg_path_ctrl_flush(struct lg_path *p);
/* Reads control frames from a path's ctrl socket; calls `on_frame` for each. */
int lg_path_ctrl_read(struct lg_stream *s, void (*on_frame)(struct lg_path *, const struct lg_ctrl *));

/* conn_send.c */
ncclResult_t lg_conn_isend(struct lg_conn *c, void *data, size_t size, int tag, void **request);
void lg_send_stream_handler(struct lg_task *t, uint32_t events);
void lg_send_ctrl_handler(struct lg_task *t, uint32_t events);

/* conn_recv.c */
ncclResult_t lg_conn_irecv(struct lg_conn *c, int n, void **data, size_t *sizes, int *tags,
                           void **request);
void lg_recv_stream_handler(struct lg_task *t, uint32_t events);
void lg_recv_ctrl_handler(struct lg_task *t, uint32_t events);

/* Both: completes a request. */
ncclResult_t lg_req_test(struct lg_req *r, int *done, int *sizes);

static inline struct lg_stream *lg_stream_of(struct lg_task *t)
{
    return (struct lg_stream *)t; /* task is the first member */
}

#endif
