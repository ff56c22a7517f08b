/* Wrap mode (issue 7): another ncclNet plugin, the "inner" plugin, loaded with dlopen
 * (LINKGUARD_INNER) and called through one version-neutral table whatever ncclNetPlugin_vN
 * (v8..v12) it exports. linkguard keeps handles, control, failover and resync; the inner
 * plugin only moves bytes.
 *
 * What the adapters guarantee (reference §1, §3):
 *  - the inner's exported table is read at every call, never copied: some plugins
 *    (nccl-rdma-sharp-plugins) export only {name, init} and fill in the rest during init,
 *    so the other members are checked only after the first successful init;
 *  - v8..v10 init once per process and have no finalize: the first context inits, later
 *    ones share it; v11+ init once per context (one per NCCL communicator) and finalize each;
 *  - properties come back in the v12 layout, older versions filled with NCCL's shim defaults;
 *  - the optional-receive-completion marker in *request goes to v9+ and is stripped for v8;
 *  - every non-success result is WARNed naming the library, the table version and the call.
 * Threads: open/start/close run under the caller's lock (NCCL's init mutex); the ops are as
 * thread-safe as the inner's, and NCCL's thread rules (§3.1) apply to them unchanged. */
#ifndef LG_INNER_H
#define LG_INNER_H

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

/* Opens `spec` (a path if it has a '/' or looks like a soname "*.so*", else a name X for
 * libnccl-net-X.so) with RTLD_NOW|RTLD_LOCAL and picks the newest ncclNetPlugin_v12..v8, or
 * exactly v`version` when version != 0 (LINKGUARD_INNER_VERSION). The logger and profiler
 * callback are handed to the inner's init. WARNs and returns an error on failure. */
ncclResult_t lg_inner_open(const char *spec, int version, ncclDebugLogger_t logger,
                           ncclProfilerCallback_t prof, struct lg_inner **out);
/* Opens LINKGUARD_INNER / LINKGUARD_INNER_VERSION from lg_params (loaded by the caller). */
ncclResult_t lg_inner_open_env(ncclDebugLogger_t logger, ncclProfilerCallback_t prof,
                               struct lg_inner **out);
/* First init: a context, then devices (> 0 or it fails) and every device's properties,
 * cached in in->dev. On failure nothing stays initialised. */
ncclResult_t lg_inner_start(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                            struct lg_inner_ctx **ctx);
/* Frees the loader's state; dlcloses only if the inner was never initialised. */
void lg_inner_close(struct lg_inner *in);

/* One connect attempt. The inner handle (the peer's, received over linkguard's own control
 * socket) stays at this address across every retry: inner plugins keep connect progress in
 * it (§3.2). Keep the struct in heap memory that lives as long as the attempt. */
struct lg_inner_connecting {
    _Alignas(16) char handle[NCCL_NET_HANDLE_MAXSIZE];
    int dev;
    void *comm; /* the send comm once connected */
};

void lg_inner_connecting_init(struct lg_inner_connecting *cg, int dev, const void *handle,
                              size_t len);
/* One non-blocking step: 1 connected (cg->comm), 0 in progress, -1 failed (WARNed). */
int lg_inner_connecting_step(struct lg_inner *in, struct lg_inner_ctx *ctx,
                             struct lg_inner_connecting *cg);

/* Calls on one path of a connection (wrap.c brackets them, per thread): their failures are
 * failed over, so they are logged as INFO instead of WARN. */
void lg_inner_path_calls(int on);
/* Internal (the adapters): WARNs a failed call and returns rc. */
ncclResult_t lg_inner_failed(struct lg_inner *in, const char *call, ncclResult_t rc);
const char *lg_inner_strerror(ncclResult_t rc);
/* The adapter table of one ABI version (NULL: not supported). */
const struct lg_inner_ops *lg_inner_ops_for(int version);
/* Checks, after the first successful init, that the members we call are set. */
int lg_inner_table_ok(struct lg_inner *in);

#endif
