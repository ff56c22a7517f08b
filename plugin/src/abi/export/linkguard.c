/* libnccl-net-linkguard.so: the failover plugin. One NCCL device per NIC pair; every
 * connection has a primary and a standby backup path. Exports ncclNetPlugin_v8 .. _v12. */
#include <string.h>

#define LG_EXPORT_NAME "linkguard"
#define LG_EXPORT_FLAVOR LG_FLAVOR_LINKGUARD
#include "abi/net_tables.h"
