/* Shared by the in-process transport tests: one device over loopback (primary 127.0.0.1,
 * backup 127.0.0.2) and one send/recv pair on it through the non-blocking
 * listen/connect/accept, driven like NCCL's proxy (the handle stays put). */
#ifndef LG_TEST_PAIR_H
#define LG_TEST_PAIR_H

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "abi/connect.h"
#include "abi/core.h"
#include "abi/listen.h"
#include "nccl_net_abi.h"
#include "runtime/util.h"

/* Device 0 = (nic0 on 127.0.0.1, nic1 on 127.0.0.2); the names are what the daemon's table
 * (if a test writes one) must call them. */
static void loopback_devices(const char *nic0, const char *nic1)
{
    struct lg_device_table t;
    memset(&t, 0, sizeof(t));
    t.count = 1;
    t.source = "test";
    strcpy(t.dev[0].nic[0].name, nic0);
    t.dev[0].nic[0].ip = inet_addr("127.0.0.1");
    strcpy(t.dev[0].nic[1].name, nic1);
    t.dev[0].nic[1].ip = inet_addr("127.0.0.2");
    t.dev[0].has_backup = 1;
    t.dev[0].speed_mbps = 10000;
    lg_core_test_set_devices(&t, LG_FLAVOR_LINKGUARD);
}

/* Timers short enough for failover tests to run in seconds: heartbeats every 20 ms, silence
 * after 500, rebuilds from 100 ms; the dead timeout as given. Set before lg_core_init. */
static __attribute__((unused)) void fast_failover_env(const char *dead_timeout_ms)
{
    setenv("LINKGUARD_BIND_DEVICE", "0", 1);
    setenv("LINKGUARD_CONNECT_TIMEOUT_MS", "3000", 1);
    setenv("LINKGUARD_HEARTBEAT_MS", "20", 1);
    setenv("LINKGUARD_SILENT_TIMEOUT_MS", "500", 1);
    setenv("LINKGUARD_DEAD_TIMEOUT_MS", dead_timeout_ms, 1);
    setenv("LINKGUARD_REJOIN_MS", "100", 1);
    setenv("LINKGUARD_REJOIN_MAX_MS", "400", 1);
}

/* 0, or -1 when the pair is not connected within 5 s. Both made in NCCL context `ctx` (a
 * v11+ per-communicator context; NULL: none). */
static __attribute__((unused)) int pair_connect_ctx(void *ctx, void **s, void **r)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL;
    *s = *r = NULL;
    if (lg_core_listen_ctx(ctx, 0, handle, &l) != ncclSuccess)
        return -1;
    uint64_t t0 = lg_now_ns();
    while ((!*s || !*r) && lg_now_ns() - t0 < 5000000000ull) {
        if (!*s && lg_core_connect_ctx(ctx, 0, handle, s) != ncclSuccess)
            break;
        if (!*r && lg_core_accept(l, r) != ncclSuccess)
            break;
    }
    lg_core_close_listen(l);
    return *s && *r ? 0 : -1;
}

static __attribute__((unused)) int pair_connect(void **s, void **r)
{
    return pair_connect_ctx(NULL, s, r);
}

#endif
