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
};

#endif
