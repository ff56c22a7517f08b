/* The sending side of connection setup (connect.c): a non-blocking connect that opens both
 * paths at once. Above the core's services (core.h), beside listen.h. */
#ifndef LG_CONNECT_H
#define LG_CONNECT_H

#include "nccl_net_abi.h"

ncclResult_t lg_core_connect_ctx(void *ctx, int dev, void *handle, void **send_comm);
static inline ncclResult_t lg_core_connect(int dev, void *handle, void **send_comm)
{
    return lg_core_connect_ctx(NULL, dev, handle, send_comm);
}

/* Whether the pending connect on `handle` has done its handshake (its connection is with the
 * monitor; wrap mode: its inner comms being built), so that connect's next call may give the
 * comm. For tests that act between the two, as a peer may (NCCL never asks). */
int lg_core_connect_started(const void *handle);

#endif
