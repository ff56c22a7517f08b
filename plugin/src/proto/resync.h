/* The pure parts of the failover protocol (conn.h): epochs and the resync accounting
 * (resync.c), tested from tables in tests/test_failover.c. */
#ifndef LG_RESYNC_H
#define LG_RESYNC_H

#include <stdint.h>

#include "proto/upcall.h" /* the chunk verdict, which the transports apply */

struct lg_req;

/* ---- epochs ------------------------------------------------------------------------------- */

/* How far one epoch may lie above the committed one. An honest sender proposes one above the
 * newest epoch either side has used, and once more after each LINKGUARD_SWITCH_TIMEOUT_MS
 * without a RESYNC, so it stays within this step for minutes even at the shortest timeout
 * (and never proposes beyond it); below 2^16 so that the chunk headers' 16 bits cannot alias
 * an epoch within one step. An epoch from the peer beyond the step, or beyond LG_EPOCH_LIMIT
 * (no room left to move again), is a lie: without this one forged frame of 0xffffffff would
 * freeze the connection's epochs for good. */
#define LG_EPOCH_MAX_STEP (1u << 15)
#define LG_EPOCH_LIMIT (UINT32_MAX - LG_EPOCH_MAX_STEP)

/* The epoch a new SWITCH proposes: above everything either side has used, at most
 * LG_EPOCH_MAX_STEP above the committed one (`seen` and `proposed` are never below it). */
uint32_t lg_epoch_next(uint32_t committed, uint32_t seen, uint32_t proposed);
/* A SWITCH (receiver) or RESYNC (sender) carrying `got` is taken only if it is newer than
 * the committed epoch: stale and duplicate frames (a flap during a switch) are ignored. */
static inline int lg_epoch_newer(uint32_t got, uint32_t committed) { return got > committed; }
/* A newer epoch an honest peer can send: within one step of ours, below the limit. */
static inline int lg_epoch_plausible(uint32_t got, uint32_t committed)
{
    return got > committed && got - committed <= LG_EPOCH_MAX_STEP && got <= LG_EPOCH_LIMIT;
}

/* ---- resync accounting ---------------------------------------------------------------------- */


/* Receiver, at a commit (under conn->mu, no reader placing): forgets the bytes of every
 * posted message in [base, posted) that is not complete, so that the replay fills it from
 * the start. Returns how many were reset. */
int lg_resync_rx_reset(struct lg_req *reqs, uint64_t base, uint64_t posted);

/* Sender: an ACK of `n` messages is possible only for messages wholly handed to the
 * transport (`sent`: the chunk cursor's message; in wrap mode, posted to the inner plugin). */
static inline int lg_ack_plausible(uint64_t n, uint64_t sent) { return n <= sent; }
/* Sender, before a commit (under conn->mu): a RESYNC saying the receiver holds every message
 * below `n` is possible only if n is at least what it acknowledged before (`acked`) and at most
 * what was sent. 0, or -1 (below acked: replaying would read finished buffers) or -2. */
static inline int lg_resync_check(uint64_t n, uint64_t acked, uint64_t sent)
{
    return n < acked ? -1 : n > sent ? -2 : 0;
}

/* Sender, at a commit (under conn->mu): the receiver has placed every message below `n`:
 * raise `acked` to n and rewind the cursor to message n (`mid`: the cursor was inside the
 * message at *cursor_seq, which went out partly; the transport's own cursor inside a message
 * was reset to its start). Returns how many messages will be sent again (partly or wholly
 * sent before). */
uint64_t lg_resync_tx_rewind(uint64_t *cursor_seq, int mid, uint64_t *acked, uint64_t n);

#endif
