/* What the fake inner plugin (tests/fake_inner.c) records, read by tests/test_inner.c through
 * the exported symbol fake_inner_stats. */
#ifndef LG_FAKE_INNER_H
#define LG_FAKE_INNER_H

#include <stddef.h>

struct fake_inner_stats {
    int init_calls, finalize_calls;
    int connect_tc;        /* trafficClass seen by v10 connect or v11 init */
    void *irecv_req_in;    /* *request as irecv received it */
    size_t last_send_size;
    int flushes, tests;    /* iflush and test calls */
    int irecvs, recv_n;    /* irecv calls; buffers of the last one, with their tags and sizes
                            * (test() reports buffer i >= 1 of a grouped one as size - i) */
    int recv_tags[8];
    size_t recv_sizes[8];
    /* v11 contexts: the newest init's commId, what listen and connect were given (the
     * commId of their context), and the commId of the context finalized last */
    unsigned long long init_id, listen_id, connect_id, finalize_id;
    int live_ctxs;         /* v11 contexts not yet finalized */
    /* loop mode (fake_inner_loop.h) */
    int refuse_reg;        /* set by a test: regMr fails with ncclSystemError */
    int regs[2];           /* registrations made on comms of device 0 / 1 (deregs subtracted) */
    int flush_dev;         /* device of the comm the newest iflush went to */
    int placed_dev;        /* device of the receive comm that placed the newest message */
    int stall_dev;         /* set by a test: 1 + the device whose pairs stop copying (a hung
                            * queue pair: requests stay posted, nothing completes); 0 none */
    int early_send;        /* set by a test: a send completes at once, its data copied aside
                            * (a provider's injection completion: the buffer is free, nothing
                            * is placed yet); closing its comm loses what is not placed */
};

#endif
