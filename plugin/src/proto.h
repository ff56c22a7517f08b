/* The protocol's entry points on NCCL's threads: posting (proto_post.c: isend and irecv take
 * the window's next sequence numbers and hand them to the transport) and the control channel
 * (proto_ctrl.c). Completion and test() are window.h's; the failover state machine the
 * monitor runs is failover.h's. */
#ifndef LG_PROTO_H
#define LG_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_net_abi.h"

struct lg_conn;
struct lg_inner_mr;
struct lg_task;

ncclResult_t lg_conn_isend(struct lg_conn *c, void *data, size_t size, int tag,
                           struct lg_inner_mr *imr, void **request);
ncclResult_t lg_conn_irecv(struct lg_conn *c, int n, void **data, size_t *sizes, int *tags,
                           struct lg_inner_mr **imrs, void **request);
/* The handler of every path's control channel (the task of lg_path.ctrl). */
void lg_proto_ctrl_handler(struct lg_task *t, uint32_t events);

#endif
