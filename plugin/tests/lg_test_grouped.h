/* Grouped receives driven like NCCL's proxy, for the in-process transport tests, in the shape
 * of tools/grouped_shape.h: every buffer must come back whole with its own bytes and its size
 * in test()'s sizes[].
 * gflow_step never blocks: failover tests drive it between faults. */
#ifndef LG_TEST_GROUPED_H
#define LG_TEST_GROUPED_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/grouped_shape.h"
#include "abi/core.h"
#include "lg_test.h"

#define GF_DEPTH 3 /* groups in flight */
#define GF_MAXN LG_GROUP_MAXN
#define GF_BUF 600001u

struct gflow {
    void *s, *r;
    char *sb[GF_DEPTH][GF_MAXN], *rb[GF_DEPTH][GF_MAXN];
    uint8_t *want; /* a buffer's bytes, this flow's thread's only (gf_fill) */
    void *rreq[GF_DEPTH], *sreq[GF_DEPTH][GF_MAXN];
    uint64_t posted_r, done_r, count; /* groups */
    uint64_t sent_g, done_s_g;        /* the group of the next send / send to complete */
    int sent_k, done_s_k;             /* ... and its place in the group's send order */
    int bad, errors;
    ncclResult_t last_rc;
};

static int gf_n(uint64_t g) { return lg_group_n(g); }

static void gf_shape(uint64_t g, int i, size_t *cap, size_t *sz, int *tag)
{
    lg_group_shape(g, i, GF_BUF - 1, GF_BUF, cap, sz, tag);
}

static int gf_order(uint64_t g, int k) { return lg_group_order(g, k); }

/* Group g's buffer i, bytes [0, n), into `out`, which no other thread touches: as
 * lg_test_flow.h's pattern_fill, out of TSan's per-byte instrumentation; the shared buffers
 * are written and compared with memcpy and memcmp. */
__attribute__((no_sanitize("thread"))) static void gf_fill(uint8_t *out, uint64_t g, int i,
                                                          size_t n)
{
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(g * 29 + (uint64_t)i * 101 + k * 7 + (k >> 11));
}

static __attribute__((unused)) void gflow_init(struct gflow *f, void *s, void *r, uint64_t count)
{
    memset(f, 0, sizeof(*f));
    f->s = s, f->r = r, f->count = count;
    for (int d = 0; d < GF_DEPTH; d++)
        for (int i = 0; i < GF_MAXN; i++) {
            f->sb[d][i] = malloc(GF_BUF);
            f->rb[d][i] = malloc(GF_BUF);
        }
    f->want = malloc(GF_BUF);
}

static __attribute__((unused)) void gflow_free(struct gflow *f)
{
    for (int d = 0; d < GF_DEPTH; d++)
        for (int i = 0; i < GF_MAXN; i++) {
            free(f->sb[d][i]);
            free(f->rb[d][i]);
        }
    free(f->want);
}

static int gf_rc(struct gflow *f, ncclResult_t rc)
{
    if (rc != ncclSuccess) {
        f->errors++;
        f->last_rc = rc;
    }
    return rc != ncclSuccess;
}

static void gf_post_recv(struct gflow *f)
{
    while (f->posted_r < f->count && f->posted_r - f->done_r < GF_DEPTH) {
        uint64_t g = f->posted_r;
        int n = gf_n(g), d = (int)(g % GF_DEPTH), tags[GF_MAXN];
        void *data[GF_MAXN], *req = NULL;
        size_t caps[GF_MAXN];
        for (int i = 0; i < n; i++) {
            size_t sz;
            gf_shape(g, i, &caps[i], &sz, &tags[i]);
            data[i] = f->rb[d][i];
            memset(f->rb[d][i], 0xee, caps[i] < 64 ? caps[i] : 64); /* no stale pass */
        }
        if (gf_rc(f, lg_core_irecv(f->r, n, data, caps, tags, NULL, &req)) || !req)
            return;
        f->rreq[d] = req;
        f->posted_r++;
    }
}

static void gf_post_send(struct gflow *f)
{
    while (f->sent_g < f->count && f->sent_g - f->done_s_g < GF_DEPTH) {
        uint64_t g = f->sent_g;
        int d = (int)(g % GF_DEPTH), i = gf_order(g, f->sent_k), tag;
        size_t cap, sz;
        gf_shape(g, i, &cap, &sz, &tag);
        gf_fill(f->want, g, i, sz);
        memcpy(f->sb[d][i], f->want, sz);
        void *req = NULL;
        if (gf_rc(f, lg_core_isend(f->s, f->sb[d][i], sz, tag, NULL, &req)) || !req)
            return;
        f->sreq[d][f->sent_k] = req;
        if (++f->sent_k == gf_n(g))
            f->sent_k = 0, f->sent_g++;
    }
}

static void gf_test_send(struct gflow *f)
{
    while (f->done_s_g < f->sent_g || (f->done_s_g == f->sent_g && f->done_s_k < f->sent_k)) {
        uint64_t g = f->done_s_g;
        int done = 0, size = -1, tag;
        size_t cap, sz;
        if (gf_rc(f, lg_core_test(f->sreq[g % GF_DEPTH][f->done_s_k], &done, &size)) || !done)
            return;
        gf_shape(g, gf_order(g, f->done_s_k), &cap, &sz, &tag);
        f->bad += (size_t)size != sz;
        if (++f->done_s_k == gf_n(g))
            f->done_s_k = 0, f->done_s_g++;
    }
}

static void gf_test_recv(struct gflow *f)
{
    while (f->done_r < f->posted_r) {
        uint64_t g = f->done_r;
        int d = (int)(g % GF_DEPTH), done = 0, sizes[64];
        for (int i = 0; i < 64; i++)
            sizes[i] = -1;
        if (gf_rc(f, lg_core_test(f->rreq[d], &done, sizes)) || !done)
            return;
        for (int i = 0; i < gf_n(g); i++) {
            size_t cap, sz;
            int tag, ok;
            gf_shape(g, i, &cap, &sz, &tag);
            ok = sizes[i] == (int)sz;
            if (ok) {
                gf_fill(f->want, g, i, sz);
                ok = memcmp(f->rb[d][i], f->want, sz) == 0;
            }
            f->bad += !ok;
        }
        f->bad += sizes[gf_n(g)] != -1; /* nothing written past the group */
        f->done_r++;
    }
}

static __attribute__((unused)) void gflow_step(struct gflow *f)
{
    if (f->errors)
        return;
    gf_post_recv(f);
    gf_post_send(f);
    gf_test_send(f);
    gf_test_recv(f);
}

static __attribute__((unused)) int gflow_done(const struct gflow *f)
{
    return f->done_r == f->count && f->done_s_g == f->count;
}

#endif
