/* Shared by the in-process transport tests: one send/recv pair on device 0 through the
 * non-blocking listen/connect/accept, driven like NCCL's proxy (the handle stays put). */
#ifndef LG_TEST_PAIR_H
#define LG_TEST_PAIR_H

#include "core.h"
#include "nccl_net_abi.h"
#include "util.h"

/* 0, or -1 when the pair is not connected within 5 s. */
static int pair_connect(void **s, void **r)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL;
    *s = *r = NULL;
    if (lg_core_listen(0, handle, &l) != ncclSuccess)
        return -1;
    uint64_t t0 = lg_now_ns();
    while ((!*s || !*r) && lg_now_ns() - t0 < 5000000000ull) {
        if (!*s && lg_core_connect(0, handle, s) != ncclSuccess)
            break;
        if (!*r && lg_core_accept(l, r) != ncclSuccess)
            break;
    }
    lg_core_close_listen(l);
    return *s && *r ? 0 : -1;
}

#endif
