/* On-the-wire formats of the TCP transport: the hello that opens every socket, control
 * frames (acks), chunk headers on data streams, and the sequence window. All fields are
 * little-endian except IPv4 addresses and ports, which stay in network order. Encoders and
 * decoders are pure functions (tests/test_wire.c). */
#ifndef LG_WIRE_H
#define LG_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define LG_WIRE_VERSION 8 /* 2: failover frames, rejoin hellos; 3: control sessions; 4: STALLED;
                           * 5: KEEPS; 6: TAGS, GROUP; 7: the hello's transport id and word;
                           * 8: GROUPED */

/* ---- hello: first bytes the connector writes on each socket -------------------------- */
#define LG_HELLO_MAGIC 0x4548474cu /* "LGHE" */
#define LG_HELLO_SIZE 48
#define LG_MAX_STREAMS 16
#define LG_NPATHS 2 /* primary, backup */

struct lg_hello {
    uint8_t path;        /* 0 primary, 1 backup */
    uint8_t stream;      /* 1..nstreams = data streams (0: a session hello) */
    uint8_t nstreams;    /* data streams per path */
    uint8_t paths_mask;  /* paths the connection has (bit p); authoritative on path 0 ctrl */
    uint8_t transport;   /* which transport carries the data (transport.h, lg_transport.id);
                          * both ends must agree */
    uint32_t blob;       /* the transport's own word, agreed for the connection's life (TCP:
                          * the largest chunk payload the sender will use) */
    uint64_t listen_id;  /* from the handle: which listener this is for */
    uint64_t conn_nonce; /* connector's id: groups the sockets of one connection */
    uint8_t flags;       /* LG_HELLO_F_* */
    uint32_t gen;        /* rejoin: generation of the path being rebuilt (0 at connect) */
    uint64_t session;    /* the control session the path's frames travel on (session.h) */
    uint32_t chan;       /* ... and its channel there (never 0) */
};
#define LG_HELLO_F_REJOIN 0x1 /* rebuilds one path of a live connection (reconnect.c) */
#define LG_HELLO_F_SESSION 0x4 /* opens a control session (session.h): conn_nonce is its id;
                                * every other field is 0 (0x2, wrap mode, was version 6's) */

void lg_hello_encode(uint8_t out[LG_HELLO_SIZE], const struct lg_hello *h);
/* 0, or -1 for a bad magic/version/field (garbage or a stranger on our port). */
int lg_hello_decode(const uint8_t in[LG_HELLO_SIZE], struct lg_hello *h);

/* ---- control frames -------------------------------------------------------------------- */
/* They travel on a control session (session.h) shared by every path between two processes
 * over one NIC pair; `chan` says whose. Channel 0 is the session's: heartbeats only. */
#define LG_CTRL_SIZE 24
enum lg_ctrl_type {
    LG_CTRL_ACK = 1,    /* recv->send: value = messages placed in posted buffers (cumulative) */
    LG_CTRL_BYE = 2,    /* EOF follows on purpose; flags: LG_BYE_CLOSE or LG_BYE_FENCE; a
                         * closing receiver's BYE(CLOSE) carries value = messages placed */
    LG_CTRL_HB = 3,     /* heartbeat: flags = LG_HB_* (the sender of the frame's view), epoch =
                         * its committed epoch, value = gen of its path 0 | gen of path 1 << 32;
                         * on channel 0 the session's liveness, every field 0 */
    LG_CTRL_SWITCH = 4, /* send->recv: move data to path `value` at epoch `epoch` */
    LG_CTRL_RESYNC = 5, /* recv->send: committed `epoch` on path `flags`; value = messages
                         * placed: replay from there */
    LG_CTRL_READY = 6,  /* recv->send on a rebuilt path: accepted, value = its gen */
    LG_CTRL_INNER = 7,  /* recv->send, wrap mode: part `flags` (0..LG_INNER_PARTS-1) of the
                         * inner plugin's listen handle for the path of gen `epoch`; value =
                         * 8 handle bytes (the 16-byte frame cannot carry all 128 at once) */
    LG_CTRL_DELIVERED = 8, /* send->recv, wrap mode with LINKGUARD_INNER_PLACED, on each
                            * path as its inner comm comes up and just before each SWITCH on
                            * the same path: value = messages whose sends completed (the
                            * inner plugin placed them): hold every one */
    LG_CTRL_POSTED = 9, /* send->recv, wrap mode, on the active path with its heartbeats while
                         * a message is unacknowledged: value = messages handed to the inner
                         * plugin; the receiver's progress watchdog (failover.c). TCP
                         * transport, and wrap mode after KEEPS: "ack the first `value`
                         * messages as they are placed" (a sender waiting: window.c) */
    LG_CTRL_STALLED = 10, /* recv->send, TCP transport, on the active path: message `value` got
                           * no data for LINKGUARD_STALL_MS while data around it arrived; the
                           * sender judges from its data sockets' TCP view (tcp_watch.c) */
    LG_CTRL_KEEPS = 11, /* send->recv, wrap mode with acknowledged completion, on each path
                         * as its inner comm comes up: value = LINKGUARD_SEND_COPY, the size up
                         * to which the sender keeps a send in a copy and does not wait for its
                         * ack: the receiver acks such messages in batches, and at once what a
                         * POSTED asks for (a small send the sender could not keep) */
    LG_CTRL_TAGS = 12,  /* send->recv, a sender whose tags vary (proto/sendmatch.h): value =
                         * k | gen << 48, "your posted groups" (k: its next message);
                         * recv->send, the answer's first frame: value = lo | gen << 48, the
                         * head of its oldest group with a free buffer, epoch = how many
                         * messages it has bound beyond lo (GROUP frames follow) */
    LG_CTRL_GROUP = 13, /* recv->send: buffer flags & 7 of a group of (flags >> 3 & 7) + 1 at
                         * head value & (2^48 - 1) (gen: value >> 48), its tag in `epoch`, flags
                         * & 0x40 when a message is bound to it; one per buffer of each group */
    LG_CTRL_GROUPED = 14, /* recv->send, wrap mode, before its first grouped inner receive: an
                           * inner send into a group may complete (placed) while the rest of
                           * the group is still to come, and a group completes whole, so the
                           * receiver could not hold such a send across a switch: "complete
                           * sends on my acks, never on the inner completion alone". The
                           * sender answers GROUPED (send->recv, value = the size up to which
                           * it keeps sends in a copy, as KEEPS); the receiver posts no group
                           * before the answer */
    LG_CTRL_TYPE_MAX
};
#define LG_BYE_CLOSE 0 /* the connection is being closed */
#define LG_BYE_FENCE 1 /* only this path is abandoned (failover); the connection lives on */
/* LG_CTRL_HB flags: per NIC (2 bits each, NIC i at bit 2i) what the frame's sender's daemon
 * says, then which of its paths it has declared failed. */
#define LG_HB_NIC_OK 0u    /* UP, or no daemon opinion */
#define LG_HB_NIC_LEAVE 1u /* DEGRADED, DRAINED, RECOVERING: still carries, move off */
#define LG_HB_NIC_DOWN 2u
#define LG_HB_NIC(flags, i) (((flags) >> (2 * (i))) & 3u)
#define LG_HB_PATH_FAILED(i) (0x10u << (i))
#define LG_INNER_PART_BYTES 8
#define LG_INNER_PARTS 16 /* x 8 bytes = NCCL_NET_HANDLE_MAXSIZE (128) */
struct lg_ctrl {
    uint8_t type;
    uint8_t flags;
    uint32_t epoch; /* connection epoch (HB, SWITCH, RESYNC); 0 otherwise */
    uint64_t value;
    uint32_t chan;  /* the path's channel on its control session; 0: the session's own (HB) */
};
void lg_ctrl_encode(uint8_t out[LG_CTRL_SIZE], const struct lg_ctrl *c);
int lg_ctrl_decode(const uint8_t in[LG_CTRL_SIZE], struct lg_ctrl *c);

/* ---- chunk header: precedes every chunk on a data stream -------------------------------- */
#define LG_CHUNK_MAGIC 0x4b43u /* "CK" */
#define LG_CHUNK_HDR_SIZE 40
struct lg_chunk_hdr {
    uint16_t epoch; /* low 16 bits of the connection epoch the chunk was sent in */
    uint32_t len;   /* payload bytes following this header */
    uint64_t seq;   /* message sequence number on the connection */
    uint64_t offset;
    uint64_t total; /* message size */
    uint32_t tag;
    uint32_t flags; /* LG_CHUNK_F_* */
};
/* The sender keeps a copy of the message (LINKGUARD_SEND_COPY) and has completed its send:
 * the receiver's ACK may wait for a batch (window.c). */
#define LG_CHUNK_F_KEPT 0x1u
#define LG_CHUNK_F_ALL LG_CHUNK_F_KEPT
void lg_chunk_encode(uint8_t out[LG_CHUNK_HDR_SIZE], const struct lg_chunk_hdr *c);
/* Checks magic, known flags and internal consistency (offset + len <= total, len <= max_len). */
int lg_chunk_decode(const uint8_t in[LG_CHUNK_HDR_SIZE], uint32_t max_len, struct lg_chunk_hdr *c);

/* Chunking of a message: a zero-byte message is one empty chunk, so every message has at
 * least one header on the wire. */
static inline uint64_t lg_chunk_count(uint64_t size, uint64_t chunk)
{
    return size == 0 ? 1 : (size + chunk - 1) / chunk;
}

/* Which chunk of its message a header describes, if it is cut as the sender cuts (chunk k
 * at k * chunk, `chunk` bytes long but the last); UINT64_MAX otherwise. */
static inline uint64_t lg_chunk_index(const struct lg_chunk_hdr *h, uint64_t chunk)
{
    if (chunk == 0 || h->offset % chunk || (h->offset >= h->total && h->total))
        return UINT64_MAX;
    uint64_t rest = h->total - h->offset;
    return h->len == (rest < chunk ? rest : chunk) ? h->offset / chunk : UINT64_MAX;
}

/* ---- sequence window ------------------------------------------------------------------ */
/* Messages complete out of order (different streams); the cumulative count that an ack
 * carries ("all messages below `base` are placed") advances over a bitmap of the next 64. */
#define LG_WINDOW 64
struct lg_seqwin {
    uint64_t base; /* every seq < base is done */
    uint64_t bits; /* bit i: base + i is done */
};
/* Marks seq done. Returns 1 if base advanced, 0 if not, -1 if seq is outside the window or
 * already done (a protocol error: duplicate or far-future completion). */
int lg_seqwin_mark(struct lg_seqwin *w, uint64_t seq);

#endif
