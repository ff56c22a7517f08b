/* Wrap mode: one linkguard memory registration over both paths' inner comms.
 *
 * NCCL registers a buffer once per comm and never again after a failover (reference §3.4),
 * so the buffer is registered with the primary's and the backup's inner comm up front, and
 * the mhandle remembers how to register it again on a path built later (reintegration).
 * A DMA-BUF registration keeps a dup of NCCL's fd for that: NCCL closes its own right after
 * regMrDmaBuf returns. Before an inner comm is closed, its registrations are dropped
 * (lg_inner_mr_drop): the inner owns them and must not outlive its comm. */
#ifndef LG_INNER_MR_H
#define LG_INNER_MR_H

#include <stddef.h>
#include <stdint.h>

#include "transport/inner/inner.h"

#define LG_INNER_NPATHS 2 /* [0] primary, [1] backup */
#define LG_INNER_MR_MAGIC 0x4c47494du /* "LGIM" */

struct lg_inner_mr {
    uint32_t magic;
    void *data;
    size_t size;
    int type;       /* NCCL_PTR_* */
    int dmabuf_fd;  /* our dup of NCCL's fd, or -1 (plain regMr) */
    uint64_t offset;
    void *comm[LG_INNER_NPATHS]; /* the inner comm mh[p] belongs to; NULL: not registered */
    void *mh[LG_INNER_NPATHS];
    struct lg_inner_mr *next;    /* the owning connection's list (phase 2) */
};

/* Registers on every non-NULL comms[p]; all or nothing (what succeeded is undone). */
ncclResult_t lg_inner_mr_reg(struct lg_inner *in, void *const comms[LG_INNER_NPATHS],
                             void *data, size_t size, int type, struct lg_inner_mr **out);
ncclResult_t lg_inner_mr_reg_dmabuf(struct lg_inner *in, void *const comms[LG_INNER_NPATHS],
                                    void *data, size_t size, int type, uint64_t offset, int fd,
                                    struct lg_inner_mr **out);
/* Registers an existing mhandle on path p's (new) inner comm. */
ncclResult_t lg_inner_mr_add(struct lg_inner *in, struct lg_inner_mr *mr, int p, void *comm);
/* Deregisters from path p (before its inner comm is closed); no-op if not registered. */
ncclResult_t lg_inner_mr_drop(struct lg_inner *in, struct lg_inner_mr *mr, int p);
/* Deregisters from every path and frees; returns the first error. */
ncclResult_t lg_inner_mr_dereg(struct lg_inner *in, struct lg_inner_mr *mr);

/* The inner mhandle for path p (what isend/irecv on that path's comm get). */
static inline void *lg_inner_mr_handle(const struct lg_inner_mr *mr, int p)
{
    return mr ? mr->mh[p] : NULL;
}

#endif
