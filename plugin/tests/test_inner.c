/* Wrap mode's loader and version adapters against real and fake inner plugins, in one
 * process over loopback:
 *  - build/libnccl-net-lgtcp.so through its newest table (v12) and each older one forced
 *    (v8..v11): init, devices, properties, non-blocking listen/connect/accept with a stable
 *    handle buffer, one linkguard mhandle registered on two comms (primary and backup), and
 *    every byte of pipelined isend/irecv/test on both;
 *  - build/tests/libfake-inner.so (tests/fake_inner.c): a lazy table filled in by init,
 *    per-comm init (v11) against one shared init (v8, v10), property defaults, traffic class,
 *    the optional-receive marker forwarded (v9+) and stripped (v8); wrap mode's grouped
 *    receive (one inner irecv of the whole group, posted again whole after a switch), and
 *    its state per path object (a slot's rebuild starts with no comm of its own);
 *  - error paths, each a WARN naming the library and a clean failure: a missing library, no
 *    ncclNet symbol (libc), a version it lacks, init failing, no devices, a NULL member after
 *    init, a call returning an error, a bogus request, wrapping linkguard itself.
 * Libraries are found next to this binary (build/tests/..), or in LG_TEST_BUILD_DIR. */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_inner.h"
#include "lg_test.h"
#include "lg_test_build.h"
#include "lg_test_warn.h"
#include "proto/conn.h"
#include "proto/failover.h"
#include "proto/proto.h"
#include "proto/window.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "transport/inner/inner.h"
#include "transport/inner/inner_mr.h"
#include "transport/inner/inner_props.h"
#include "transport/inner/inner_endpoint.h"
#include "transport/inner/inner_transport.h"

#define MARKER ((void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION)
#define NMSG 4
#define SLOT (2u << 20)

/* The last WARN contains every given fragment. */
static int warned(const char *a, const char *b)
{
    return strstr(last_warn, a) && (!b || strstr(last_warn, b));
}

/* ---- lgtcp: a real transport through every table version ----------------------------------- */

/* Connects one send/recv pair like NCCL's proxy: the handle buffer stays put across retries. */
static int pair_connect(struct lg_inner *in, struct lg_inner_ctx *ctx, void **s, void **r)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void *l = NULL;
    *s = *r = NULL;
    if (in->ops->listen(in, ctx, 0, handle, &l) != ncclSuccess || !l)
        return -1;
    struct lg_inner_connecting *cg = malloc(sizeof(*cg));
    lg_inner_connecting_init(cg, 0, handle, sizeof(handle));
    uint64_t t0 = lg_now_ns();
    int st = 0;
    while ((st == 0 || !*r) && lg_now_ns() - t0 < 10000000000ull) {
        if (st == 0 && (st = lg_inner_connecting_step(in, ctx, cg)) < 0)
            break;
        if (!*r && in->ops->accept(in, l, r) != ncclSuccess)
            break;
    }
    *s = cg->comm;
    free(cg);
    in->ops->closeListen(in, l);
    if (!*s || !*r) /* say which side did not come up, and when: CI's log is all we get */
        fprintf(stderr, "pair_connect: send comm %s, recv comm %s after %.3f s (connect step %d)\n",
                *s ? "up" : "missing", *r ? "up" : "missing",
                (double)(lg_now_ns() - t0) / 1e9, st);
    return *s && *r ? 0 : -1;
}

static char pattern(uint64_t seed, size_t i) { return (char)((seed * 131 + i * 7 + (i >> 9)) & 0xff); }

static void *post(struct lg_inner *in, int send, void *comm, char *buf, size_t size, void *mh,
                  int optional)
{
    void *req = NULL;
    uint64_t t0 = lg_now_ns();
    while (!req && lg_now_ns() - t0 < 5000000000ull) {
        ncclResult_t rc;
        if (send) {
            rc = in->ops->isend(in, comm, buf, size, 0, mh, NULL, &req);
        } else {
            void *data[1] = {buf}, *mhs[1] = {mh}, *ph[1] = {NULL};
            size_t sz[1] = {SLOT};
            int tags[1] = {0};
            req = optional ? MARKER : NULL;
            rc = in->ops->irecv(in, comm, 1, data, sz, tags, mhs, ph, &req);
        }
        if (rc != ncclSuccess)
            return NULL;
    }
    return req;
}

/* NMSG messages in flight at once on one path, every byte checked. */
static void traffic(struct lg_inner *in, int path, void *s, void *r, struct lg_inner_mr *smr,
                    struct lg_inner_mr *rmr)
{
    static const size_t sizes[NMSG] = {0, 1, 4096, (1u << 20) + 3};
    char *sb = smr->data, *rb = rmr->data;
    void *sreq[NMSG], *rreq[NMSG];
    int sdone[NMSG] = {0}, rdone[NMSG] = {0}, got[NMSG] = {0};
    memset(rb, 0, NMSG * SLOT);
    for (int m = 0; m < NMSG; m++) {
        for (size_t i = 0; i < sizes[m]; i++)
            sb[m * SLOT + i] = pattern((uint64_t)(path * NMSG + m), i);
        rreq[m] = post(in, 0, r, rb + m * SLOT, 0, lg_inner_mr_handle(rmr, path), m == 1);
        sreq[m] = post(in, 1, s, sb + m * SLOT, sizes[m], lg_inner_mr_handle(smr, path), 0);
        CHECK(rreq[m] && sreq[m]);
        if (!rreq[m] || !sreq[m])
            return;
    }
    int left = 2 * NMSG;
    uint64_t t0 = lg_now_ns();
    while (left && lg_now_ns() - t0 < 10000000000ull)
        for (int m = 0; m < NMSG; m++) {
            int sz = -1;
            if (!sdone[m] && in->ops->test(in, sreq[m], &sdone[m], &sz) == ncclSuccess && sdone[m])
                left--;
            if (!rdone[m] && in->ops->test(in, rreq[m], &rdone[m], &got[m]) == ncclSuccess &&
                rdone[m])
                left--;
        }
    CHECK_EQ(left, 0);
    for (int m = 0; m < NMSG; m++) {
        int bad = 0;
        CHECK_EQ(got[m], (long long)sizes[m]);
        for (size_t i = 0; i < sizes[m] && !bad; i++)
            bad = rb[m * SLOT + i] != pattern((uint64_t)(path * NMSG + m), i);
        CHECK(!bad);
    }
}

static void check_lgtcp(int version)
{
    char path[PATH_MAX];
    struct lg_inner *in = NULL;
    struct lg_inner_ctx *ctx = NULL;
    lib_path(path, sizeof(path), "libnccl-net-lgtcp.so");
    CHECK_EQ(lg_inner_open(path, version, test_logger, NULL, &in), ncclSuccess);
    if (!in)
        return;
    CHECK_EQ(in->version, version ? version : 12);
    CHECK(!strcmp(in->name, "lgtcp"));
    CHECK_EQ(lg_inner_start(in, 42, NCCL_NET_TRAFFIC_CLASS_UNDEF, &ctx), ncclSuccess);
    CHECK_EQ(in->ndev, 1);
    const ncclNetProperties_v12_t *p = &in->dev[0].props;
    CHECK(!strcmp(p->name, "lo"));
    CHECK_EQ(p->ptrSupport, NCCL_PTR_HOST);
    CHECK_EQ(p->maxRecvs, 8); /* lgtcp is the native transport: LINKGUARD_MAX_RECVS, 8 */
    CHECK_EQ(p->maxP2pBytes, 1ull << 30);
    CHECK_EQ(p->vProps.ndevs, 1);

    /* Two connections stand for the primary and backup paths of one linkguard connection. */
    void *s[2] = {NULL, NULL}, *r[2] = {NULL, NULL};
    CHECK_EQ(pair_connect(in, ctx, &s[0], &r[0]), 0);
    CHECK_EQ(pair_connect(in, ctx, &s[1], &r[1]), 0);
    if (!s[0] || !s[1] || !r[0] || !r[1]) { /* failed above; the rest needs both pairs */
        for (int k = 0; k < 2; k++) {
            if (s[k])
                in->ops->closeSend(in, s[k]);
            if (r[k])
                in->ops->closeRecv(in, r[k]);
        }
        in->ops->finalize(in, ctx);
        lg_inner_close(in);
        return;
    }
    char *sbuf = malloc(NMSG * SLOT), *rbuf = malloc(NMSG * SLOT);
    struct lg_inner_mr *smr = NULL, *rmr = NULL;
    CHECK_EQ(lg_inner_mr_reg(in, s, sbuf, NMSG * SLOT, NCCL_PTR_HOST, &smr), ncclSuccess);
    CHECK_EQ(lg_inner_mr_reg(in, r, rbuf, NMSG * SLOT, NCCL_PTR_HOST, &rmr), ncclSuccess);
    if (smr && rmr) {
        CHECK(smr->mh[0] && smr->mh[1] && smr->mh[0] != smr->mh[1]);
        traffic(in, 0, s[0], r[0], smr, rmr);
        traffic(in, 1, s[1], r[1], smr, rmr); /* after a failover: same mhandles */
        /* A path rebuilt later gets the same registration again. */
        CHECK_EQ(lg_inner_mr_drop(in, smr, 0), ncclSuccess);
        CHECK(!smr->mh[0] && !smr->comm[0]);
        CHECK_EQ(lg_inner_mr_add(in, smr, 0, s[0]), ncclSuccess);
        CHECK(smr->mh[0] != NULL);
        traffic(in, 0, s[0], r[0], smr, rmr);
    }
    CHECK_EQ(lg_inner_mr_dereg(in, smr), ncclSuccess);
    CHECK_EQ(lg_inner_mr_dereg(in, rmr), ncclSuccess);

    /* Errors from the inner are WARNed with its name and the call; nothing crashes. */
    ncclNetProperties_v12_t q;
    CHECK(in->ops->getProperties(in, 5, &q) != ncclSuccess);
    CHECK(warned("'lgtcp'", "getProperties(dev 5) failed"));
    void *comms[2] = {s[0], NULL};
    struct lg_inner_mr *bad = NULL;
    CHECK(lg_inner_mr_reg(in, comms, sbuf, 64, NCCL_PTR_CUDA, &bad) != ncclSuccess);
    CHECK(bad == NULL && warned("'lgtcp'", "regMr failed"));
    if (bad) /* a regression of the check above must not hide behind a leak report */
        lg_inner_mr_dereg(in, bad);
    int done = 0;
    CHECK(in->ops->test(in, sbuf, &done, NULL) != ncclSuccess);
    CHECK(warned("test failed", NULL));

    for (int k = 0; k < 2; k++) {
        CHECK_EQ(in->ops->closeSend(in, s[k]), ncclSuccess);
        CHECK_EQ(in->ops->closeRecv(in, r[k]), ncclSuccess);
    }
    free(sbuf);
    free(rbuf);
    CHECK_EQ(in->ops->finalize(in, ctx), ncclSuccess);
    lg_inner_close(in);
}

/* ---- the fake: lazy table, init rules, defaults, the marker ------------------------------- */

static struct fake_inner_stats *fst;
static char fake_path[PATH_MAX];

static struct lg_inner *fake_open(int version, const char *mode)
{
    struct lg_inner *in = NULL;
    setenv("FAKE_INNER_MODE", mode, 1);
    CHECK_EQ(lg_inner_open(fake_path, version, test_logger, NULL, &in), ncclSuccess);
    return in;
}

/* irecv with the marker preset, as NCCL does for LL: what did the inner get? */
static void *marker_seen(struct lg_inner *in, struct lg_inner_ctx *ctx)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL, *s = NULL, *r = NULL, *req = MARKER, *data[1] = {handle}, *mh[1] = {NULL};
    size_t sz[1] = {8};
    int tags[1] = {0}, done = 0, got = 0;
    CHECK_EQ(in->ops->listen(in, ctx, 0, handle, &l), ncclSuccess);
    CHECK_EQ(in->ops->connect(in, ctx, 0, handle, &s), ncclSuccess);
    CHECK_EQ(in->ops->accept(in, l, &r), ncclSuccess);
    fst->irecv_req_in = (void *)&req; /* anything but the two answers */
    CHECK_EQ(in->ops->irecv(in, r, 1, data, sz, tags, mh, NULL, &req), ncclSuccess);
    CHECK(req != NULL && req != MARKER);
    CHECK_EQ(in->ops->test(in, req, &done, &got), ncclSuccess);
    CHECK_EQ(done, 1);
    CHECK_EQ(in->ops->isend(in, s, handle, 12345, 0, NULL, NULL, &req), ncclSuccess);
    CHECK_EQ(fst->last_send_size, 12345);
    in->ops->closeSend(in, s);
    in->ops->closeRecv(in, r);
    in->ops->closeListen(in, l);
    return fst->irecv_req_in;
}

static void check_fake_v11(void)
{
    struct lg_inner *in = fake_open(0, "ok");
    struct lg_inner_ctx *c1 = NULL, *c2 = NULL;
    if (!in)
        return;
    CHECK_EQ(in->version, 11);
    CHECK(((const ncclNet_v11_t *)in->table)->devices == NULL); /* lazy until init */
    int inits = fst->init_calls, fins = fst->finalize_calls;
    CHECK_EQ(lg_inner_start(in, 1, 5, &c1), ncclSuccess);
    CHECK_EQ(fst->connect_tc, 5); /* v11: traffic class in init's config */
    CHECK_EQ(in->ndev, 2);
    const ncclNetProperties_v12_t *p = &in->dev[0].props;
    CHECK(!strcmp(p->name, "fake0") && p->forceFlush == 1 && p->maxMultiRequestSize == 2);
    CHECK(p->maxP2pBytes == (1ull << 31) && p->railId == NCCL_NET_ID_UNDEF && !p->pciPath);
    CHECK_EQ(in->ops->init(in, 2, -1, &c2), ncclSuccess);
    CHECK_EQ(fst->init_calls, inits + 2); /* once per communicator */
    CHECK(marker_seen(in, c1) == MARKER);  /* v9+: forwarded */
    /* Device offload cannot fail over: the pair is refused. */
    ncclNetProperties_v12_t m, out;
    char err[256] = "";
    struct lg_inner_ctx *c3 = NULL;
    setenv("FAKE_INNER_MODE", "offload", 1);
    CHECK_EQ(in->ops->init(in, 3, -1, &c3), ncclSuccess);
    CHECK_EQ(in->ops->getProperties(in, 1, &m), ncclSuccess);
    CHECK_EQ(lg_inner_props_merge(&in->dev[0].props, &m, 0, "x", &out, err, sizeof(err)), -1);
    CHECK(strstr(err, "device offload") != NULL);
    CHECK_EQ(in->ops->finalize(in, c3), ncclSuccess);
    CHECK_EQ(in->ops->finalize(in, c2), ncclSuccess);
    CHECK_EQ(in->ops->finalize(in, c1), ncclSuccess);
    CHECK_EQ(fst->finalize_calls, fins + 3);
    lg_inner_close(in);
}

static void check_fake_shared(int version)
{
    struct lg_inner *in = fake_open(version, "ok");
    struct lg_inner_ctx *c1 = NULL, *c2 = NULL;
    if (!in)
        return;
    CHECK_EQ(in->version, version);
    int inits = fst->init_calls, fins = fst->finalize_calls;
    CHECK_EQ(lg_inner_start(in, 1, 7, &c1), ncclSuccess);
    CHECK_EQ(in->ops->init(in, 2, 7, &c2), ncclSuccess);
    CHECK_EQ(fst->init_calls, inits + 1); /* one init per process before v11 */
    const ncclNetProperties_v12_t *p = &in->dev[1].props;
    if (version == 8) {
        CHECK(p->maxP2pBytes == LG_INNER_V8_MAX_P2P_BYTES && p->forceFlush == 0);
        CHECK(p->vProps.ndevs == 1 && p->vProps.devs[0] == 1 && p->maxMultiRequestSize == 1);
        CHECK(marker_seen(in, c2) == NULL); /* v8: stripped */
    } else {
        CHECK(marker_seen(in, c2) == MARKER);
        CHECK_EQ(fst->connect_tc, 7); /* v10: traffic class in connect's config */
        CHECK(p->forceFlush == 1 && p->maxCollBytes == (1ull << 29));
    }
    CHECK_EQ(in->ops->finalize(in, c2), ncclSuccess);
    CHECK_EQ(in->ops->finalize(in, c1), ncclSuccess);
    CHECK_EQ(fst->finalize_calls, fins); /* nothing to call before v11 */
    lg_inner_close(in);
}

static const char *env_get(const char *name) { return getenv(name); }

/* ---- error paths -------------------------------------------------------------------------- */

static void check_open_errors(void)
{
    struct lg_inner *in = (struct lg_inner *)1;
    char path[PATH_MAX];
    CHECK(lg_inner_open("/nonexistent/libnope.so", 0, test_logger, NULL, &in) != ncclSuccess);
    CHECK(in == NULL && warned("cannot open /nonexistent/libnope.so", NULL));
    CHECK(lg_inner_open("no-such-plugin", 0, test_logger, NULL, &in) != ncclSuccess);
    CHECK(warned("libnccl-net-no-such-plugin.so", NULL));
    CHECK(lg_inner_open("libc.so.6", 0, test_logger, NULL, &in) != ncclSuccess);
    CHECK(warned("libc.so.6", "exports none of ncclNetPlugin_v12..v8"));
    CHECK(lg_inner_open(fake_path, 9, test_logger, NULL, &in) != ncclSuccess);
    CHECK(warned("no ncclNetPlugin_v9", "LINKGUARD_INNER_VERSION"));
    CHECK(lg_inner_open(fake_path, 7, test_logger, NULL, &in) != ncclSuccess);
    CHECK(warned("LINKGUARD_INNER_VERSION=7", NULL));
    CHECK(lg_inner_open("", 0, test_logger, NULL, &in) != ncclSuccess);
    lib_path(path, sizeof(path), "libnccl-net-linkguard.so");
    CHECK(lg_inner_open(path, 0, test_logger, NULL, &in) != ncclSuccess);
    CHECK(warned("linkguard itself", NULL));
    /* From the environment, as the plugin will do. */
    setenv("LINKGUARD_INNER", fake_path, 1);
    setenv("LINKGUARD_INNER_VERSION", "10", 1);
    lg_params_load(&lg_params, env_get);
    CHECK_EQ(lg_inner_open_env(test_logger, NULL, &in), ncclSuccess);
    CHECK(in && in->version == 10);
    lg_inner_close(in);
}

/* Each bad inner: a WARN naming it and the failure, and no context left behind. */
static void check_start_error(int version, const char *mode, const char *a, const char *b)
{
    struct lg_inner *in = fake_open(version, mode);
    struct lg_inner_ctx *ctx = (struct lg_inner_ctx *)1;
    if (!in)
        return;
    int fins = fst->finalize_calls;
    last_warn[0] = 0;
    CHECK(lg_inner_start(in, 1, -1, &ctx) != ncclSuccess);
    CHECK(ctx == NULL);
    CHECK(warned(a, b));
    CHECK(warned("fake", NULL));
    if (version == 11 && strcmp(mode, "initfail") != 0)
        CHECK_EQ(fst->finalize_calls, fins + 1); /* what init made is finalized */
    lg_inner_close(in);
}

static void check_call_errors(void)
{
    struct lg_inner *in = fake_open(0, "ok");
    struct lg_inner_ctx *ctx0 = NULL, *ctx = NULL;
    if (!in)
        return;
    CHECK_EQ(lg_inner_start(in, 1, -1, &ctx0), ncclSuccess);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL;
    setenv("FAKE_INNER_MODE", "listenfail", 1);
    CHECK_EQ(in->ops->init(in, 2, -1, &ctx), ncclSuccess); /* v11: re-reads the mode */
    CHECK_EQ(in->ops->listen(in, ctx, 0, handle, &l), ncclSystemError);
    CHECK(warned("'fake'", "listen(dev 0) failed: ncclSystemError (2)"));
    in->ops->finalize(in, ctx);
    setenv("FAKE_INNER_MODE", "keepmarker", 1);
    CHECK_EQ(in->ops->init(in, 3, -1, &ctx), ncclSuccess);
    void *s = NULL, *r = NULL, *req = MARKER, *data[1] = {handle}, *mh[1] = {NULL};
    size_t sz[1] = {8};
    int tags[1] = {0};
    CHECK_EQ(in->ops->listen(in, ctx, 0, handle, &l), ncclSuccess);
    CHECK_EQ(in->ops->connect(in, ctx, 0, handle, &s), ncclSuccess);
    CHECK_EQ(in->ops->accept(in, l, &r), ncclSuccess);
    CHECK(in->ops->irecv(in, r, 1, data, sz, tags, mh, NULL, &req) != ncclSuccess);
    CHECK(req == NULL && warned("marker", NULL));
    /* The fake has no regMrDmaBuf: a clear error instead of a NULL call. */
    void *m = NULL;
    CHECK(in->ops->regMrDmaBuf(in, s, handle, 8, NCCL_PTR_CUDA, 0, 0, &m) != ncclSuccess);
    CHECK(warned("regMrDmaBuf", NULL));
    /* Nor iflush: NULL request, which NCCL reads as complete. */
    req = MARKER;
    CHECK_EQ(in->ops->iflush(in, r, 1, data, tags, mh, &req), ncclSuccess);
    CHECK(req == NULL);
    in->ops->finalize(in, ctx);
    in->ops->finalize(in, ctx0);
    lg_inner_close(in);
}

/* A receiver's connection in wrap mode over the fake inner (a comm id of its own), its primary
 * path committed on an inner comm accepted here (the monitor's handshake does not run). */
struct wrap_rig {
    struct lg_inner *in;
    struct lg_inner_ctx *ctx;
    struct lg_inner_devs w;
    void *l, *s, *r; /* the inner listen, send and receive comms */
    struct lg_conn *c;
    struct lg_path *p;
};

static int wrap_rig_open(struct wrap_rig *g, const char *mode, uint64_t comm_id)
{
    memset(g, 0, sizeof(*g));
    g->in = fake_open(11, mode);
    if (!g->in || lg_inner_start(g->in, comm_id, -1, &g->ctx) != ncclSuccess)
        return -1;
    g->w.in = g->in;
    g->w.ctx = g->ctx;
    lg_inner_devs = &g->w;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    CHECK_EQ(g->in->ops->listen(g->in, g->ctx, 0, handle, &g->l), ncclSuccess);
    CHECK_EQ(g->in->ops->connect(g->in, g->ctx, 0, handle, &g->s), ncclSuccess);
    CHECK_EQ(g->in->ops->accept(g->in, g->l, &g->r), ncclSuccess);
    g->c = lg_conn_new(LG_CONN_RECV, 0, &lg_inner_transport, 1, 4096, 0);
    lg_fo_init(g->c);
    g->p = lg_path_new(g->c, 0, "rail0", "peer");
    CHECK(!g->c->tr->chunks && g->c->ep != NULL && g->p != NULL && g->p->tp != NULL);
    lg_inner_tp(g->p->tp)->comm = g->r;
    lg_inner_tp(g->p->tp)->ready = 1;
    g->c->active_path = g->p;
    return 0;
}

static void wrap_rig_close(struct wrap_rig *g)
{
    lg_conn_free(g->c); /* fences the path: closes the receive comm */
    g->in->ops->closeSend(g->in, g->s);
    g->in->ops->closeListen(g->in, g->l);
    lg_inner_devs = NULL;
    g->in->ops->finalize(g->in, g->ctx);
    lg_inner_close(g->in);
}

/* Wrap mode's grouped receive: once the sender said it completes sends on acks, one inner
 * irecv of all its buffers, tags and sizes; test()
 * reports the inner's sizes and counts every message of the group placed; after a switch
 * (the receives on the old comm forgotten) the group is posted again, whole. */
static void check_wrap_grouped(void)
{
    static struct wrap_rig g;
    if (wrap_rig_open(&g, "ok", 5) != 0)
        return;
    struct lg_conn *c = g.c;
    char b[3][64];
    void *req = NULL, *sreq = NULL;
    void *data[3] = {b[0], b[1], b[2]};
    size_t caps[3] = {64, 40, 30};
    int tags[3] = {4, 9, 4}, sizes[4] = {-1, -1, -1, -1}, done = 0;
    /* the message sizes[0] reports */
    CHECK_EQ(g.in->ops->isend(g.in, g.s, b[0], 50, 0, NULL, NULL, &sreq), ncclSuccess);
    int irecvs = fst->irecvs;
    /* Not before the sender answered GROUPED (this rig has no sender: the answer is set
     * here; test_wrap.c has the question and the answer). */
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    CHECK_EQ(lg_conn_irecv(c, 3, data, caps, tags, NULL, &req), ncclSuccess);
    CHECK(req != NULL && fst->irecvs == irecvs && e->grouped == LG_GROUPED_ASKED);
    e->grouped = LG_GROUPED_ANSWERED;
    CHECK_EQ(lg_req_test(req, &done, sizes), ncclSuccess);
    CHECK(fst->irecvs == irecvs + 1 && fst->recv_n == 3);
    CHECK(fst->recv_tags[0] == 4 && fst->recv_tags[1] == 9 && fst->recv_tags[2] == 4);
    CHECK(fst->recv_sizes[0] == 64 && fst->recv_sizes[1] == 40 && fst->recv_sizes[2] == 30);
    CHECK_EQ(lg_req_test(req, &done, sizes), ncclSuccess);
    CHECK(done == 1 && sizes[0] == 50 && sizes[1] == 39 && sizes[2] == 28 && sizes[3] == -1);
    CHECK_EQ(__atomic_load_n(&c->placed, __ATOMIC_ACQUIRE), 3);
    /* A switch before the next group completes: posted again, whole, on the new comm. */
    CHECK_EQ(lg_conn_irecv(c, 2, data, caps, tags, NULL, &req), ncclSuccess);
    CHECK(fst->irecvs == irecvs + 2 && fst->recv_n == 2);
    lg_inner_ep_rx_forget(c);
    done = 0;
    for (int i = 0; i < 10 && !done; i++) /* a poll posts it again, a later one completes it */
        CHECK_EQ(lg_req_test(req, &done, sizes), ncclSuccess);
    CHECK(done == 1 && fst->irecvs == irecvs + 3 && fst->recv_n == 2);
    CHECK_EQ(__atomic_load_n(&c->placed, __ATOMIC_ACQUIRE), 5);
    wrap_rig_close(&g);
}

/* deregMr while a receive posted with that registration is in flight (aws-ofi-nccl's
 * inflight_close deregisters before it closes): a later post of the message, here after a
 * switch forgot the inner receive, hands the inner no registration instead of a freed one
 * (ASan would see the read of mr->mh). */
static void check_wrap_dereg_in_flight(void)
{
    static struct wrap_rig g;
    if (wrap_rig_open(&g, "ok", 6) != 0)
        return;
    struct lg_conn *c = g.c;
    struct lg_inner_conn *e = lg_inner_ep(c->ep);
    char buf[64];
    void *req = NULL, *data[1] = {buf};
    size_t caps[1] = {sizeof(buf)};
    int tags[1] = {0}, done = 0, sizes[1] = {-1};
    struct lg_inner_mr *mr = NULL;
    CHECK_EQ(lg_inner_ep_reg_mr(c, buf, sizeof(buf), NCCL_PTR_HOST, 0, -1, &mr), ncclSuccess);
    CHECK(mr != NULL);
    int irecvs = fst->irecvs;
    CHECK_EQ(lg_conn_irecv(c, 1, data, caps, tags, &mr, &req), ncclSuccess);
    CHECK(req != NULL && fst->irecvs == irecvs + 1);
    CHECK(e->req[0].imr == mr);
    CHECK_EQ(lg_inner_ep_dereg_mr(c, mr), ncclSuccess);
    CHECK(e->req[0].imr == NULL);
    lg_inner_ep_rx_forget(c);
    CHECK_EQ(lg_req_test(req, &done, sizes), ncclSuccess); /* posted again, no registration */
    CHECK(fst->irecvs == irecvs + 2);
    wrap_rig_close(&g);
}

/* Wrap mode's iflush: forwarded to the committed path's inner comm as a linkguard request
 * that test() completes through the inner's test; once that comm is fenced (closed), the
 * flush has nothing left to wait for and completes without calling the inner. */
static void check_wrap_flush(void)
{
    static struct wrap_rig g;
    if (wrap_rig_open(&g, "flush", 4) != 0)
        return;
    struct lg_conn *c = g.c;
    struct lg_path *p = g.p;
    char buf[64];
    void *req = NULL, *data[1] = {buf};
    int sizes[1] = {64}, done = 0;
    struct lg_inner_mr *mrs[1] = {NULL};
    int flushes = fst->flushes, tests = fst->tests;
    CHECK_EQ(lg_inner_ep_iflush(c, 1, data, sizes, mrs, &req), ncclSuccess);
    CHECK(req != NULL && fst->flushes == flushes + 1);
    ncclResult_t rc = ncclInternalError;
    CHECK_EQ(lg_inner_ep_flush_test(req, &done, &rc), 1);
    CHECK(done == 1 && rc == ncclSuccess && fst->tests == tests + 1);
    /* Re-armed (a fresh inner comm on the same path, inner_endpoint.h): the old comm's flush
     * is done. */
    CHECK_EQ(lg_inner_ep_iflush(c, 1, data, sizes, mrs, &req), ncclSuccess);
    lg_inner_ep_rearm(p);
    CHECK(lg_inner_tp(p->tp)->igen == 1 && lg_inner_tp(p->tp)->comm == NULL &&
          !lg_inner_ep_carries(p));
    /* as if the next handshake had ended (the fake's comms are tokens) */
    lg_inner_tp(p->tp)->comm = g.r;
    lg_inner_tp(p->tp)->ready = 1;
    CHECK_EQ(lg_inner_ep_flush_test(req, &done, &rc), 1);
    CHECK(done == 1 && rc == ncclSuccess && fst->tests == tests + 1);
    CHECK_EQ(lg_inner_ep_iflush(c, 1, data, sizes, mrs, &req), ncclSuccess);
    lg_inner_ep_fence(p);
    CHECK(lg_inner_ep_carries(p) == 0);
    done = 0;
    CHECK_EQ(lg_inner_ep_flush_test(req, &done, &rc), 1);
    CHECK(done == 1 && rc == ncclSuccess && fst->tests == tests + 1); /* no inner call */
    /* No committed comm: nothing to flush, NULL (complete) as for host memory. */
    CHECK_EQ(lg_inner_ep_iflush(c, 1, data, sizes, mrs, &req), ncclSuccess);
    CHECK(req == NULL && fst->flushes == flushes + 3);
    CHECK_EQ(lg_inner_ep_flush_test(buf, &done, &rc), 0); /* not one of ours */
    wrap_rig_close(&g);
}

/* The inner state is the transport's own (inner_conn.h): an endpoint per connection and state
 * per path object. A rebuild of a slot is a new object while the old one still stands there
 * (the receiver's may still carry the data): it starts with no comm, and fencing it leaves
 * the old one's comm alone. */
static void check_wrap_path_objects(void)
{
    static struct wrap_rig g;
    if (wrap_rig_open(&g, "ok", 6) != 0)
        return;
    struct lg_path *p = g.p;
    struct lg_path *q = lg_path_alloc(g.c, 0, "rail0", "peer"); /* slot 0's rebuild, gen 1 */
    CHECK(q != NULL && q->tp != NULL && q->tp != p->tp);
    q->gen = 1;
    CHECK(!lg_inner_ep_carries(q) && lg_inner_tp(q->tp)->comm == NULL && lg_inner_ep_carries(p));
    lg_inner_ep_fence(q);
    CHECK(lg_inner_ep_carries(p) && lg_inner_tp(p->tp)->comm == g.r && !lg_inner_tp(p->tp)->dead);
    lg_path_free(q);
    CHECK(lg_inner_ep_carries(p));
    wrap_rig_close(&g);
}

int main(void)
{
    find_build_dir();
    setenv("LGTCP_IFS", "lo", 1);
    lg_log_set(test_logger);
    lib_path(fake_path, sizeof(fake_path), "tests/libfake-inner.so");
    void *dl = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL);
    fst = dl ? dlsym(dl, "fake_inner_stats") : NULL;
    CHECK(fst != NULL);
    if (!fst) {
        fprintf(stderr, "cannot load %s (build it with make -C plugin)\n", fake_path);
        LG_TEST_DONE();
    }
    check_fake_v11(); /* first: the lazy table is still empty */
    check_fake_shared(8);
    check_fake_shared(10);
    for (int v = 0; v <= 11; v = v ? v + 1 : 8)
        check_lgtcp(v); /* 0: the newest (v12), then v8..v11 forced */
    check_open_errors();
    check_start_error(0, "initfail", "init failed", "ncclSystemError");
    check_start_error(8, "initfail", "init failed", NULL);
    check_start_error(0, "nodev", "has no devices", NULL);
    check_start_error(10, "nodev", "has no devices", NULL);
    check_start_error(0, "nullfn", "test is NULL after init", NULL);
    check_call_errors();
    check_wrap_flush();
    check_wrap_path_objects();
    check_wrap_grouped();
    check_wrap_dereg_in_flight();
    LG_TEST_DONE();
}
