/* Posting: isend and irecv take the next sequence numbers of the connection's window
 * (conn.h) and hand them to the transport (transport.h). */
#include "proto/proto.h"

#include <stdint.h>

#include "daemon/health.h"
#include "proto/conn.h"
#include "proto/sendmatch.h"
#include "proto/window.h"
#include "runtime/log.h"
#include "runtime/util.h"
#include "runtime/wake.h"

ncclResult_t lg_conn_isend(struct lg_conn *c, void *data, size_t size, int tag,
                           struct lg_inner_mr *imr, void **request)
{
    if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE)) {
        *request = &c->failed_req; /* test() reports the error (conn.h) */
        return ncclSuccess;
    }
    lg_monitor_health_poll();
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->next_seq;
    struct lg_req *r = &c->reqs[seq % LG_WINDOW];
    if (!lg_send_slot_free(c, r)) {
        int kept = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == LG_REQ_KEPT;
        pthread_mutex_unlock(&c->mu);
        if (kept)
            lg_send_ask_ack(c); /* the window is full of sends that only wait for their ack */
        *request = NULL; /* window full: NCCL retries */
        return ncclSuccess;
    }
    struct lg_ctrl ask;
    if (!lg_match_admit(c, seq, tag, &ask)) {
        pthread_mutex_unlock(&c->mu);
        if (ask.type)
            lg_match_send(c, &ask);
        *request = NULL; /* no posted buffer takes its tag yet (sendmatch.h): NCCL retries */
        return ncclSuccess;
    }
    r->seq = seq;
    r->data = data;
    r->size = size;
    r->tag = tag;
    lg_send_keep(c, r, data, size, imr);
    __atomic_store_n(&r->writers, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->state, LG_REQ_POSTED, __ATOMIC_RELEASE);
    c->next_seq = seq + 1;
    __atomic_store_n(&c->posted, seq + 1, __ATOMIC_RELEASE);
    uint32_t wake = c->tr->send_queued && c->hold == LG_HOLD_NONE
                        ? c->tr->send_queued(c, seq, size) : 0;
    pthread_mutex_unlock(&c->mu);
    *request = r;
    c->tr->posted(c, r, &imr, wake);
    return ncclSuccess;
}

ncclResult_t lg_conn_irecv(struct lg_conn *c, int n, void **data, size_t *sizes, int *tags,
                           struct lg_inner_mr **imrs, void **request)
{
    if (n < 1 || n > LG_MAX_RECVS) {
        LG_WARN("irecv with %d buffers: at most %d can be grouped", n, LG_MAX_RECVS);
        return ncclInternalError;
    }
    if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE)) {
        *request = &c->failed_req; /* test() reports the error (conn.h) */
        return ncclSuccess;
    }
    lg_monitor_health_poll();
    /* NCCL presets *request to this marker for receives it can complete by itself (LL);
     * completing them normally is always allowed. */
    int optional = *request == (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
    size_t maxcap = 0;
    for (int i = 0; i < n; i++)
        maxcap = LG_MAX(maxcap, sizes[i]);
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->next_seq;
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&c->reqs[(seq + (uint64_t)i) % LG_WINDOW].state, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&c->mu);
            *request = NULL; /* the window has no room for the group: NCCL retries */
            return ncclSuccess;
        }
    struct lg_req *head = &c->reqs[seq % LG_WINDOW];
    for (int i = 0; i < n; i++) {
        struct lg_req *r = &c->reqs[(seq + (uint64_t)i) % LG_WINDOW];
        if (c->tr->recv_prepare(c, r, maxcap) != 0) {
            pthread_mutex_unlock(&c->mu);
            LG_WARN("recv conn %016llx: no memory to track a receive of %zu bytes",
                    (unsigned long long)c->nonce, maxcap);
            return ncclSystemError;
        }
        head->sub[i] = (struct lg_subrecv){.buf = data[i], .cap = sizes[i],
                                           .tag = tags ? tags[i] : 0};
        r->seq = seq + (uint64_t)i;
        r->g_head = seq;
        r->g_n = i ? 0 : n;
        r->g_tag_known = 0;
        /* A transport that matches tags itself takes the group's messages in its order;
         * otherwise the receive path binds each message by tag across the posted groups
         * (conn.h, "Grouped receives"). */
        int bound = c->tr->matches_tags;
        r->b_head = seq;
        __atomic_store_n(&r->g_sub, bound ? i : -1, __ATOMIC_RELAXED);
        r->buf = bound ? data[i] : NULL;
        r->cap = bound ? sizes[i] : 0;
        head->sub[i].bound = bound;
        r->tag = head->sub[i].tag;
        r->optional = optional;
        __atomic_store_n(&r->placed, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&r->chunks, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&r->total, LG_TOTAL_UNKNOWN, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < n; i++)
        __atomic_store_n(&c->reqs[(seq + (uint64_t)i) % LG_WINDOW].state, LG_REQ_POSTED,
                         __ATOMIC_RELEASE);
    c->next_seq = seq + (uint64_t)n;
    __atomic_store_n(&c->posted, seq + (uint64_t)n, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    *request = head;
    c->tr->posted(c, head, imrs, 0);
    lg_match_posted(c, seq); /* a sender whose tags vary learns of the group */
    return ncclSuccess;
}

