/* A fake path transport (transport.h), the third beside TCP and the inner plugin, for testing the failover protocol itself, through its
 * real code: whole messages (no chunks), copied at post time into an in-process "wire" per
 * path instance (connection nonce, slot, generation), each tagged with the sender's committed
 * epoch, and placed by the receiver, in order, from its committed path's wire; a message of
 * another epoch is dropped, as TCP's chunks are. Everything else is real: the control channels
 * (heartbeats, SWITCH/RESYNC, BYE), the monitor, rebuilds through the acceptor.
 *
 * Faults (any thread): lg_fake_break(slot) breaks every live path in a slot: what is in
 * flight on it is lost, and the next look at it (either end's pump, the monitor's watch) fails
 * the path, as a dead NIC does. The protocol must fail over, replay from NCCL's buffers and
 * rebuild; lg_fake_hold keeps the receivers off the wires meanwhile (so that a break is sure
 * to lose messages); lg_fake_counts says what the fake saw. Grouped receives take one message per
 * buffer in order (no tag matching): the tests post single receives. */
#ifndef LG_FAKE_H
#define LG_FAKE_H

#include <stdint.h>

#include "transport/transport.h"

struct lg_fake_counts {
    uint64_t pushed, placed; /* messages put on a wire, taken off into a posted receive */
    uint64_t stale, lost;    /* dropped for their epoch or as already placed; lost to a break */
    uint64_t breaks, fails;  /* lg_fake_break calls; paths that failed on a broken wire */
};

/* The fake's ops table, for lg_transport_test_force; getProperties, contexts and the READY of
 * a rebuilt path are `base`'s (nothing of the fake's own to say there). */
const struct lg_transport *lg_fake_transport(const struct lg_transport *base);
void lg_fake_break(int slot);
void lg_fake_hold(int on);
/* 1 while a path of c still counts as up on a broken wire: a break nobody has looked at yet
 * (the pumps and the monitor's watch fail it at their next look). */
int lg_fake_unseen_break(struct lg_conn *c);
struct lg_fake_counts lg_fake_counts(void);
/* Every wire freed (no connection may be left). */
void lg_fake_reset(void);

#endif
