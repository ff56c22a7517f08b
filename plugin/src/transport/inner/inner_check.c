/* What an inner plugin did wrong (see inner_check.h). */
#include "transport/inner/inner_check.h"

#include <stdio.h>
#include <strings.h>

#include "runtime/log.h"

const char *lg_inner_strerror(ncclResult_t rc)
{
    static const char *const names[] = {
        "ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
        "ncclInvalidArgument", "ncclInvalidUsage",    "ncclRemoteError", "ncclInProgress",
    };
    return (unsigned)rc < sizeof(names) / sizeof(names[0]) ? names[rc] : "unknown error";
}

static __thread int lg_inner_on_path; /* see lg_inner_path_calls */

void lg_inner_path_calls(int on) { lg_inner_on_path = on; }

ncclResult_t lg_inner_failed(struct lg_inner *in, const char *call, ncclResult_t rc)
{
    if (lg_inner_on_path) /* one path of a connection: the caller fails it over, and says so */
        LG_INFO(NCCL_NET, "inner plugin '%s' (%s, ncclNetPlugin_v%d): %s failed on a path: %s "
                "(%d)", in->name, in->lib, in->version, call, lg_inner_strerror(rc), (int)rc);
    else
        LG_WARN("inner plugin '%s' (%s, ncclNetPlugin_v%d): %s failed: %s (%d)", in->name,
                in->lib, in->version, call, lg_inner_strerror(rc), (int)rc);
    return rc == ncclSuccess ? ncclInternalError : rc;
}

/* The table's name; plugins may rename themselves in init, so it is read again then. */
void lg_inner_refresh_name(struct lg_inner *in)
{
    const char *n = *(const char *const *)in->table; /* every version starts with `name` */
    snprintf(in->name, sizeof(in->name), "%s", n ? n : "?");
}

int lg_inner_self_wrap(struct lg_inner *in)
{
    if (strcasecmp(in->name, "linkguard") != 0)
        return 0;
    LG_WARN("LINKGUARD_INNER=%s is linkguard itself; name the plugin that should carry the "
            "data (e.g. the RDMA plugin)", in->lib);
    return 1;
}

int lg_inner_table_ok(struct lg_inner *in)
{
    const ncclNet_v8_t *t = in->table; /* these members share offsets and types in v8..v12 */
    const char *missing = !t->devices         ? "devices"
                          : !t->getProperties ? "getProperties"
                          : !t->listen        ? "listen"
                          : !t->connect       ? "connect"
                          : !t->accept        ? "accept"
                          : !t->regMr         ? "regMr"
                          : !t->deregMr       ? "deregMr"
                          : !t->isend         ? "isend"
                          : !t->irecv         ? "irecv"
                          : !t->test          ? "test"
                          : !t->closeSend     ? "closeSend"
                          : !t->closeRecv     ? "closeRecv"
                          : !t->closeListen   ? "closeListen"
                                              : NULL;
    if (!missing && in->version >= 11 && !((const ncclNet_v11_t *)in->table)->finalize)
        missing = "finalize";
    lg_inner_refresh_name(in);
    if (missing) {
        LG_WARN("inner plugin '%s' (%s, ncclNetPlugin_v%d): %s is NULL after init", in->name,
                in->lib, in->version, missing);
        return 0;
    }
    return !lg_inner_self_wrap(in);
}
