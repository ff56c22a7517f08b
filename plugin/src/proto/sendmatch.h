/* Matching at the sender, for a connection whose sends' tags vary (docs/failover.md "Grouped
 * receives"; issue 25). NCCL's IB transport matches each isend against the receiver's oldest
 * posted group that still has a buffer to fill, and returns a NULL request for a send that
 * cannot be placed yet: the caller posts other sends meanwhile (aws-ofi-nccl's eager_multirecv
 * runs a send of the next group ahead of the last one of the current group, to a receiver that
 * posts the next group only when the current one is complete). linkguard's receiver binds each
 * message in seq order to the earliest posted free buffer with its tag (tcp_recv.c), and its
 * sender streams eagerly: such a send would wait for a receive that waits for the send behind
 * it. So:
 *  - While every send of a connection has had the same tag (NCCL's own use: one tag per peer),
 *    the sender streams eagerly as before, at no cost.
 *  - At the first send with another tag it asks the receiver (TAGS(gen)) and returns NULL
 *    until the answer is in. The receiver answers at once (TAGS(lo, gen, b): the head of its
 *    oldest group with a free buffer and how many messages it has bound; then a GROUP frame
 *    per buffer of each posted group from lo: tag, bound or not), and from then on announces
 *    each group it posts.
 *  - The sender keeps a mirror of those groups and binds the messages there by the receiver's
 *    own rule (tcp_recv.c), which depends only on the order of the messages and of the
 *    groups: first those it had sent that the receiver had not bound yet, then each new send.
 *    A send with no free buffer of its tag in the groups it knows, or whose seq no known group
 *    covers yet, gets NULL. The receiver then binds each message where the mirror did.
 *  - After a switch (the epoch moved) frames may have been lost with the old path, and a
 *    question that came before the receiver's accept attached the connection was dropped
 *    there: the next blocked send after a switch, or a heartbeat period after the question,
 *    asks again (gen + 1) and the mirror starts over.
 * A transport that matches tags itself (wrap mode: the inner plugin groups its way) has none
 * of this: its connections stream as before. */
#ifndef LG_SENDMATCH_H
#define LG_SENDMATCH_H

#include <stdint.h>

#include "session/wire.h"

struct lg_conn;
struct lg_path;

/* Sender, isend under mu: 1 when the message (seq, tag) may go now, 0 when it must wait (the
 * caller returns a NULL request); *ask is then a frame to send once mu is released (type 0:
 * none). Also 1, eagerly, when the mirror cannot be allocated (WARNed once): what the
 * connection did before matching existed. */
int lg_match_admit(struct lg_conn *c, uint64_t seq, int tag, struct lg_ctrl *ask);
/* Sender: sends `ask` (lg_match_admit's) on the active path; mu not held. */
void lg_match_send(struct lg_conn *c, const struct lg_ctrl *ask);
/* Sender: the receiver's TAGS answer or GROUP frame. 0, or -1 for a lie (logged; the caller
 * fails the path). */
int lg_match_on_frame(struct lg_path *p, const struct lg_ctrl *f);
/* Receiver: the sender's TAGS question, answered at once. */
void lg_match_on_ask(struct lg_path *p, const struct lg_ctrl *f);
/* Receiver, irecv after mu was released: announces the group posted at `head` when the
 * sender asked for announcements. */
void lg_match_posted(struct lg_conn *c, uint64_t head);
/* Both: frees the state (lg_conn_free). */
void lg_match_free(struct lg_conn *c);

/* ---- pure, for the tests ------------------------------------------------------------------ */
/* GROUP frame flags: buffer i of a group of n, bound or not. */
static inline uint8_t lg_match_flags(int i, int n, int bound)
{
    return (uint8_t)(i | (n - 1) << 3 | (bound ? 0x40 : 0));
}
#define LG_MATCH_GEN_SHIFT 48 /* value = seq | gen << 48 (a seq never reaches 2^48) */

#endif
