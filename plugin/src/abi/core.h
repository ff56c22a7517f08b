/* The version-neutral plugin core: what every exported ncclNet_vN table calls. The export
 * layers (src/abi/export/) only adapt argument types. */
#ifndef LG_CORE_H
#define LG_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/devices.h"
#include "nccl_net_abi.h"
#include "transport/transport.h"

enum lg_flavor {
    LG_FLAVOR_LINKGUARD = 0, /* devices = NIC pairs, primary + backup paths */
    LG_FLAVOR_TCP = 1,       /* standalone transport: one NIC per device, no backup */
};


/* Process-wide part, refcounted: devices, parameters, progress threads. */
ncclResult_t lg_core_init(enum lg_flavor flavor, ncclDebugLogger_t logger);
ncclResult_t lg_core_finalize(void);
/* Live objects (listen comms, connections) also hold the process-wide part. */
void lg_core_ref(int delta);

/* v11+ per-communicator contexts (ctx.h): NCCL's init and finalize of one. */
ncclResult_t lg_core_ctx_new(uint64_t comm_id, int traffic_class, void **ctx);
ncclResult_t lg_core_ctx_free(void *ctx);

const struct lg_device *lg_core_device(int dev);
ncclResult_t lg_core_devices(int *ndev);
/* Properties in the newest layout; adapters copy out older ones. */
ncclResult_t lg_core_get_properties(int dev, ncclNetProperties_v12_t *props);


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
/* Internal: `fn` runs when the process-wide part stops (connect.c frees the connects NCCL
 * abandoned); one hook. */
void lg_core_on_stop(void (*fn)(void));

#endif
