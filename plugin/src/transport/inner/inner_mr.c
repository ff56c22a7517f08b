/* Wrap mode: memory registrations on both paths' inner comms (see inner_mr.h). */
#include "transport/inner/inner_mr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"

ncclResult_t lg_inner_mr_add(struct lg_inner *in, struct lg_inner_mr *mr, int p, void *comm)
{
    if (!mr || mr->magic != LG_INNER_MR_MAGIC || p < 0 || p >= LG_INNER_NPATHS || mr->comm[p])
        return lg_inner_failed(in, "regMr (bad linkguard mhandle or path)", ncclInternalError);
    ncclResult_t rc =
        mr->dmabuf_fd >= 0
            ? in->ops->regMrDmaBuf(in, comm, mr->data, mr->size, mr->type, mr->offset,
                                   mr->dmabuf_fd, &mr->mh[p])
            : in->ops->regMr(in, comm, mr->data, mr->size, mr->type, &mr->mh[p]);
    if (rc == ncclSuccess)
        mr->comm[p] = comm;
    else
        mr->mh[p] = NULL;
    return rc;
}

ncclResult_t lg_inner_mr_drop(struct lg_inner *in, struct lg_inner_mr *mr, int p)
{
    if (!mr || mr->magic != LG_INNER_MR_MAGIC || p < 0 || p >= LG_INNER_NPATHS)
        return lg_inner_failed(in, "deregMr (bad linkguard mhandle or path)", ncclInternalError);
    if (!mr->comm[p])
        return ncclSuccess;
    ncclResult_t rc = in->ops->deregMr(in, mr->comm[p], mr->mh[p]);
    mr->comm[p] = NULL; /* even on error: the registration is not ours to retry */
    mr->mh[p] = NULL;
    return rc;
}

ncclResult_t lg_inner_mr_dereg(struct lg_inner *in, struct lg_inner_mr *mr)
{
    ncclResult_t first = ncclSuccess;
    if (!mr || mr->magic != LG_INNER_MR_MAGIC)
        return lg_inner_failed(in, "deregMr (not a linkguard mhandle)", ncclInternalError);
    for (int p = 0; p < LG_INNER_NPATHS; p++) {
        ncclResult_t rc = lg_inner_mr_drop(in, mr, p);
        if (first == ncclSuccess)
            first = rc;
    }
    if (mr->dmabuf_fd >= 0)
        close(mr->dmabuf_fd);
    mr->magic = 0;
    free(mr);
    return first;
}

static ncclResult_t reg_all(struct lg_inner *in, void *const comms[LG_INNER_NPATHS],
                            struct lg_inner_mr *mr, struct lg_inner_mr **out)
{
    for (int p = 0; p < LG_INNER_NPATHS; p++) {
        if (!comms[p])
            continue;
        ncclResult_t rc = lg_inner_mr_add(in, mr, p, comms[p]);
        if (rc != ncclSuccess) {
            lg_inner_mr_dereg(in, mr); /* all or nothing */
            return rc;
        }
    }
    *out = mr;
    return ncclSuccess;
}

static struct lg_inner_mr *mr_new(void *data, size_t size, int type)
{
    struct lg_inner_mr *mr = calloc(1, sizeof(*mr));
    if (mr) {
        mr->magic = LG_INNER_MR_MAGIC;
        mr->data = data;
        mr->size = size;
        mr->type = type;
        mr->dmabuf_fd = -1;
    }
    return mr;
}

ncclResult_t lg_inner_mr_reg(struct lg_inner *in, void *const comms[LG_INNER_NPATHS],
                             void *data, size_t size, int type, struct lg_inner_mr **out)
{
    struct lg_inner_mr *mr = mr_new(data, size, type);
    *out = NULL;
    if (!mr)
        return ncclSystemError;
    return reg_all(in, comms, mr, out);
}

ncclResult_t lg_inner_mr_reg_dmabuf(struct lg_inner *in, void *const comms[LG_INNER_NPATHS],
                                    void *data, size_t size, int type, uint64_t offset, int fd,
                                    struct lg_inner_mr **out)
{
    struct lg_inner_mr *mr = mr_new(data, size, type);
    *out = NULL;
    if (!mr)
        return ncclSystemError;
    mr->offset = offset;
    mr->dmabuf_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mr->dmabuf_fd < 0) {
        LG_WARN("regMrDmaBuf: cannot keep the DMA-BUF fd %d for the backup path: %s", fd,
                strerror(errno));
        free(mr);
        return ncclSystemError;
    }
    return reg_all(in, comms, mr, out);
}
