/* The transport contract (lg_test_contract.h) over the inner transport: wrap mode with the
 * fake inner plugin's loop mode (a real in-process transport, fake_inner_loop.h) carrying the
 * data, over loopback control channels; once with sends completing on linkguard's ack and once
 * on the inner completion (LINKGUARD_INNER_PLACED). test_wrap.c has wrap mode's own cases. */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "abi/core.h"
#include "lg_test.h"
#include "lg_test_build.h"
#include "lg_test_contract.h"
#include "lg_test_pair.h"
#include "lg_test_warn.h"
#include "linkguard_shm.h"
#include "runtime/params.h"
#include "transport/inner/inner_dev.h"

int main(void)
{
    char fake[PATH_MAX];
    find_build_dir();
    lib_path(fake, sizeof(fake), "tests/libfake-inner.so");
    setenv("LINKGUARD_INNER", fake, 1);
    setenv("FAKE_INNER_MODE", "loop", 1);
    setenv("FAKE_INNER_DEVS", "lgt0,lgt1", 1);
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard.shm", 1); /* no daemon: rebuilds probe */
    fast_failover_env("3000");
    loopback_devices("lgt0", "lgt1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, test_print_logger), ncclSuccess);
    CHECK(lg_inner_devs != NULL); /* the contract below is the inner transport's, not TCP's */
    if (!lg_inner_devs)
        LG_TEST_DONE();
    for (int placed = 0; placed <= 1; placed++) {
        lg_inner_devs->placed = placed;
        lg_contract_run(&(struct lg_contract){
            .transport = placed ? "inner (completion means placed)" : "inner",
            /* wrap mode hands a group to the inner plugin whole; the fake's loop mode
             * fills it by tag, as NCCL's IB transport does */
            .break_path = contract_shutdown_path, .grouped = 1,
            .sends_wait_for_receiver = !placed});
    }
    lg_inner_devs->placed = 0;
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
