/* v11+ per-communicator contexts: what NCCL's init returns and finalize ends (core.h's
 * lg_core_ctx_new / lg_core_ctx_free). Listen comms and connections made with one hold a
 * reference, so the inner context it carries in wrap mode (the inner plugin's own init with
 * the communicator's commId and trafficClass) lives until the last of them is closed,
 * whatever the order NCCL closes things in. A NULL context (NCCL before 2.28, tests) is the
 * process's: the inner context wrap mode was started with. */
#ifndef LG_CTX_H
#define LG_CTX_H

#include <stdint.h>

#include "nccl_net_abi.h"

struct lg_ctx;
struct lg_inner_ctx;

/* A context holding `inner` (NULL: none; the transport's ctx_open), with NCCL's reference;
 * `close_inner` (its ctx_close) ends inner with the last reference, or at once on failure. */
ncclResult_t lg_ctx_new(uint64_t comm_id, int traffic_class, struct lg_inner_ctx *inner,
                        void (*close_inner)(struct lg_inner_ctx *inner), struct lg_ctx **out);
ncclResult_t lg_ctx_free(void *ctx); /* NCCL's finalize: drops NCCL's reference */
/* Checks a context from NCCL and takes a reference (NULL stays NULL); 0, or -1 (WARNed). */
int lg_ctx_hold(void *ctx, const char *call, struct lg_ctx **out);
struct lg_ctx *lg_ctx_ref(struct lg_ctx *ctx); /* one more reference (NULL: none); returns ctx */
void lg_ctx_release(struct lg_ctx *ctx);
struct lg_inner_ctx *lg_ctx_inner(const struct lg_ctx *ctx); /* NULL: the process's */

#endif
