/* libnccl-net-lgtcp.so: linkguard's TCP transport as a standalone plugin (one NIC per device,
 * no backup path), so that wrap mode can be tested against a real inner plugin.
 * Exports ncclNetPlugin_v8 .. _v12. Devices: LGTCP_IFS, else every IPv4 interface. */
#include <string.h>

#define LG_EXPORT_NAME "lgtcp"
#define LG_EXPORT_FLAVOR LG_FLAVOR_TCP
#include "abi/net_tables.h"
