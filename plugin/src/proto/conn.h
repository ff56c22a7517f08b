/* Connections, their paths and requests, and the lossless failover protocol they run.
 *
 * A connection (send or receive side of one NCCL comm) has up to two paths: slot [0] on the
 * primary NIC, slot [1] on the backup NIC. A path is a channel on a control session
 * (session.h: one socket per NIC pair and process pair, shared by every path between them)
 * plus `nstreams` data streams, each one TCP socket driven by a progress task. One path,
 * `active`, carries data; the other stands by.
 *
 * Data. Messages carry sequence numbers 0, 1, 2 ... in posted order. The sender cuts each into
 * chunks (struct lg_chunk_hdr + payload, the header carrying the epoch's low 16 bits) and hands
 * them to whichever data stream of the active path has room. The receiver reads each chunk
 * straight into the posted buffer and, when a message is complete (every one of its chunks
 * wholly placed: completion by coverage, never by byte count), acknowledges the number of
 * messages placed so far (ACK, cumulative) on the control channel. A send completes only when
 * that ack covers it and no writer still reads its buffer (lg_req.writers), so the sender's
 * buffer is intact until the data is placed: that is what makes replay possible. A small send
 * (LINKGUARD_SEND_COPY) is copied into its slot's buffer instead and completes at once (kept):
 * the slot and its copy stay taken until the ack (LG_REQ_KEPT), a replay reads the copy, and
 * the receiver batches the acks of kept messages (chunk flag LG_CHUNK_F_KEPT; window.c). The
 * inner transport keeps small host sends too (acknowledged completion): its first send reads
 * NCCL's buffer, and the send completes once that is done (lg_req.released), its replays
 * reading the copy (transport.h, sends_copies).
 * Requests live in a window of LG_WINDOW slots indexed by seq % LG_WINDOW; a slot is reused
 * only after NCCL has seen its request complete, so `*request = NULL` is the back-pressure
 * answer when the slot for the next seq is still taken.
 *
 * Grouped receives. An irecv of n buffers (n <= LG_MAX_RECVS) takes the next n seqs; its
 * first slot is NCCL's request and holds the n buffers (sub[]). Tags match across every posted
 * group (NCCL's IB sender matches only the oldest: docs/failover.md "Grouped receives" says
 * where that differs): the messages are bound in seq order, each at its
 * first chunk, to the earliest posted free buffer with its tag, whichever group it belongs to
 * (so with receives (tag 8) then (tags 0..7), sends 0, 8, 1, ..., 7 all land right). A message
 * whose tag no posted buffer expects yet waits for a receive that does; the later messages
 * wait behind it (they are bound in order). A binding stays across resyncs; placement, acks and
 * replay are per message, in the message's own slot, as before. A request completes when each
 * of its buffers holds its message (sub[].done); test() reports each buffer's size. A slot is
 * free again once both its post was reported (LG_REQ_REPORTED) and its message placed
 * (LG_REQ_DONE): the two may belong to different groups. Chunks of one message that disagree
 * on the tag are a lie. A transport that matches tags itself (wrap mode: the inner plugin's
 * grouping) binds the k-th message of a group to its k-th buffer at post.
 *
 * Failover protocol (DESIGN.md "Lossless failover"; failover.c runs it, fo_policy.c decides,
 * resync.c does the accounting, reconnect.c rebuilds paths). Control frames (wire.h), each on
 * its path's channel of a control session (session.h):
 *   ACK(n)              recv->send  n messages placed (cumulative; accepted from any path)
 *   HB(flags, E, gens)  both ways   the connection's heartbeat, on every live path at once when
 *                                   any field changes, else refreshed every 20 heartbeat
 *                                   periods (liveness is the sessions': session.h): the
 *                                   sender's daemon view of both NICs (OK/LEAVE/DOWN), which
 *                                   of its paths it declared failed, its committed epoch E
 *   SWITCH(E, T)        send->recv  on path T: "move data to path T at epoch E"
 *   RESYNC(E, T, n)     recv->send  on path T: "committed E on T; I hold every message < n"
 *   READY(gen)          recv->send  on a rebuilt path: accepted
 *   BYE(CLOSE|FENCE)    both ways   EOF follows on purpose: the connection / only this path
 *   POSTED(n)           send->recv  wrap mode: n messages handed to the inner plugin (with
 *                                   heartbeats, on the active path, while any is unacked);
 *                                   TCP: ack the first n as they are placed (kept sends)
 *  - Epochs. Both sides hold a committed epoch E (0 at connect), the active slot and the path
 *    object E uses. Only the sender proposes (SWITCH, with E' = max(own, seen, proposed) + 1),
 *    only the receiver commits; a SWITCH or RESYNC whose epoch is not above the committed one
 *    is ignored, and one for a path that died or was replaced since is dropped. So crossing,
 *    duplicate or stale frames (a flap during a switch) cannot move anything backwards; a
 *    proposal that gets no RESYNC in LINKGUARD_SWITCH_TIMEOUT_MS is made again, higher; a
 *    sender that sees a newer epoch in the peer's heartbeats (a lost RESYNC) proposes above
 *    it; a rebuilt path, even in the active slot, is only entered through a new epoch.
 *  - Triggers, fastest first: our daemon's table says our NIC of the active path is DOWN
 *    (urgent) or DEGRADED/DRAINED/RECOVERING (graceful), seen by one load on every
 *    isend/irecv/test (lg_monitor_health_poll); the peer's heartbeat says the same of its NIC
 *    or that it declared the path failed; a transport error or EOF on the active path; silence:
 *    nothing read on the active path for LINKGUARD_SILENT_TIMEOUT_MS while the standby is
 *    heard (both control channels are read first, and a monitor run that was itself starved
 *    judges nothing; a standby silent that long while the active path is heard is lost, and
 *    rebuilt); a stalled stream (the progress watchdogs); a lossy path: the sender's data
 *    sockets retransmit LINKGUARD_GRAY_RETRANS_PCT of what they send (tcp/goodput.h), or in wrap
 *    mode a slow one, its inner sends completing under LINKGUARD_GRAY_SLOW_PCT of its own
 *    baseline (inner/rate.h); graceful, held off for a while (gray.h). Either side detects;
 *    the sender decides (fo_policy.c); the receiver
 *    reports (heartbeat flags) and, for silence or errors on its side, fences the path, which
 *    the sender then sees fail too.
 *  - Switch. Sender: hold chunks back (urgent: at once; graceful: from the next message
 *    boundary, then wait until all that was sent is acked, at most LINKGUARD_QUIESCE_MS, so
 *    nothing is sent twice), send SWITCH(E', T). Receiver on SWITCH(E' > E, T): set E' and T;
 *    from then every reader drops chunks not of E' (low 16 bits in the chunk header) and
 *    chunks of complete messages; wait until no reader is inside a placement step begun under
 *    the old epoch (each step, one socket read into a posted buffer or the accounting of a
 *    chunk, stores `placing` = its epoch + 1 before it looks at the epoch: a Dekker handshake);
 *    forget the bytes of every incomplete posted receive; answer RESYNC(E', T, n), n = its
 *    cumulative placed count. Sender on RESYNC(E' > E): acked = max(acked, n), rewind the chunk
 *    cursor to message n chunk 0, commit E' and T, release the hold; every message >= n is
 *    sent again from NCCL's buffers, still intact since a send completes only once acked and
 *    no writer holds it. NCCL sees none of it: requests complete later, never with an error.
 *  - Fence. A primary that is left is closed on both sides (BYE(FENCE) at once; after the
 *    monitor's pass over every connection, so a storm switches them all first: tasks
 *    detached and waited for, including a handler running inline on NCCL's thread; then the
 *    sockets closed), so nothing late can be read into a buffer NCCL reused; a writer cut
 *    off mid-chunk gives its hold on the message back. A backup left at reintegration stays as standby: a chunk it
 *    was writing is finished (TCP framing) and dropped by its old epoch.
 *  - Rebuild and reintegration. A failed path is rebuilt by the sender (connector): fresh
 *    sockets to the receiver's listening socket for that NIC (one per NIC address per process,
 *    shared by its listen comms, held by the connections accepted on it: acceptor.h), with REJOIN
 *    hellos naming the connection nonce and a new generation; the receiver checks its daemon
 *    calls the NIC usable, builds the path and answers READY. Tried when our daemon calls the
 *    NIC UP (or has no opinion: then it is a probe) and the peer's heartbeats do not object,
 *    LINKGUARD_REJOIN_MS after the failure, doubling after a failed attempt or a re-failure
 *    within 10 s while it carried the data (flap damping on top of the daemon's); at once
 *    when a daemon lets the NIC back in (it applied its own hold-down) or when no path works
 *    any more. A rebuilt primary becomes active again by a graceful switch
 *    (LINKGUARD_REINTEGRATE); the backup returns to standby.
 *  - A lying peer. Everything the peer says is checked against what an honest peer can say
 *    given our state, and a lie fails the connection (ncclRemoteError, a WARN naming it;
 *    lg_conn_peer_lied), never completes a request or replays one: an ACK beyond the
 *    messages wholly handed to the transport (as far as the cursor got before a rewind:
 *    c->sent_hi); a RESYNC below what was acknowledged or beyond
 *    what was sent, or at an epoch we never proposed; a SWITCH more than LG_EPOCH_MAX_STEP
 *    ahead or past LG_EPOCH_LIMIT; a heartbeat claiming an epoch above ours (receiver) or
 *    above our proposals (sender); a chunk not cut the way the sender cuts (chunk k at
 *    k * chunk_size) or claimed twice in one epoch. Chunks of a just-committed epoch are taken
 *    only once its partial receives are reset (c->rx_open): only a liar sends them earlier.
 *    tests/test_lying_peer.c drives each through the real code with a scripted peer.
 *  - No backup path (unprotected): heartbeats still flow, and nothing read from a peer that
 *    has sent heartbeats for LINKGUARD_DEAD_TIMEOUT_MS fails the connection (never a hang).
 *  - Both paths dead: keep rebuilding; after LINKGUARD_DEAD_TIMEOUT_MS with no working path
 *    (failed, silent or declared failed) the connection fails: test() returns ncclRemoteError
 *    and a WARN names the connection and both NICs with what became of each path. EOF or reset
 *    without any BYE on both paths means the peer process is gone: fail at once.
 *
 * Transports (transport.h). The protocol drives a path's data only through the connection's
 * ops table c->tr: linkguard's TCP streams (tcp.h; what "chunks" and "data streams" above
 * mean) or, in wrap mode (LINKGUARD_INNER), one inner-plugin comm per path (inner_endpoint.h: whole
 * messages, posted in sequence order on the committed path from NCCL's thread; the receiver
 * closes the inner comm of a path it leaves before its RESYNC, and every path left by a
 * switch is fenced and rebuilt: the properties of transport.h). Who owns
 * what: conn.c the objects, their failure and the control channel's bytes; window.c
 * placement, acks and test(); proto_post.c isend/irecv; proto_ctrl.c the control frames;
 * failover.c the state machine; the transports their data sockets or inner comms. A
 * transport's state is its own object, never a field here: the protocol keeps one opaque
 * pointer per connection (c->ep, the transport's endpoint) and one per path object (p->tp),
 * made and ended by the transport's ops (transport.h). The inner transport's endpoint holds
 * its locks, registrations, the inner request and registration of each window slot and its
 * goodput counters and rate windows; its path state, the path's inner comm
 * (transport/inner/inner_conn.h). The TCP endpoint holds the sender's goodput windows, the
 * chunk cursor's place inside a message and the parked streams; its path state, each data
 * stream's chunk being written or read (transport/tcp/tcp_conn.h). Here stay what every
 * transport shares: the cursor's message (cursor_seq: the next one handed to the transport)
 * and a path's data sockets with their tasks (lg_path.data[]: dialed, accepted, detached
 * and closed by the protocol; the inner transport keeps one idle, issue 27).
 *
 * What each transport guarantees, and so when a send completes (NCCL reuses the buffer then,
 * and a replay reads it):
 *  - linkguard's TCP streams: written bytes are only in a socket buffer; the receiver's ACK
 *    says placed. A send completes on the ACK and once no writer reads its buffer.
 *  - an inner plugin, LINKGUARD_INNER_PLACED=0: nothing assumed beyond "the inner reads the
 *    buffer until its send completes". A send completes on the ACK and the inner completion.
 *  - an inner plugin, LINKGUARD_INNER_PLACED=1 (declared by the operator: RC verbs, lgtcp):
 *    an inner send completes only once placed in the receiver's buffer, whose receive
 *    completion is then due. The inner completion counts as an ACK (acked rises with it).
 *    The sender says so (DELIVERED on each path as its comm comes up), and its receiver
 *    then acks only when due (LG_ACK_NOW_*), not after every completion.
 *    Resync stays exact: a sender proposing a switch stops completing inner sends and sends
 *    DELIVERED(k = acked) before the SWITCH; the receiver completes its inner receives on the
 *    comm it leaves until it holds k before it fences that comm, and completes what is done
 *    before any other close of its committed comm; its RESYNC n >= k. A RESYNC below acked
 *    fails the connection (lg_resync_check), so a send NCCL saw complete is never replayed. 
 *
 * Threads: NCCL's progress thread calls isend/irecv/test; its service thread calls
 * connect/accept/regMr/close. Socket handlers run serialized per socket (progress.h) on
 * whichever thread gets there: NCCL's thread for small work (isend writes a small message,
 * test() reads acks and places small chunks, LINKGUARD_POLL_INLINE), a progress worker for
 * the rest (a worker yields after a bounded run). The monitor thread (monitor.c) runs the
 * failover state machine of every connection: handlers only record what they saw (a path
 * failed, frames into the mailbox) and wake it. conn->mu guards the chunk cursor, the
 * placement window and the committed (epoch, active, paths[]); request state words are
 * atomics. A transport's locks live in its own objects (the inner's ep->wmu comes before
 * conn->mu, its ep->mr_mu is taken alone: inner_conn.h). NCCL's thread is counted in
 * `inline_users` while it holds a path pointer, so the monitor frees a replaced path only
 * once no one can still hold it. */
#ifndef LG_CONN_H
#define LG_CONN_H

#include <net/if.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/census.h"
#include "nccl_net_abi.h"
#include "proto/fo_state.h"
#include "proto/upcall.h"
#include "runtime/params.h"
#include "runtime/progress.h"
#include "runtime/util.h"
#include "runtime/wake.h"
#include "session/dial.h"
#include "session/handle.h"
#include "session/session.h"
#include "session/wire.h"
#include "transport/transport.h"

#define LG_CONN_MAGIC 0x4c47434fu /* "LGCO" */
/* Sub-receives one irecv may group (getProperties' maxRecvs): NCCL's own IB transport
 * groups up to 8 (NCCL_NET_IB_MAX_RECVS); each takes one slot of the LG_WINDOW-slot window,
 * so 8 full groups fit in flight, and a post that does not fit gets *request = NULL. */
#define LG_MAX_RECVS 8
#define LG_REQ_MAGIC 0x4c475251u  /* "LGRQ" */
#define LG_REQ_FAILED_MAGIC 0x4c475246u /* "LGRF" */
#define LG_MR_MAGIC 0x4c474d52u   /* "LGMR" */

enum lg_conn_kind { LG_CONN_SEND = 1, LG_CONN_RECV = 2 };

/* Request slot state bits. */
#define LG_REQ_POSTED 0x1u /* isend/irecv filled the slot */
#define LG_REQ_DONE 0x2u   /* recv: every byte placed */
#define LG_REQ_KEPT 0x4u   /* send: NCCL saw it complete (a kept copy); the slot is taken
                            * until the receiver acks it (lg_send_slot_free) */
#define LG_REQ_REPORTED 0x8u /* recv: test() reported the group posted here, whose message
                              * (bound to a buffer of another group) is not placed yet */
#define LG_TOTAL_UNKNOWN UINT64_MAX /* lg_req.total before a chunk header said it */

struct lg_conn;
struct lg_path;
struct lg_listener; /* acceptor.h */

/* A data socket of a path and its progress task. What moves through it is the transport's
 * (TCP: struct lg_tcp_stream, its chunk state, in the path's p->tp); the socket's life (the
 * dial, the accept, the detach and close at a retire) is the protocol's. */
struct lg_stream {
    struct lg_task task;
    struct lg_path *path;
    int index; /* 0: control channel; 1..nstreams: data */
};

enum lg_path_state { LG_PATH_UP = 1, LG_PATH_FAILED = 2 };

struct lg_path {
    /* First, where upcall.h's lg_path_tp reads it: the transport's own state of this object
     * (tr->path_open), or NULL. */
    struct lg_ep_path *tp;
    struct lg_conn *conn;
    int index; /* slot: 0 primary, 1 backup */
    int nstreams;
    int state; /* enum lg_path_state (atomic) */
    int peer_bye; /* the peer said BYE: 0 no, 1 + LG_BYE_* (atomic) */
    uint32_t gen; /* generation of this slot's path: 0 at connect, +1 per rebuild */
    char nic[IFNAMSIZ];
    char peer[24];
    struct lg_stream data[LG_MAX_STREAMS];
    pthread_mutex_t ctrl_mu; /* its data fds are taken out under it (a holder sees them open) */
    /* its control channel: a channel of a control session, the session held until freed */
    struct lg_chan ch;
    int started;               /* its data tasks are with the workers (atomic) */
    /* liveness and failure (atomics unless said) */
    uint64_t last_rx_ns;  /* something was read on one of its sockets (lg_path_note_rx) */
    uint64_t prev_rx_ns;  /* the reading before that one, at least LG_RX_DISTINCT_NS earlier */
    uint64_t last_tx_ns;  /* a connection heartbeat was queued */
    uint64_t fail_ns;     /* when it failed */
    int peer_gone;        /* EOF or reset without a BYE */
    int fail_noted;       /* `why` is written (release) */
    char why[128];
    int ready;            /* sender, rebuilt path: READY came */
    int retired;          /* sockets closed, tasks detached (monitor) */
    int bye_sent;         /* BYE(FENCE) queued (monitor) */
    int retire_queued;    /* in the list of paths to retire later (atomic; lg_path_retire_later) */
};

struct lg_req {
    uint32_t magic;
    struct lg_conn *conn;
    uint64_t seq;
    uint32_t state; /* LG_REQ_* (atomic) */
    int optional;   /* recv posted with NCCL_NET_OPTIONAL_RECV_COMPLETION */
    int tag;
    /* send */
    const char *data; /* NCCL's buffer, or `copy` */
    size_t size;
    int kept;         /* the message is in `copy` too (LINKGUARD_SEND_COPY) */
    int released;     /* kept, and NCCL's buffer is not read again (a replay reads the copy):
                       * done for NCCL (atomic; at isend when the transport sends the copy) */
    char *copy;       /* the slot's copy buffer, kept across posts */
    size_t copy_cap;
    uint32_t writers; /* streams holding a chunk of it (atomic; taken under conn->mu) */
    /* recv */
    char *buf;
    size_t cap;
    uint64_t placed;  /* bytes placed (atomic) */
    uint64_t total;   /* message size from the chunk headers; UINT64_MAX until known */
    /* Completion by coverage: bit k of `cover` is claimed when chunk k is matched (a second
     * claim in one epoch is a lying peer), `chunks` counts chunks wholly placed; the receive
     * is complete when every chunk of the message is. Never by byte count: overlapping
     * chunks would complete it while a stream still writes into the buffer. */
    uint64_t *cover;      /* cover_words words: &cover_one, or a heap array kept across posts */
    uint64_t cover_one;
    uint64_t *cover_heap;
    uint64_t cover_heap_words;
    uint64_t cover_words; /* words in use for this post */
    uint64_t chunks;      /* chunks wholly placed (atomic) */
    /* Grouped receive (proto_post.c, tcp_recv.c; conn.h's top): one irecv of n buffers posts
     * the slots of seqs g_head .. g_head + n - 1; the head slot is NCCL's request, holds the
     * buffers (sub[]) and completes once each of them holds its message. The message of seq s
     * (slot s) fills buffer g_sub of the group headed at b_head, which may be another group. */
    uint64_t g_head; /* every slot: seq of its group's head */
    int g_n;         /* head: sub-receives in the group (1..LG_MAX_RECVS); others 0 */
    uint64_t b_head; /* the message's buffer: its group's head seq ... (under mu) */
    int g_sub;       /* ... and index there, -1 until bound (under mu; release once bound) */
    int g_tag;       /* the message's tag, from its chunk headers (under mu) ... */
    int g_tag_known; /* ... once one was read (under mu) */
    struct lg_subrecv {
        char *buf;
        size_t cap;
        int tag;
        int bound;     /* a message was bound to it (under mu) */
        uint64_t size; /* bytes received, for test()'s sizes[] (written before done) */
        int done;      /* its message is placed (atomic, release) */
    } sub[LG_MAX_RECVS]; /* head only */
};

/* The request isend/irecv hand out once the connection has failed: it never completes, and
 * test() reports the connection's error. NCCL's transports take a post on a connection
 * whose peer has gone and report the failure in test(); so does linkguard, whatever room
 * the window has left (a caller may post without ever calling test()). */
struct lg_failed_req {
    uint32_t magic; /* LG_REQ_FAILED_MAGIC */
    struct lg_conn *conn;
};

struct lg_conn {
    /* First, where upcall.h's lg_conn_ep reads it: the transport's own object for it
     * (tr->open), or NULL. */
    struct lg_endpoint *ep;
    uint32_t magic;
    enum lg_conn_kind kind;
    int dev;
    uint64_t nonce, listen_id;
    int nstreams;
    uint32_t blob; /* the transport's word in every hello (transport.h): the connector's */
    int npaths;
    int protected_; /* has both paths: failures fail over instead of failing (atomic) */
    int upgradable; /* built without its backup path, which the peer has: the monitor keeps
                     * trying to add it, and the connection is protected from then on */
    int active;     /* slot of the path carrying data (atomic; changed under mu) */
    uint32_t epoch; /* committed epoch (atomic, seq_cst; changed under mu) */
    struct lg_path *active_path; /* the path object the committed epoch uses (under mu) */
    struct lg_path *paths[LG_NPATHS]; /* replaced under mu by the monitor (rebuild) */
    /* NCCL-thread sections holding a path pointer, counted per phase (atomics): the monitor
     * flips the phase and waits for the old one to drain, which a busy poller cannot
     * starve (it enters the new phase). */
    uint32_t inline_users[2];
    uint32_t inline_phase;
    pthread_mutex_t mu;
    struct lg_req reqs[LG_WINDOW];
    uint64_t next_seq; /* next seq to post (NCCL's thread) */
    uint64_t bind_next;  /* recv: the next message to bind to a buffer (under mu) */
    uint64_t unbound_lo; /* recv: the head seq of the oldest group with a free buffer (mu) */
    uint64_t posted;   /* messages posted (atomic) */
    /* send side */
    uint64_t acked;        /* messages the receiver placed (atomic, from acks) */
    uint64_t kept_hi;      /* seq + 1 of the last kept send (atomic): close waits for its ack */
    uint64_t ack_asked;    /* the last POSTED(n) sent to ask for acks (NCCL's thread, monitor) */
    /* the next message to hand to the transport (under mu); where inside it a transport
     * that cuts messages is, is its own (transport.h, mid_message) */
    uint64_t cursor_seq;
    uint64_t sent_hi; /* the furthest the cursor got before its last rewind (under mu): a
                       * replay does not unsend what was handed to the transport, and the
                       * receiver may hold messages beyond its RESYNC count (out of order) */
    int hold;        /* LG_HOLD_*: chunks held back for a switch (under mu) */
    int match_mode;  /* sendmatch.c: first send, every tag the same, or matched (under mu) */
    int match_tag;   /* ... the tag of them all (under mu) */
    struct lg_match *match; /* sendmatch.h, both sides: NULL until tags vary (set once under
                             * mu, atomic; freed with the connection) */
    /* receive side */
    struct lg_seqwin win;  /* placement (under mu) */
    uint64_t placed;       /* win.base, readable without mu (atomic) */
    uint64_t ack_sent;     /* highest placement count acknowledged to the sender (atomic) */
    uint64_t ack_need;     /* acks up to here are awaited: messages not kept by the sender,
                            * or what its POSTED asked for (atomic; raised under mu) */
    uint32_t rx_waiting;   /* data streams waiting for a receive to be posted or a message
                            * before theirs to be bound (atomic bits) */
    int polled;            /* NCCL's thread called test() since the monitor last looked
                            * (atomic): small chunks are placed by those calls, so no
                            * progress without them is no sign of a stalled path (wrap
                            * mode's sender: of a slow one) */
    uint32_t rx_open;      /* epoch whose partial receives are reset: chunks of the committed
                            * epoch are taken only once it equals it (atomic) */
    /* rebuilding paths */
    /* The NIC of each slot: the device's primary, and the member of its backup set that this
     * connection's backup was put on (proto/spread.h; the pair's backup when not spread). */
    char nic[LG_NPATHS][IFNAMSIZ];
    int spread_held;               /* connector: holds a count on nic[1] (spread.h) */
    struct lg_handle peer;         /* connector: the listener's handle (its set: a move) */
    uint32_t local_ip[LG_NPATHS];  /* our address on each NIC (network order) */
    uint32_t peer_ip[LG_NPATHS];   /* sender: the receiver's listening sockets */
    uint16_t peer_port[LG_NPATHS];
    /* receiver: kept open for its rebuilt paths: [0] the primary's NIC, [1 + k] member k of
     * the backup set (a spread backup may be rebuilt on any of them) */
    struct lg_listener *listener[1 + LG_HANDLE_MAX_SET];
    /* failover */
    pthread_mutex_t mb_mu;
    struct lg_mailbox mb;  /* under mb_mu */
    struct lg_fo fo;       /* monitor thread only */
    int dirty;             /* the monitor should look at it (atomic) */
    struct lg_conn *mon_next; /* monitor registry */
    pthread_mutex_t run_mu;   /* held while the monitor runs it (monitor.c) */
    int closing;              /* closed: the monitor leaves it alone (set under run_mu) */
    int refs;                 /* the object's: its owner's, and the monitor's holds (atomic) */
    /* failure */
    int error; /* ncclResult_t once the connection cannot deliver (atomic) */
    enum lg_fail_reason fail_reason; /* why, written before `error` (census.h) */
    int census_counted; /* its failure is in the census (under the monitor's registry lock) */
    int peer_closed; /* the peer closed the connection (BYE(CLOSE)) (atomic) */
    struct lg_failed_req failed_req; /* every post's request once `error` is set */
    char errmsg[256];
    int nmr; /* live memory registrations (atomic) */
    struct lg_ctx *ctx; /* NCCL's communicator context (held; core.h), or NULL */
    const struct lg_transport *tr; /* what carries the paths' data (transport.h) */
    /* the protocol's handler of a control frame for one of its paths (lg_fo_init): 0 go on,
     * -1 the path or the connection failed */
    int (*ctrl_frame)(struct lg_path *p, const struct lg_ctrl *f);
};
_Static_assert(offsetof(struct lg_conn, ep) == 0, "upcall.h's lg_conn_ep reads the first word");
_Static_assert(offsetof(struct lg_path, tp) == 0, "upcall.h's lg_path_tp reads the first word");

#define LG_HOLD_NONE 0
#define LG_HOLD_BOUNDARY 1 /* finish the message being cut, start no new one */
#define LG_HOLD_ALL 2      /* hand out no chunk */

/* conn.c */
/* A connection whose paths' data goes through `tr` (nstreams data sockets each), named
 * `nonce` by both ends; the protocol then attaches to it (lg_fo_init) before its paths start.
 * Its facts (upcall.h) are set before the transport's open reads them. */
struct lg_conn *lg_conn_new(enum lg_conn_kind kind, int dev, const struct lg_transport *tr,
                            int nstreams, uint32_t blob, uint64_t nonce);
/* A path object for slot `index`, not yet in c->paths (rebuilds publish it later). */
struct lg_path *lg_path_alloc(struct lg_conn *c, int index, const char *nic, const char *peer);
struct lg_path *lg_path_new(struct lg_conn *c, int index, const char *nic, const char *peer);
void lg_path_free(struct lg_path *p); /* retired or never started */
/* Fds must be in data[i].task.fd and the path attached to its session; registers them with
 * the workers. */
int lg_conn_start(struct lg_conn *c);
int lg_path_start(struct lg_path *p);
/* Detaches, closes every fd and drops the owner's reference: the object itself goes with
 * the last reference (a monitor pass may still hold it, and only looks at `closing`). */
void lg_conn_free(struct lg_conn *c);
void lg_conn_hold(struct lg_conn *c);
void lg_conn_put(struct lg_conn *c);
/* Appends "primary ctrl 40001 data 40002,40003" (each socket's local TCP port; "; " first when
 * `sep`) to out, so that an operator or a lab test can tell one flow from another. Returns
 * the length written (out stays terminated). */
size_t lg_path_ports(const struct lg_path *p, char *out, size_t len, int sep);
/* Sends a control frame on the path's channel (any thread); _queue leaves the write to the
 * monitor's next flush (heartbeat refreshes, batched per session). */
static inline void lg_path_ctrl_send(struct lg_path *p, const struct lg_ctrl *f)
{
    lg_session_send(&p->ch, f, 0);
}
static inline void lg_path_ctrl_queue(struct lg_path *p, const struct lg_ctrl *f)
{
    lg_session_send(&p->ch, f, 1);
}
/* Puts p on session s as channel `id` (0: the next one), taking over the caller's hold of s.
 * 0, or -1 (the hold stays the caller's). */
int lg_path_attach(struct lg_path *p, struct lg_session *s, uint32_t id);
/* Starts dialing p (dial.h) from its NIC to the peer's listener of its slot (c->local_ip,
 * c->peer_ip, c->peer_port): its channel on a control session (a shared one that is up, else a
 * new one) and its data sockets, whose hellos will say paths_mask and flags (with the
 * transport's). `held`: a stream whose hello waits for lg_dial_hello (0: none). 0, or -1 with
 * errno set and d->part saying what failed (what was opened is p's: freeing p closes it). */
int lg_path_dial(struct lg_path *p, struct lg_dial *d, uint8_t paths_mask, uint8_t flags,
                 int held);
/* The receiver's side: attaches p to the accepted session `id` on its slot's address, as
 * channel `chan` (what its data sockets' hellos named). 0, or -1 (not here (yet), failed, or
 * the channel is taken). */
int lg_path_join(struct lg_path *p, uint64_t id, uint32_t chan);
static inline struct lg_session *lg_path_sess(const struct lg_path *p) { return p->ch.sess; }
/* Writes what the path's session still queues, waiting at most timeout_ms (close: the BYE
 * must not be lost to a full socket buffer). */
static inline void lg_path_ctrl_drain(struct lg_path *p, int timeout_ms)
{
    if (p->ch.sess)
        lg_session_drain(p->ch.sess, timeout_ms);
}
/* Reads what waits on the path's session now (rate-limited when now != 0). */
static inline void lg_path_ctrl_pump(struct lg_path *p, uint64_t now)
{
    if (p && p->ch.sess && __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == LG_PATH_UP)
        lg_session_pump(p->ch.sess, now);
}
/* The fd carrying its control frames (its session's), or -1. */
static inline int lg_path_ctrl_fd(const struct lg_path *p)
{
    return p->ch.sess ? p->ch.sess->task.fd : -1;
}
/* The peer said BYE on p (flags LG_BYE_*): EOF follows on purpose. */
void lg_path_note_bye(struct lg_path *p, uint8_t flags);
/* Detaches, closes and marks a path retired (monitor or close; never from a handler). */
void lg_path_retire(struct lg_path *p, int say_bye);
/* Its first, cheap part: the path fails (no one uses it from now) and the peer is told. */
void lg_path_fence_start(struct lg_path *p, int say_bye);
/* The monitor, in a storm: the first part now, the rest later, batched (lg_paths_retire_queued),
 * so that every connection switches first. The path may be retired or freed meanwhile. */
void lg_path_retire_later(struct lg_path *p);
/* The monitor, between its passes: retires up to LG_RETIRE_BATCH queued paths, one detach of
 * their tasks for all. Returns how many are still queued. */
#define LG_RETIRE_BATCH 32
int lg_paths_retire_queued(void);
static inline const char *lg_conn_kind_str(const struct lg_conn *c)
{
    return c->kind == LG_CONN_SEND ? "send" : "recv";
}
/* Any thread: the monitor looks at c soon. */
static inline void lg_monitor_wake(struct lg_conn *c)
{
    __atomic_store_n(&c->dirty, 1, __ATOMIC_SEQ_CST);
    lg_wake_monitor(0);
}
/* Something was read on p now (any thread; relaxed: a heuristic's inputs, each word whole). */
static inline void lg_path_note_rx(struct lg_path *p, uint64_t now)
{
    uint64_t last = __atomic_load_n(&p->last_rx_ns, __ATOMIC_RELAXED);
    if (now > last && now - last >= LG_RX_DISTINCT_NS)
        __atomic_store_n(&p->prev_rx_ns, last, __ATOMIC_RELAXED);
    __atomic_store_n(&p->last_rx_ns, now, __ATOMIC_RELAXED);
}
/* When something was last read for p: on its own sockets, or on its session (whose heartbeats
 * say the NIC pair is alive), and the distinct reading before that (lg_path_note_rx). */
static inline uint64_t lg_path_rx_ns(const struct lg_path *p)
{
    uint64_t own = __atomic_load_n(&p->last_rx_ns, __ATOMIC_RELAXED);
    uint64_t ses = p->ch.sess ? __atomic_load_n(&p->ch.sess->last_rx_ns, __ATOMIC_RELAXED) : 0;
    return own > ses ? own : ses;
}
static inline uint64_t lg_path_prev_rx_ns(const struct lg_path *p)
{
    uint64_t own = __atomic_load_n(&p->prev_rx_ns, __ATOMIC_RELAXED);
    uint64_t ses = p->ch.sess ? __atomic_load_n(&p->ch.sess->prev_rx_ns, __ATOMIC_RELAXED) : 0;
    return own > ses ? own : ses;
}
/* Something (a heartbeat at least) was read on the path within a few heartbeat periods. */
static inline int lg_path_heard_recently(const struct lg_path *p, uint64_t now)
{
    uint64_t heard = lg_path_rx_ns(p);
    return lg_age_ns(now, heard) <= 4 * (uint64_t)lg_params.heartbeat_ms * 1000000ull;
}
static inline int lg_path_up(const struct lg_path *p)
{
    return p && __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == LG_PATH_UP;
}
/* NCCL's thread brackets its use of c->paths[] pointers with these. */
static inline uint32_t lg_conn_enter(struct lg_conn *c)
{
    for (;;) {
        uint32_t ph = __atomic_load_n(&c->inline_phase, __ATOMIC_SEQ_CST) & 1;
        __atomic_add_fetch(&c->inline_users[ph], 1, __ATOMIC_SEQ_CST);
        if ((__atomic_load_n(&c->inline_phase, __ATOMIC_SEQ_CST) & 1) == ph)
            return ph;
        __atomic_sub_fetch(&c->inline_users[ph], 1, __ATOMIC_RELEASE); /* flipped: again */
    }
}
static inline void lg_conn_exit(struct lg_conn *c, uint32_t ph)
{
    __atomic_sub_fetch(&c->inline_users[ph], 1, __ATOMIC_RELEASE);
}
/* Monitor: after unpublishing a path pointer, returns once no section can still hold it. */
void lg_conn_quiesce_inline(struct lg_conn *c);
static inline struct lg_path *lg_conn_active_path(struct lg_conn *c)
{
    struct lg_path *const *slot = &c->paths[__atomic_load_n(&c->active, __ATOMIC_ACQUIRE)];
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

/* Sender, under mu: the transport's cursor is inside the message at c->cursor_seq; moves it
 * back to that message's start and says whether it was inside (transport.h). */
static inline int lg_conn_mid_message(const struct lg_conn *c)
{
    return c->tr->mid_message && c->tr->mid_message(c);
}
static inline int lg_conn_to_boundary(struct lg_conn *c)
{
    return c->tr->to_boundary && c->tr->to_boundary(c);
}

/* The NIC of slot i (c->nic[i]), "?" when none was set. */
static inline const char *lg_conn_nic(const struct lg_conn *c, int i)
{
    return c->nic[i][0] ? c->nic[i] : "?";
}

/* A NIC's name into a connection's slot (c->nic[i]). */
static inline void lg_nic_name_copy(char out[IFNAMSIZ], const char *name)
{
    size_t n = strnlen(name, IFNAMSIZ - 1);
    memcpy(out, name, n);
    out[n] = 0;
}

/* The head slot of the group whose buffer message slot r's message fills (bound). */
static inline struct lg_req *lg_req_bound_group(struct lg_conn *c, const struct lg_req *r)
{
    return &c->reqs[r->b_head % LG_WINDOW];
}

static inline struct lg_stream *lg_stream_of(struct lg_task *t)
{
    return (struct lg_stream *)t; /* task is the first member */
}

#endif
