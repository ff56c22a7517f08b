/* On-the-wire formats of the TCP transport: the hello that opens every socket, control
 * frames (acks), chunk headers on data streams, and the sequence window. All fields are
 * little-endian except IPv4 addresses and ports, which stay in network order. Encoders and
 * decoders are pure functions (tests/test_wire.c). */
#ifndef LG_WIRE_H
#define LG_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define LG_WIRE_VERSION 1

/* ---- hello: first bytes the connector writes on each socket -------------------------- */
#define LG_HELLO_MAGIC 0x4548474cu /* "LGHE" */
#define LG_HELLO_SIZE 48
#define LG_MAX_STREAMS 16
#define LG_NPATHS 2 /* primary, backup */

struct lg_hello {
    uint8_t path;        /* 0 primary, 1 backup */
    uint8_t stream;      /* 0 = control channel, 1..nstreams = data streams */
    uint8_t nstreams;    /* data streams per path */
    uint8_t paths_mask;  /* paths the connection has (bit p); authoritative on path 0 ctrl */
    uint32_t chunk_size; /* largest chunk payload the sender will use */
    uint64_t listen_id;  /* from the handle: which listener this is for */
    uint64_t conn_nonce; /* connector's id: groups the sockets of one connection */
};

void lg_hello_encode(uint8_t out[LG_HELLO_SIZE], const struct lg_hello *h);
/* 0, or -1 for a bad magic/version/field (garbage or a stranger on our port). */
int lg_hello_decode(const uint8_t in[LG_HELLO_SIZE], struct lg_hello *h);

/* ---- control frames -------------------------------------------------------------------- */
#define LG_CTRL_SIZE 16
enum lg_ctrl_type {
    LG_CTRL_ACK = 1, /* value = number of messages placed in posted buffers (cumulative) */
    LG_CTRL_BYE = 2, /* the peer is closing this connection on purpose: EOF follows */
    LG_CTRL_TYPE_MAX
};
struct lg_ctrl {
    uint8_t type;
    uint8_t flags;
    uint32_t epoch; /* path epoch, for failover fencing (issue 6); 0 for now */
    uint64_t value;
};
void lg_ctrl_encode(uint8_t out[LG_CTRL_SIZE], const struct lg_ctrl *c);
int lg_ctrl_decode(const uint8_t in[LG_CTRL_SIZE], struct lg_ctrl *c);

/* ---- chunk header: precedes every chunk on a data stream -------------------------------- */
#define LG_CHUNK_MAGIC 0x4b43u /* "CK" */
#define LG_CHUNK_HDR_SIZE 40
struct lg_chunk_hdr {
    uint16_t epoch; /* low bits of the path epoch (issue 6) */
    uint32_t len;   /* payload bytes following this header */
    uint64_t seq;   /* message sequence number on the connection */
    uint64_t offset;
    uint64_t total; /* message size */
    uint32_t tag;
};
void lg_chunk_encode(uint8_t out[LG_CHUNK_HDR_SIZE], const struct lg_chunk_hdr *c);
/* Checks magic and internal consistency (offset + len <= total, len <= max_len). */
int lg_chunk_decode(const uint8_t in[LG_CHUNK_HDR_SIZE], uint32_t max_len, struct lg_chunk_hdr *c);

/* Chunking of a message: a zero-byte message is one empty chunk, so every message has at
 * least one header on the wire. */
static inline uint64_t lg_chunk_count(uint64_t size, uint64_t chunk)
{
    return size == 0 ? 1 : (size + chunk - 1) / chunk;
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
