/* The adapters: one version-neutral ops table (inner_types.h) per ncclNetPlugin_vN. */
#ifndef LG_INNER_OPS_H
#define LG_INNER_OPS_H

#include "transport/inner/inner_types.h"

/* The adapter table of one ABI version (NULL: not supported). */
const struct lg_inner_ops *lg_inner_ops_for(int version);

#endif
