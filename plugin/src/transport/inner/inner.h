/* Wrap mode (issue 7): another ncclNet plugin, the "inner" plugin, loaded with dlopen
 * (LINKGUARD_INNER) and called through one version-neutral table whatever ncclNetPlugin_vN
 * (v8..v12) it exports. linkguard keeps handles, control, failover and resync; the inner
 * plugin only moves bytes.
 *
 * What the adapters guarantee (reference §1, §3):
 *  - the inner's exported table is read at every call, never copied: some plugins
 *    (nccl-rdma-sharp-plugins) export only {name, init} and fill in the rest during init,
 *    so the other members are checked only after the first successful init;
 *  - v8..v10 init once per process and have no finalize: the first context inits, later
 *    ones share it; v11+ init once per context (one per NCCL communicator) and finalize each;
 *  - properties come back in the v12 layout, older versions filled with NCCL's shim defaults;
 *  - the optional-receive-completion marker in *request goes to v9+ and is stripped for v8;
 *  - every non-success result is WARNed naming the library, the table version and the call.
 * Threads: open/start/close run under the caller's lock (NCCL's init mutex); the ops are as
 * thread-safe as the inner's, and NCCL's thread rules (§3.1) apply to them unchanged. */
#ifndef LG_INNER_H
#define LG_INNER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl_net_abi.h"
#include "transport/inner/inner_check.h"
#include "transport/inner/inner_types.h"

/* Opens `spec` (a path if it has a '/' or looks like a soname "*.so*", else a name X for
 * libnccl-net-X.so) with RTLD_NOW|RTLD_LOCAL and picks the newest ncclNetPlugin_v12..v8, or
 * exactly v`version` when version != 0 (LINKGUARD_INNER_VERSION). The logger and profiler
 * callback are handed to the inner's init. WARNs and returns an error on failure. */
ncclResult_t lg_inner_open(const char *spec, int version, ncclDebugLogger_t logger,
                           ncclProfilerCallback_t prof, struct lg_inner **out);
/* Opens LINKGUARD_INNER / LINKGUARD_INNER_VERSION from lg_params (loaded by the caller). */
ncclResult_t lg_inner_open_env(ncclDebugLogger_t logger, ncclProfilerCallback_t prof,
                               struct lg_inner **out);
/* First init: a context, then devices (> 0 or it fails) and every device's properties,
 * cached in in->dev. On failure nothing stays initialised. */
ncclResult_t lg_inner_start(struct lg_inner *in, uint64_t comm_id, int traffic_class,
                            struct lg_inner_ctx **ctx);
/* Frees the loader's state; dlcloses only if the inner was never initialised. */
void lg_inner_close(struct lg_inner *in);

/* One connect attempt. The inner handle (the peer's, received over linkguard's own control
 * socket) stays at this address across every retry: inner plugins keep connect progress in
 * it (§3.2). Keep the struct in heap memory that lives as long as the attempt. */
struct lg_inner_connecting {
    _Alignas(16) char handle[NCCL_NET_HANDLE_MAXSIZE];
    int dev;
    void *comm; /* the send comm once connected */
};

void lg_inner_connecting_init(struct lg_inner_connecting *cg, int dev, const void *handle,
                              size_t len);
/* One non-blocking step: 1 connected (cg->comm), 0 in progress, -1 failed (WARNed). */
int lg_inner_connecting_step(struct lg_inner *in, struct lg_inner_ctx *ctx,
                             struct lg_inner_connecting *cg);

#endif
