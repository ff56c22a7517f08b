/* Part of the transport contract (lg_test_contract.h): the call sequences of a third-party
 * plugin test suite (aws-ofi-nccl's tests/functional, which drive any ncclNet plugin as two MPI
 * ranks) that NCCL's own transports get right, rebuilt here through NCCL's calls, both ranks
 * in this process:
 *  - close before accept (grouped_recv's setup): two listen comms, a connect/accept loop, the
 *    connector closing everything while the second accept is still pending (its control
 *    sessions end with it): that accept completes, and its comm reports the close in test(). */
#ifndef LG_TEST_CALLERS_H
#define LG_TEST_CALLERS_H

#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "lg_test.h"
#include "lg_test_pair.h"
#include "util.h"

#define CALLERS_BOUND_NS 20000000000ull /* only keeps a broken build from hanging */

static void contract_close_before_accept(const struct lg_contract *k)
{
    char h0[NCCL_NET_HANDLE_MAXSIZE], h1[NCCL_NET_HANDLE_MAXSIZE];
    void *l0 = NULL, *l1 = NULL, *s0 = NULL, *s1 = NULL, *r0 = NULL, *r1 = NULL;
    CHECK_EQ(lg_core_listen_ctx(NULL, 0, h0, &l0), ncclSuccess);
    CHECK_EQ(lg_core_listen_ctx(NULL, 0, h1, &l1), ncclSuccess);
    if (!l0 || !l1)
        return;
    /* The loop stops asking for the second accept once its connect returned (wrap mode needs
     * that accept asked before: the monitor builds the inner comms of a built connection). */
    ncclResult_t rc = ncclSuccess;
    uint64_t t0 = lg_now_ns();
    while (rc == ncclSuccess && (!s0 || !r0 || !s1) && lg_now_ns() - t0 < CALLERS_BOUND_NS) {
        if (!s0)
            rc = lg_core_connect_ctx(NULL, 0, h0, &s0);
        if (!r0 && rc == ncclSuccess)
            rc = lg_core_accept(l0, &r0);
        if (!s1 && !r1 && rc == ncclSuccess)
            rc = lg_core_accept(l1, &r1);
        if (!s1 && rc == ncclSuccess)
            rc = lg_core_connect_ctx(NULL, 0, h1, &s1);
    }
    CHECK(rc == ncclSuccess && s0 && r0 && s1);
    /* The connecting rank closes everything at once. */
    if (s0)
        lg_core_close_send(s0);
    if (s1)
        lg_core_close_send(s1);
    rc = ncclSuccess;
    t0 = lg_now_ns();
    while (rc == ncclSuccess && !r1 && lg_now_ns() - t0 < CALLERS_BOUND_NS)
        rc = lg_core_accept(l1, &r1);
    if (rc != ncclSuccess || !r1)
        fprintf(stderr, "contract %s: close before accept: accept rc %d, comm %p\n",
                k->transport, (int)rc, r1);
    CHECK_EQ(rc, ncclSuccess);
    CHECK(r1 != NULL);
    if (r1) { /* the close shows in test(), never as a hang */
        char b[64];
        void *d = b, *req = NULL;
        size_t sz = sizeof(b);
        int done = 0;
        rc = lg_core_irecv(r1, 1, &d, &sz, NULL, NULL, &req);
        if (rc != ncclSuccess) /* (refused at once: the close showed there) */
            req = NULL;
        t0 = lg_now_ns();
        while (req && rc == ncclSuccess && !done && lg_now_ns() - t0 < CALLERS_BOUND_NS)
            rc = lg_core_test(req, &done, NULL);
        CHECK(rc != ncclSuccess && !done);
        CHECK_EQ(lg_core_close_recv(r1), ncclSuccess);
    }
    if (r0)
        lg_core_close_recv(r0);
    lg_core_close_listen(l0);
    lg_core_close_listen(l1);
}

#endif
