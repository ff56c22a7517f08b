/* Verdicts the plugin reports to the host's daemon: "this NIC's path stalled / is lossy / is
 * slow / is healthy again", one datagram each on the daemon's unix socket
 * (LINKGUARD_VERDICT_SOCKET, daemon_sock.h). The shm file stays one-writer (the daemon); this
 * socket is the only channel from a job to the daemon (the census, census.h, shares it), and
 * it never blocks or fails the job: a report that cannot go out (no daemon, a full queue) is
 * dropped.
 *
 * Datagram, LG_VERDICT_SIZE bytes, little-endian (daemon/linkguardd/verdicts/wire.py decodes
 * it; tests/unit/test_plugin_verdicts.py round-trips this encoder through that decoder):
 *    0 u32 magic "LGVD"          24 u32 for_ms        40 u64 expected_Bps
 *    4 u16 version               28 u32 loss_ppm      48 u64 conn
 *    6 u8  kind (lg_verdict_kind) 32 u64 rate_Bps      56 char peer[48] (NUL-padded)
 *    7 u8  path (0 primary, 1 backup)
 *    8 char nic[16] (NUL-padded netdev name)
 * A number the judge did not measure is 0. The daemon learns who sent it from the kernel
 * (SCM_CREDENTIALS), never from the datagram. */
#ifndef LG_VERDICT_H
#define LG_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#define LG_VERDICT_MAGIC 0x4456474cu /* "LGVD" */
#define LG_VERDICT_VERSION 1
#define LG_VERDICT_SIZE 104
#define LG_VERDICT_NIC_LEN 16
#define LG_VERDICT_PEER_LEN 48
/* 1 s: a stall fails the path at once and its rebuild may stall again within a second; one
 * report per second per (NIC, kind) and process keeps the daemon's verdict fresh (it expires
 * after minutes) at a cost of a few datagrams per second per host, however many connections
 * share the NIC. */
#define LG_VERDICT_INTERVAL_MS 1000

enum lg_verdict_kind {
    LG_VERDICT_HEALTHY = 1, /* the NIC's path works again after one of the verdicts below */
    LG_VERDICT_STALLED = 2, /* progress watchdog: work made no progress while the peer is heard */
    LG_VERDICT_LOSSY = 3,   /* goodput: losing or retransmitting data */
    LG_VERDICT_SLOW = 4,    /* goodput: far below the path's baseline or the NIC's speed */
    LG_VERDICT_KIND_MAX
};

/* What a judge saw; fields it did not measure stay 0 (designated initializers). */
struct lg_verdict {
    const char *nic;       /* netdev of the path judged */
    uint8_t kind;          /* enum lg_verdict_kind */
    uint8_t path;          /* 0 primary, 1 backup */
    uint32_t for_ms;       /* how long the condition lasted when judged */
    uint32_t loss_ppm;     /* share of data lost or retransmitted, parts per million */
    uint64_t rate_Bps;     /* goodput measured, bytes per second */
    uint64_t expected_Bps; /* what the path should do: its healthy baseline or the NIC speed */
    uint64_t conn;         /* connection id (as in the plugin's log lines) */
    const char *peer;      /* the remote end, "a.b.c.d:port"; NULL: unknown */
};

/* Pure: the datagram of `v` (names longer than their field are cut, always NUL-terminated). */
void lg_verdict_encode(uint8_t out[LG_VERDICT_SIZE], const struct lg_verdict *v);

/* Sends `v` to the daemon, at most once per LG_VERDICT_INTERVAL_MS per (NIC, kind) in this
 * process; never blocks, never fails the caller. Returns 1 if a datagram went out, 0 if it
 * was rate-limited, disabled (LINKGUARD_VERDICT_SOCKET empty) or dropped (no daemon, full
 * queue). Thread-safe. */
int lg_verdict_report(const struct lg_verdict *v);
/* The same at a given CLOCK_MONOTONIC time (tests). */
int lg_verdict_report_at(const struct lg_verdict *v, uint64_t now_ns);

/* Tests: forget the rate limits and the socket (the next report re-reads the path). */
void lg_verdict_reset(void);

#endif
