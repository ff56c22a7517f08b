/* Control sessions: one TCP socket per (local NIC address, peer listener, process pair) that
 * every path between the two carries its control frames on (ACK, HB, SWITCH, RESYNC, READY,
 * BYE and the transport's own), each frame naming its path's channel (wire.h, lg_ctrl.chan).
 * The session's own heartbeats (channel 0, every LINKGUARD_HEARTBEAT_MS it has sent nothing
 * else) are what says a NIC pair is alive, so liveness costs grow with peers and NICs, not
 * with connections, and a connection costs no control socket of its own.
 *
 * The connector opens a session (lg_session_open) to the peer's listener of a NIC: a socket
 * with a session hello (LG_HELLO_F_SESSION); the acceptor hands such a socket to
 * lg_session_accept. A path then attaches to it under a channel id the connector picks and
 * names in the hellos of the path's data sockets; the receiver attaches its side of the path
 * to the session those hellos name. There is one session per direction of set-up: a process
 * pair whose both sides connect has two per NIC pair.
 *
 * Failure: an error or EOF on the session fails every path attached to it at once (a dead
 * NIC is one event, not one per connection). A path is detached when it is retired; the
 * connector closes a session with its last path, the acceptor's side goes with its EOF (or,
 * left without paths, after LINKGUARD_DEAD_TIMEOUT_MS of silence).
 *
 * Threads: frames are read by whichever thread runs the session's task (a worker, NCCL's
 * thread in test(), the monitor's pump); a frame is handed to its path's protocol handler
 * (c->ctrl_frame) with the path held busy, and detaching waits for that. Writes from any
 * thread go through the session's queue under its tx lock. */
#ifndef LG_SESSION_H
#define LG_SESSION_H

#include <net/if.h>
#include <pthread.h>
#include <stdint.h>

#include "runtime/progress.h"
#include "session/wire.h"

struct lg_ctrl;
struct lg_chan;

/* What the owner of a channel (a path, conn.h) is told, on whichever thread reads the
 * session. None of them may detach a channel or take a session lock. */
struct lg_chan_ops {
    /* a frame for the channel */
    void (*frame)(struct lg_chan *ch, const struct lg_ctrl *f, uint64_t now);
    /* the session is over: an error (errno err), EOF (eof), or ended by us on purpose */
    void (*lost)(struct lg_chan *ch, int err, int eof, const char *why);
    /* the peer ends the session on purpose (BYE(FENCE) on channel 0): its EOF follows */
    void (*bye)(struct lg_chan *ch);
};

/* A path's channel on its session, embedded in the path: the session holds no other view of
 * it. Held from lg_session_attach until lg_session_put(ch->sess). */
struct lg_chan {
    struct lg_session *sess;
    uint32_t id;
    const struct lg_chan_ops *ops;
    int attached;          /* frames flow: attached, not yet detached (atomic) */
    int busy;              /* frames being handed to it (atomic) */
    int lost;              /* told the session is over (under the session's ch_mu) */
    struct lg_chan *next;  /* the session's channel table (under its ch_mu) */
    long ack_off;          /* an unsent ACK in the session's queue that a newer ack may */
    uint32_t ack_gen;      /* overwrite, and the queue generation it is valid in (tx_mu) */
};

#define LG_SESS_BUCKETS 256
/* Frames held for a channel the session does not have yet: a connect may complete before the
 * peer's accept attaches its side, and what the connector says first (a tag question, an ack
 * request) must not be lost in that gap. Bounded (the oldest goes first); each is held for
 * LINKGUARD_CONNECT_TIMEOUT_MS at most, as long as an accept may still come. */
#define LG_SESS_HELD 64
#define LG_SESS_TXQ (LG_CTRL_SIZE * 4096) /* frames queued before the session counts as stalled */

enum lg_sess_state { LG_SESS_CONNECTING = 1, LG_SESS_UP = 2, LG_SESS_FAILED = 3 };

struct lg_session {
    struct lg_task task; /* first: the task is the session */
    uint64_t id;         /* the connector's: in the hellos of the paths that use it */
    int outgoing;        /* we connected it */
    uint32_t local_ip, peer_ip;
    uint16_t peer_port; /* outgoing: the peer's listener; accepted: the peer's source port */
    char nic[IFNAMSIZ];
    int state; /* enum lg_sess_state (atomic) */
    int refs;  /* attached paths, open attempts, the acceptor side's socket (under lg_sess_mu) */
    int started;   /* its task is with the workers */
    int reaped;    /* acceptor side: the socket's hold is dropped (under lg_sess_mu) */
    int overflowed; /* its queue is full: the peer reads nothing (atomic; the monitor fails it) */
    int suspect;    /* was silent for the silent timeout once: no new path is put on it (atomic) */
    size_t hello_sent;
    uint64_t t0; /* opened or accepted */
    struct lg_session *next; /* registry (under lg_sess_mu) */
    /* channels (under ch_mu) */
    pthread_mutex_t ch_mu;
    struct lg_chan *bucket[LG_SESS_BUCKETS];
    uint32_t next_chan;
    int nchan;
    /* writes (under tx_mu) */
    pthread_mutex_t tx_mu;
    uint32_t txq_gen; /* moves whenever queued bytes move: a path's ack offset is stale then */
    size_t txq_len, txq_off;
    uint8_t txq[LG_SESS_TXQ];
    /* reads (the task's handler) */
    uint8_t rbuf[LG_CTRL_SIZE * 64];
    size_t rgot;
    struct lg_ctrl held[LG_SESS_HELD]; /* frames for channels not attached yet, oldest first */
    uint64_t held_ns[LG_SESS_HELD];    /* ... and when each came */
    int nheld;
    uint32_t held_gen;   /* attach_gen when they were last matched against the channels */
    uint32_t attach_gen; /* +1 at each attach (atomic) */
    /* liveness (atomics) */
    uint64_t last_rx_ns, prev_rx_ns, last_tx_ns;
    uint64_t drained_ns; /* a read found nothing more waiting */
    char why[96];
    int err; /* the errno it ended with (0: EOF, or ended on purpose) */
};

/* Connector: a session from (nic, local_ip) to the peer's listener (peer_ip, peer_port): one
 * that is up and heard from recently, or a new one being connected. Held for the caller (a
 * path attaching takes that hold over; lg_session_put otherwise). NULL with errno set. */
struct lg_session *lg_session_open(const char *nic, uint32_t local_ip, uint32_t peer_ip,
                                   uint16_t peer_port);
/* Drives a connecting session, answering as lg_sock_connect_check does for a socket: 0 up,
 * 1 still connecting, -1 failed (errno set). Any thread. */
int lg_session_connect_check(struct lg_session *s);
/* Acceptor: a socket whose session hello came in on local_ip. 0 taken, -1 close it. */
int lg_session_accept(int fd, const struct lg_hello *h, uint32_t local_ip);
/* Receiver: the accepted session `id` on local_ip, held, or NULL (not here (yet), or failed). */
struct lg_session *lg_session_find(uint64_t id, uint32_t local_ip);
/* Tests and fuzzers: a session over a connected socket of ours, up and held. */
struct lg_session *lg_session_adopt(int fd, uint64_t id);
void lg_session_put(struct lg_session *s);

/* Attaches ch under `id` (0: pick the next one, the connector's side), taking over the
 * caller's hold, which stays ch->sess's until lg_session_put. 0, or -1 (the session failed,
 * or the id is taken; the hold stays the caller's). */
int lg_session_attach(struct lg_session *s, struct lg_chan *ch, uint32_t id,
                      const struct lg_chan_ops *ops);
/* Detaches ch: no frame is handed to it once this returns (the hold stays). Never from one
 * of its ops. */
void lg_session_detach(struct lg_chan *ch);

/* ch's frame, queued and written as far as the socket takes it (any thread); queue_only
 * leaves the write to the next flush (the monitor's heartbeat refreshes). Dropped once ch
 * is detached. */
void lg_session_send(struct lg_chan *ch, const struct lg_ctrl *f, int queue_only);
/* Writes what is queued, waiting at most timeout_ms for room. */
void lg_session_drain(struct lg_session *s, int timeout_ms);
/* Reads what is waiting now (unless a read found it empty in the last millisecond). */
void lg_session_pump(struct lg_session *s, uint64_t now);

/* Monitor: heartbeats of idle sessions, every queued write out, failed and abandoned
 * sessions reaped. Returns when it wants to run next. */
uint64_t lg_sessions_tick(uint64_t now);
/* The last comm is gone: closes what is left. */
void lg_sessions_shutdown(void);
/* How many sessions are open (tests, the scale benchmark's accounting). */
int lg_sessions_count(void);

/* Readings closer than this count as one (a burst of frames, a chunk and its header). */
#define LG_RX_DISTINCT_NS 1000000ull

static inline int lg_session_up(const struct lg_session *s)
{
    return s && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == LG_SESS_UP;
}

#endif
