/* The version-neutral plugin core: what every exported ncclNet_vN table calls. The export
 * layers (src/export/) only adapt argument types. */
#ifndef LG_CORE_H
#define LG_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "devices.h"
#include "nccl_net_abi.h"

enum lg_flavor {
    LG_FLAVOR_LINKGUARD = 0, /* devices = NIC pairs, primary + backup paths */
    LG_FLAVOR_TCP = 1,       /* standalone transport: one NIC per device, no backup */
};

#define LG_MAX_MSG_BYTES (1ull << 30) /* maxP2pBytes: test() reports sizes as int */
#define LG_MAX_COMMS 65536

/* Process-wide part, refcounted: devices, parameters, progress threads. */
ncclResult_t lg_core_init(enum lg_flavor flavor, ncclDebugLogger_t logger);
ncclResult_t lg_core_finalize(void);
/* Live objects (listen comms, connections) also hold the process-wide part. */
void lg_core_ref(int delta);

/* v11+ per-communicator context: what NCCL's init returns and finalize ends. Listen comms
 * and connections made with it hold a reference, so in wrap mode its inner context (the inner
 * plugin's own init with the communicator's commId and trafficClass) lives until the last of
 * them is closed, whatever the order NCCL closes things in. A NULL context (NCCL before 2.28,
 * tests) is the process's: the inner context wrap mode was started with. */
struct lg_ctx;
ncclResult_t lg_core_ctx_new(uint64_t comm_id, int traffic_class, void **ctx);
ncclResult_t lg_core_ctx_free(void *ctx); /* NCCL's finalize: drops NCCL's reference */
/* Checks a context from NCCL and takes a reference (NULL stays NULL); 0, or -1 (WARNed). */
int lg_ctx_hold(void *ctx, const char *call, struct lg_ctx **out);
struct lg_ctx *lg_ctx_ref(struct lg_ctx *ctx); /* one more reference (NULL: none); returns ctx */
void lg_ctx_release(struct lg_ctx *ctx);
struct lg_inner_ctx *lg_ctx_inner(const struct lg_ctx *ctx); /* NULL: the process's */

const struct lg_device *lg_core_device(int dev);
ncclResult_t lg_core_devices(int *ndev);
/* Properties in the newest layout; adapters copy out older ones. */
ncclResult_t lg_core_get_properties(int dev, ncclNetProperties_v12_t *props);

ncclResult_t lg_core_listen_ctx(void *ctx, int dev, void *handle, void **listen_comm);
ncclResult_t lg_core_connect_ctx(void *ctx, int dev, void *handle, void **send_comm);
static inline ncclResult_t lg_core_listen(int dev, void *handle, void **listen_comm)
{
    return lg_core_listen_ctx(NULL, dev, handle, listen_comm);
}
static inline ncclResult_t lg_core_connect(int dev, void *handle, void **send_comm)
{
    return lg_core_connect_ctx(NULL, dev, handle, send_comm);
}
ncclResult_t lg_core_accept(void *listen_comm, void **recv_comm);
ncclResult_t lg_core_close_listen(void *listen_comm);

ncclResult_t lg_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t lg_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle);
ncclResult_t lg_core_dereg_mr(void *comm, void *mhandle);

ncclResult_t lg_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void **request);
ncclResult_t lg_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **request);
ncclResult_t lg_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                            void **request);
ncclResult_t lg_core_test(void *request, int *done, int *sizes);
ncclResult_t lg_core_close_send(void *send_comm);
ncclResult_t lg_core_close_recv(void *recv_comm);

/* Tests only: use this device table instead of discovering one (takes effect at the next
 * lg_core_init from zero references). */
void lg_core_test_set_devices(const struct lg_device_table *t, enum lg_flavor flavor);

/* Internal: a connection finished connect/accept (starts its tasks, takes a reference). */
struct lg_conn;
int lg_core_conn_ready(struct lg_conn *c);
void lg_connect_abandon_all(void);

#endif
