/* What the failover protocol asks of a path transport: the ops table a connection drives its
 * paths' data through. Two implementations: linkguard's TCP data streams (tcp.h: tcp.c,
 * tcp_send.c, tcp_recv.c, tcp_watch.c) and an inner NCCL net plugin (inner_endpoint.h:
 * inner_transport.c, inner_endpoint.c, over inner_dev.c). The protocol (sequence numbers, acks,
 * SWITCH/RESYNC, replay, fences, epochs; conn.h) never asks which one it has: it calls these
 * ops, and reads the properties.
 *
 * Threads: "NCCL's" ops run on NCCL's progress thread (isend/irecv/test), "service" ops on
 * its service thread (connect/accept/regMr/close), "monitor" ops on the monitor thread.
 * State: a transport keeps its own, never in the protocol's objects: its endpoint of a
 * connection (c->ep) and its state of a path object (p->tp), both opaque to the protocol, made
 * by `open`/`path_open` and ended by `release`/`path_close` (which get just that object),
 * NULL where a transport needs none (the fake keeps neither; TCP's: tcp_conn.h). Each is its
 * object's first word, which a transport reads inline (upcall.h, lg_conn_ep / lg_path_tp);
 * the connection and the path it otherwise holds as handles, for the protocol's functions of
 * its upcall API (proto/upcall.h). TCP's data streams and the inner endpoint still read the
 * protocol's objects, and their inline helpers, through conn.h (issue 27): tcp_recv.c and
 * inner_endpoint.c.
 * Types only: this header has no code, so both the connection object and the transports can
 * include it without depending on each other. */
#ifndef LG_TRANSPORT_H
#define LG_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_net_abi.h"
#include "runtime/progress.h"

/* What every transport advertises (getProperties). */
#define LG_MAX_MSG_BYTES (1ull << 30) /* maxP2pBytes: test() reports sizes as int */
#define LG_MAX_COMMS 65536

struct lg_conn;
struct lg_path;
struct lg_req;
struct lg_ctrl;
struct lg_task;
struct lg_inner_mr;
struct lg_inner_ctx;
/* Opaque to the protocol: each transport that keeps state defines what they point to. */
struct lg_endpoint; /* a transport's own object for one connection (c->ep) */
struct lg_ep_path;  /* a transport's own state of one path object (p->tp) */

enum { LG_COPY_NONE = 0, LG_COPY_SENDS = 1, LG_COPY_REPLAYS = 2 };
/* Each transport's id on the wire (session/wire.h, the hello): never 0, never reused. */
enum { LG_TRANSPORT_TCP = 1, LG_TRANSPORT_INNER = 2, LG_TRANSPORT_FAKE = 3 };

struct lg_transport {
    const char *name; /* in logs */
    /* Properties: how it moves data, where the protocol must know (each 0 or 1). */
    /* Messages go in chunks (struct lg_chunk_hdr) through the connection's cursor: a post
     * wakes parked data streams, an ack beyond the cursor (after a rewind) moves it. Else
     * whole messages, one transport request each, in sequence order on the committed path,
     * and the data streams idle. */
    uint8_t chunks;
    /* A small send may be kept in a copy (LINKGUARD_SEND_COPY) and complete before its ack:
     * LG_COPY_SENDS sends the copy (unregistered memory: done at isend); LG_COPY_REPLAYS
     * sends NCCL's buffer and keeps the copy for a replay (done once the transport no longer
     * reads NCCL's buffer); LG_COPY_NONE (0) never keeps one. */
    uint8_t sends_copies;
    uint8_t matches_tags;    /* matches a grouped receive's messages to its buffers itself */
    /* A commit onto the path already committed replays nothing: what it carries still
     * arrives, in order. */
    uint8_t keeps_order_in_place;
    /* A writer's hold on a send is its transport request, which nobody tests once the peer
     * closed: a message the peer placed was read whole by then. */
    uint8_t hold_is_request;
    /* A path left by a switch, even one that stays up, is fenced and gets a fresh transport
     * comm (receives posted on a standby comm could match a later replay into stale buffers). */
    uint8_t fresh_on_leave;
    /* A backup path may be on any NIC of the device's backup set, its data on that NIC
     * (proto/spread.h: TCP's sockets, the inner comm of that member's inner device); else
     * always on the device's own backup. */
    uint8_t any_backup_nic;
    uint8_t id; /* LG_TRANSPORT_*: what every hello says of it; both ends must agree */
    lg_task_fn stream_fn[2]; /* handler of a data stream socket: [send, recv] */

    /* process-wide */
    ncclResult_t (*get_properties)(int dev, ncclNetProperties_v12_t *props);
    /* an NCCL communicator's context (ctx.h): the transport's own for it, or *out = NULL;
     * ctx_close ends a non-NULL one (with the context's last reference) */
    ncclResult_t (*ctx_open)(uint64_t comm_id, int traffic_class, struct lg_inner_ctx **out);
    void (*ctx_close)(struct lg_inner_ctx *inner);
    int (*nstreams)(void); /* data sockets per path */
    /* The transport's word in a connector's hellos (wire.h, lg_hello.blob), and whether a
     * listener takes a connector's: the connection keeps the connector's (c->blob).
     * Optional (NULL: the word is 0, and a listener takes only 0). */
    uint32_t (*hello_blob)(void);
    int (*blob_ok)(uint32_t blob);

    /* service thread */
    /* A connection was made (lg_conn_new; its kind and dev are set): *out its endpoint, or
     * NULL. 0, or -1 (no memory). NULL op: no endpoint. */
    int (*open)(struct lg_conn *c, struct lg_endpoint **out);
    /* connect/accept hand the connection to NCCL only once this says 1 (0: not yet, -1: the
     * connection failed meanwhile). */
    int (*usable)(struct lg_conn *c, uint64_t now);
    ncclResult_t (*reg_mr)(struct lg_conn *c, void *data, size_t size, int type, uint64_t offset,
                           int fd, struct lg_inner_mr **out);
    ncclResult_t (*dereg_mr)(struct lg_conn *c, struct lg_inner_mr *mr);
    /* *request = NULL: nothing to flush (complete). */
    ncclResult_t (*iflush)(struct lg_conn *c, int n, void **data, int *sizes,
                           struct lg_inner_mr **mrs, void **request);
    /* test() of a request that is not linkguard's: 1 if it is one of the transport's. */
    int (*flush_test)(void *request, int *done, ncclResult_t *rc);
    /* close (after every path's fence): what its endpoint (open's, or NULL) holds, and the
     * endpoint itself */
    void (*release)(struct lg_endpoint *ep);
    /* A path object was made for slot p->index (connect/accept; the monitor for a rebuild, each
     * a new object with fresh state): *out its state, or NULL. 0, or -1. path_close ends it as
     * the object goes (after its fence). NULL ops: no per-path state. */
    int (*path_open)(struct lg_path *p, struct lg_ep_path **out);
    void (*path_close)(struct lg_ep_path *tp);
    /* A retired path's stream tasks are detached (no handler runs on them again): what its
     * streams held goes back (TCP: a writer cut off mid-chunk, its hold on the message).
     * Optional (NULL: nothing held). */
    void (*path_detached)(struct lg_path *p);

    /* NCCL's thread */
    /* irecv, under c->mu: room to track receive r of up to maxcap bytes. 0, or -1. */
    int (*recv_prepare)(struct lg_conn *c, struct lg_req *r, size_t maxcap);
    /* isend/irecv posted r (not under mu): `mrs` the registrations (reg_mr's) of its buffers,
     * one for a send, r->g_n for a receive, or NULL (none); `wake`: the send streams the post
     * unparked. NCCL's thread runs this group's ops one at a time: a transport that moves
     * data only from them has r's registrations before it moves r. */
    void (*posted)(struct lg_conn *c, const struct lg_req *r, struct lg_inner_mr *const *mrs,
                   uint32_t wake);
    /* isend under c->mu, message seq of `size` bytes just took its window slot and no hold
     * (a switch) keeps data back, optional (NULL: 0): a token the protocol hands back to
     * `posted` as `wake` (TCP: the parked streams the post wakes). */
    uint32_t (*send_queued)(struct lg_conn *c, uint64_t seq, size_t size);
    /* Sender, under c->mu, optional (NULL: whole messages, never inside one): the cursor is
     * inside the message at c->cursor_seq (some of it went out); to_boundary moves it back
     * to that message's start (a rewind, an ack beyond the cursor), and says whether it was
     * inside. */
    int (*mid_message)(const struct lg_conn *c);
    int (*to_boundary)(struct lg_conn *c);
    /* isend under c->mu, optional (NULL: always): this send, of NCCL's registration mr, may
     * be kept in a copy (LG_COPY_REPLAYS: host memory, and a completion that needs one). */
    int (*may_keep)(const struct lg_conn *c, const struct lg_inner_mr *mr);
    /* test() of request r, not complete yet: move data now. */
    void (*progress)(struct lg_conn *c, struct lg_req *r);

    /* monitor */
    int (*step)(struct lg_conn *c, uint64_t now);   /* handshakes; 1 while one is on */
    int (*carries)(const struct lg_path *p);        /* a path up can take data now */
    void (*watch)(struct lg_conn *c, uint64_t now); /* progress watchdog of the active path */
    void (*goodput)(struct lg_conn *c, uint64_t now); /* sender: lossy paths (gray) */
    void (*heartbeat)(struct lg_conn *c, uint64_t now); /* its own periodic frames */
    /* its own control frames (not the protocol's): 1 taken, 0 not its (a lie), -1 stop */
    int (*on_frame)(struct lg_path *p, const struct lg_ctrl *f);
    void (*resume)(struct lg_path *p); /* data may move on p again (a commit, a hold ended) */
    void (*fence)(struct lg_path *p);  /* nothing it carried lands after this; idempotent */
    void (*rearm)(struct lg_path *p);  /* fenced, and stays up: its next comm */
    void (*rebuilt)(struct lg_path *p); /* receiver: a rebuilt path was filed */
    /* Sender: a SWITCH to `target` is about to go out. */
    void (*switching)(struct lg_conn *c, struct lg_path *target);
    /* Around a commit from path `from` to `to` (the change of c->active_path and, sender,
     * the rewind): begin, the protocol's own commit under c->mu, end. The receiver's end
     * runs before its RESYNC goes out. */
    void (*commit_begin)(struct lg_conn *c, struct lg_path *from, struct lg_path *to);
    void (*commit_end)(struct lg_conn *c, struct lg_path *from, struct lg_path *to);
    /* Receiver, optional: a closing sender's BYE says `delivered` of its sends completed
     * (their data placed, by a plugin that places them itself): complete those, for a
     * bounded while, before the close fails the rest. On the thread reading the session. */
    void (*drain_delivered)(struct lg_conn *c, uint64_t delivered);
};

#endif
