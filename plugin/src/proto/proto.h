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
struct lg_path;
struct lg_ctrl;

ncclResult_t lg_conn_isend(struct lg_conn *c, void *data, size_t size, int tag,
                           struct lg_inner_mr *imr, void **request);
ncclResult_t lg_conn_irecv(struct lg_conn *c, int n, void **data, size_t *sizes, int *tags,
                           struct lg_inner_mr **imrs, void **request);
/* Every control frame for one of a connection's paths (lg_conn.ctrl_frame): 0 go on, -1 the
 * path or the connection failed. */
int lg_proto_on_frame(struct lg_path *p, const struct lg_ctrl *f);

#endif
