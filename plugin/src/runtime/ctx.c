/* NCCL's per-communicator contexts (see ctx.h). */
#include "runtime/ctx.h"

#include <stdlib.h>

#include "runtime/log.h"

#define LG_CTX_MAGIC 0x4c474358u /* "LGCX" */

struct lg_ctx {
    uint32_t magic;
    uint64_t comm_id;
    int traffic_class;
    int refs; /* NCCL's (until finalize), and one per listen comm and connection (atomic) */
    int finalized; /* NCCL's reference is gone (atomic) */
    struct lg_inner_ctx *inner; /* wrap mode: the inner plugin's context for this comm */
    void (*close_inner)(struct lg_inner_ctx *inner); /* the transport's ctx_close */
};

ncclResult_t lg_ctx_new(uint64_t comm_id, int traffic_class, struct lg_inner_ctx *inner,
                        void (*close_inner)(struct lg_inner_ctx *inner), struct lg_ctx **ctx)
{
    struct lg_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        if (inner)
            close_inner(inner);
        return ncclSystemError;
    }
    c->inner = inner;
    c->close_inner = close_inner;
    c->magic = LG_CTX_MAGIC;
    c->comm_id = comm_id;
    c->traffic_class = traffic_class;
    c->refs = 1;
    *ctx = c;
    return ncclSuccess;
}

int lg_ctx_hold(void *ctx, const char *call, struct lg_ctx **out)
{
    struct lg_ctx *c = ctx;
    *out = NULL;
    if (!c)
        return 0;
    if (c->magic != LG_CTX_MAGIC || __atomic_load_n(&c->finalized, __ATOMIC_ACQUIRE)) {
        LG_WARN("%s: not a linkguard context (or one already finalized)", call);
        return -1;
    }
    *out = lg_ctx_ref(c);
    return 0;
}

struct lg_ctx *lg_ctx_ref(struct lg_ctx *c)
{
    if (c)
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    return c;
}

void lg_ctx_release(struct lg_ctx *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    if (c->inner)
        c->close_inner(c->inner);
    c->magic = 0;
    free(c);
}

struct lg_inner_ctx *lg_ctx_inner(const struct lg_ctx *c) { return c ? c->inner : NULL; }

ncclResult_t lg_ctx_free(void *ctx)
{
    struct lg_ctx *c = ctx;
    if (!c || c->magic != LG_CTX_MAGIC || __atomic_exchange_n(&c->finalized, 1, __ATOMIC_ACQ_REL)) {
        LG_WARN("finalize: not a linkguard context (or finalized twice)");
        return ncclInternalError;
    }
    lg_ctx_release(c);
    return ncclSuccess;
}

