/* The receiving side of connection setup (listen.c): listen comms, and accept, which builds
 * a connection from the sockets the acceptor (acceptor.h) routes to its listen comm. Above
 * the core's services (core.h), beside connect.h; the export layer calls both. */
#ifndef LG_LISTEN_H
#define LG_LISTEN_H

#include "nccl_net_abi.h"

ncclResult_t lg_core_listen_ctx(void *ctx, int dev, void *handle, void **listen_comm);
static inline ncclResult_t lg_core_listen(int dev, void *handle, void **listen_comm)
{
    return lg_core_listen_ctx(NULL, dev, handle, listen_comm);
}
ncclResult_t lg_core_accept(void *listen_comm, void **recv_comm);
ncclResult_t lg_core_close_listen(void *listen_comm);

#endif
