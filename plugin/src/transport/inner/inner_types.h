/* The inner plugin as linkguard holds it (inner.h): the version-neutral ops table the
 * adapters implement (inner_ops.c) and the loader's state. Types only. */
#ifndef LG_INNER_TYPES_H
#define LG_INNER_TYPES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl_net_abi.h"

#define LG_INNER_MAX_DEVS 64
#define LG_INNER_MIN_VERSION 8
#define LG_INNER_MAX_VERSION 12

struct lg_inner;

/* One init of the inner plugin: per NCCL communicator for v11+, shared for v8..v10. */
struct lg_inner_ctx {
    void *inner;       /* the inner's v11+ context; NULL before v11 */
    uint64_t comm_id;
    int traffic_class; /* v10 passes it to connect, v11+ to init */
};

/* The version-neutral table. Sizes are size_t; phandles (profiler) go to v10+ and are
 * dropped before; device handles are HOST-only (pointer-to-NULL, as NCCL passes them). */
struct lg_inner_ops {
    ncclResult_t (*init)(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                         struct lg_inner_ctx **ctx);
    ncclResult_t (*finalize)(struct lg_inner *in, struct lg_inner_ctx *ctx);
    ncclResult_t (*devices)(struct lg_inner *in, int *ndev);
    ncclResult_t (*getProperties)(struct lg_inner *in, int dev, ncclNetProperties_v12_t *props);
    ncclResult_t (*listen)(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev, void *handle,
                           void **listen_comm);
    ncclResult_t (*connect)(struct lg_inner *in, struct lg_inner_ctx *ctx, int dev,
                            void *handle, void **send_comm);
    ncclResult_t (*accept)(struct lg_inner *in, void *listen_comm, void **recv_comm);
    ncclResult_t (*regMr)(struct lg_inner *in, void *comm, void *data, size_t size, int type,
                          void **mhandle);
    ncclResult_t (*regMrDmaBuf)(struct lg_inner *in, void *comm, void *data, size_t size,
                                int type, uint64_t offset, int fd, void **mhandle);
    ncclResult_t (*deregMr)(struct lg_inner *in, void *comm, void *mhandle);
    ncclResult_t (*isend)(struct lg_inner *in, void *send_comm, void *data, size_t size,
                          int tag, void *mhandle, void *phandle, void **request);
    ncclResult_t (*irecv)(struct lg_inner *in, void *recv_comm, int n, void **data,
                          size_t *sizes, int *tags, void **mhandles, void **phandles,
                          void **request);
    ncclResult_t (*iflush)(struct lg_inner *in, void *recv_comm, int n, void **data,
                           int *sizes, void **mhandles, void **request);
    ncclResult_t (*test)(struct lg_inner *in, void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(struct lg_inner *in, void *send_comm);
    ncclResult_t (*closeRecv)(struct lg_inner *in, void *recv_comm);
    ncclResult_t (*closeListen)(struct lg_inner *in, void *listen_comm);
};

/* An inner device as started: properties in the v12 layout; name and pciPath point at our
 * own copies; pci_real is the resolved pciPath (NULL if it does not resolve). */
struct lg_inner_dev {
    ncclNetProperties_v12_t props;
    char *pci_real;
};

struct lg_inner {
    const struct lg_inner_ops *ops;
    int version;       /* the ncclNetPlugin_vN in use */
    const void *table; /* the inner's exported table */
    void *dl;
    char lib[256];     /* what was dlopened, for messages */
    char name[64];     /* the table's name (refreshed after init) */
    ncclDebugLogger_t logger;
    ncclProfilerCallback_t prof;
    pthread_mutex_t mu;
    int shared_refs;  /* v8..v10: contexts sharing the one init */
    int inited;       /* init succeeded once: never dlclose (its threads may outlive us) */
    int checked;      /* the table's members were checked after init */
    int ndev;         /* after lg_inner_start */
    struct lg_inner_dev dev[LG_INNER_MAX_DEVS];
};

#endif
