/* What an inner plugin did wrong (inner.h): its failed calls reported, naming the library,
 * the table version and the call, and its table checked after init. Used by the loader
 * (inner.c) and the adapters (inner_ops.c). */
#ifndef LG_INNER_CHECK_H
#define LG_INNER_CHECK_H

#include "nccl_net_abi.h"
#include "transport/inner/inner_types.h"

/* Calls on one path of a connection (inner_endpoint.c brackets them, per thread): their
 * failures are failed over, so they are logged as INFO instead of WARN. */
void lg_inner_path_calls(int on);
/* WARNs a failed call and returns rc (ncclInternalError for a success reported as failure). */
ncclResult_t lg_inner_failed(struct lg_inner *in, const char *call, ncclResult_t rc);
const char *lg_inner_strerror(ncclResult_t rc);
/* The table's name; plugins may rename themselves in init, so it is read again then. */
void lg_inner_refresh_name(struct lg_inner *in);
/* The inner is linkguard itself (WARNed): 1. */
int lg_inner_self_wrap(struct lg_inner *in);
/* Checks, after the first successful init, that the members we call are set. */
int lg_inner_table_ok(struct lg_inner *in);

#endif
