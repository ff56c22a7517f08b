/* Resynchronisation accounting and epochs: pure functions over request slots and counters
 * (tests/test_failover.c). */
#include "proto/resync.h"

#include "proto/conn.h"

uint32_t lg_epoch_next(uint32_t committed, uint32_t seen, uint32_t proposed)
{
    uint32_t e = committed;
    if (seen > e)
        e = seen;
    if (proposed > e)
        e = proposed;
    /* The cap re-proposes the same epoch rather than one the receiver must refuse. */
    uint32_t cap = committed <= LG_EPOCH_LIMIT - LG_EPOCH_MAX_STEP ? committed + LG_EPOCH_MAX_STEP
                                                                   : LG_EPOCH_LIMIT;
    return e < cap ? e + 1 : cap;
}

enum lg_chunk_verdict lg_resync_chunk_verdict(uint16_t hdr_epoch, uint32_t epoch, uint64_t seq,
                                              uint64_t slot_seq, uint32_t slot_state)
{
    if (!lg_epoch_matches(hdr_epoch, epoch))
        return LG_CHUNK_STALE;
    /* The slot's latest post has a seq >= `seq` (seq is posted and maps to this slot). */
    if (slot_state == 0 || (slot_state & LG_REQ_DONE) || slot_seq > seq)
        return LG_CHUNK_DUP; /* complete (and maybe consumed and reposted) */
    if (slot_seq < seq || !(slot_state & LG_REQ_POSTED))
        return LG_CHUNK_BAD;
    return LG_CHUNK_PLACE;
}

int lg_resync_rx_reset(struct lg_req *reqs, uint64_t base, uint64_t posted)
{
    int n = 0;
    for (uint64_t seq = base; seq < posted && seq < base + LG_WINDOW; seq++) {
        struct lg_req *r = &reqs[seq % LG_WINDOW];
        uint32_t state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
        if (r->seq != seq || !(state & LG_REQ_POSTED) || (state & LG_REQ_DONE))
            continue;
        if (__atomic_load_n(&r->placed, __ATOMIC_RELAXED) ||
            __atomic_load_n(&r->total, __ATOMIC_RELAXED) != UINT64_MAX)
            n++;
        __atomic_store_n(&r->placed, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&r->chunks, 0, __ATOMIC_RELAXED);
        for (uint64_t w = 0; r->cover && w < r->cover_words; w++)
            __atomic_store_n(&r->cover[w], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&r->total, UINT64_MAX, __ATOMIC_RELAXED);
    }
    return n;
}

uint64_t lg_resync_tx_rewind(uint64_t *cursor_seq, int mid, uint64_t *acked, uint64_t n)
{
    /* Messages [n, cursor) went out, wholly or partly (the one being cut counts). */
    uint64_t sent = *cursor_seq + (mid ? 1 : 0);
    uint64_t replay = sent > n ? sent - n : 0;
    /* Acks are read concurrently (a CAS to the maximum): never move acked backwards. */
    uint64_t a = __atomic_load_n(acked, __ATOMIC_ACQUIRE);
    while (n > a && !__atomic_compare_exchange_n(acked, &a, n, 0, __ATOMIC_ACQ_REL,
                                                 __ATOMIC_ACQUIRE))
        ;
    *cursor_seq = n;
    return replay;
}
