/* Wrap mode end to end in one process: the real plugin core with LINKGUARD_INNER set to the
 * fake inner plugin's loop mode (tests/fake_inner_loop.h: a real in-process transport whose
 * sends complete only once placed), over loopback control channels (device 0 = lgt0 on
 * 127.0.0.1, lgt1 on 127.0.0.2, the fake's two devices). What the fake records is asserted:
 *  - one inner context per NCCL context, with its commId and trafficClass, used by the
 *    listen and connect of every path, and finalized only when the last comm made in it
 *    closes (NCCL's finalize may come first);
 *  - regMr registers with the inner comm of both paths before it returns, and fails there
 *    when the inner plugin refuses; a rebuilt path registers from the recorded registration,
 *    and a refusal then fails that path (reported) while the other carries the data;
 *  - iflush goes to the comm of the NIC that placed the data, also after a failover and
 *    after the move back;
 *  - with LINKGUARD_INNER_PLACED a send completes on the inner completion alone (no ack
 *    yet, and its receiver acks only when due), and sends completed that way whose receives were not yet seen complete are held
 *    by the receiver across a failover on either side, never sent again from the reused
 *    buffers; without it a send waits for the ack; a send into a grouped receive completes
 *    on the ack even so (a group completes whole: GROUPED);
 *  - traffic across a kill and the move back loses, repeats or corrupts nothing, both ways. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/connect.h"
#include "abi/core.h"
#include "abi/listen.h"
#include "fake_inner.h"
#include "lg_test.h"
#include "lg_test_build.h"
#include "lg_test_pair.h"
#include "linkguard_shm.h"
#include "proto/conn.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "transport/inner/inner_dev.h"
#include "transport/inner/inner_endpoint.h"

#define NBUF 8
#define BUFSZ 70000

static struct fake_inner_stats *fst;
static int refused_lines; /* INFO lines of an inner regMr failing on a path (atomic) */
static int stalled_lines; /* INFO lines of the wrap-mode watchdog (atomic) */

#define FST(f) __atomic_load_n(&fst->f, __ATOMIC_RELAXED)

struct pair {
    void *s, *r;
    char *sb[NBUF], *rb[NBUF];
    void *smh[NBUF], *rmh[NBUF];
};

static struct lg_conn *C(void *comm) { return comm; }

static int pair_open(struct pair *p, void *ctx)
{
    memset(p, 0, sizeof(*p));
    if (pair_connect_ctx(ctx, &p->s, &p->r) != 0)
        return -1;
    for (int i = 0; i < NBUF; i++) {
        p->sb[i] = malloc(BUFSZ);
        p->rb[i] = malloc(BUFSZ);
        if (lg_core_reg_mr(p->s, p->sb[i], BUFSZ, NCCL_PTR_HOST, &p->smh[i]) != ncclSuccess ||
            lg_core_reg_mr(p->r, p->rb[i], BUFSZ, NCCL_PTR_HOST, &p->rmh[i]) != ncclSuccess)
            return -1;
    }
    return 0;
}

static void pair_close(struct pair *p)
{
    for (int i = 0; i < NBUF; i++) {
        if (p->smh[i])
            lg_core_dereg_mr(p->s, p->smh[i]);
        if (p->rmh[i])
            lg_core_dereg_mr(p->r, p->rmh[i]);
        free(p->sb[i]);
        free(p->rb[i]);
    }
    if (p->s)
        lg_core_close_send(p->s);
    if (p->r)
        lg_core_close_recv(p->r);
}

static char pattern(uint64_t msg, size_t i) { return (char)(msg * 37 + i * 11 + (i >> 8)); }
static size_t size_of(uint64_t msg) { return (size_t[]){0, 1, 4096, BUFSZ, 777}[msg % 5]; }

static void *post_recv(struct pair *p, int k)
{
    void *d = p->rb[k], *mh = p->rmh[k], *req = NULL;
    size_t sz = BUFSZ;
    int tag = 0;
    memset(p->rb[k], 0xee, BUFSZ);
    uint64_t t0 = lg_now_ns();
    while (!req && lg_now_ns() - t0 < 2000000000ull)
        if (lg_core_irecv(p->r, 1, &d, &sz, &tag, &mh, &req) != ncclSuccess)
            return NULL;
    return req;
}

static void *post_send_tag(struct pair *p, int k, uint64_t msg, int tag)
{
    void *req = NULL;
    for (size_t i = 0; i < size_of(msg); i++)
        p->sb[k][i] = pattern(msg, i);
    uint64_t t0 = lg_now_ns();
    while (!req && lg_now_ns() - t0 < 2000000000ull)
        if (lg_core_isend(p->s, p->sb[k], size_of(msg), tag, p->smh[k], &req) != ncclSuccess)
            return NULL;
    return req;
}

static void *post_send(struct pair *p, int k, uint64_t msg) { return post_send_tag(p, k, msg, 0); }

/* Polls `req` until done (1), an error (-1) or max_s seconds (0); *size gets the size. */
static int wait_done(void *req, int *size, double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        int done = 0;
        if (lg_core_test(req, &done, size) != ncclSuccess)
            return -1;
        if (done)
            return 1;
        usleep(50);
    }
    return 0;
}

static int received_ok(struct pair *p, int k, uint64_t msg, int size)
{
    if ((size_t)size != size_of(msg))
        return 0;
    for (size_t i = 0; i < size_of(msg); i++)
        if (p->rb[k][i] != pattern(msg, i))
            return 0;
    return 1;
}

/* One message through buffers k, both requests polled as NCCL's proxy does: 1 when it
 * arrived intact. */
static int roundtrip(struct pair *p, int k, uint64_t msg)
{
    void *r = post_recv(p, k), *s = post_send(p, k, msg);
    int rdone = 0, sdone = 0, rsize = -1, ssize = -1;
    uint64_t t0 = lg_now_ns();
    while (r && s && (!rdone || !sdone) && lg_now_ns() - t0 < 10000000000ull) {
        if ((!rdone && lg_core_test(r, &rdone, &rsize) != ncclSuccess) ||
            (!sdone && lg_core_test(s, &sdone, &ssize) != ncclSuccess))
            return 0;
        usleep(20);
    }
    return rdone && sdone && received_ok(p, k, msg, rsize);
}

/* Breaks the sockets of a path (the monitor sees it fail and fails over). */
static void kill_path(void *comm, int slot)
{
    struct lg_path *p = __atomic_load_n(&C(comm)->paths[slot], __ATOMIC_ACQUIRE);
    if (!p)
        return;
    /* Its data sockets: the control session is shared with the other connections. */
    pthread_mutex_lock(&p->ctrl_mu);
    for (int i = 0; i < p->nstreams; i++)
        if (p->data[i].task.fd >= 0)
            shutdown(p->data[i].task.fd, SHUT_RDWR);
    pthread_mutex_unlock(&p->ctrl_mu);
}

static int committed_on(void *comm, int slot)
{
    struct lg_conn *c = C(comm);
    pthread_mutex_lock(&c->mu);
    struct lg_path *a = c->active_path;
    int on = c->active == slot && a && a == c->paths[slot] && lg_path_up(a) &&
             lg_inner_ep_carries(a);
    pthread_mutex_unlock(&c->mu);
    return on;
}

/* Both sides committed on `slot` with a working inner comm there, the other slot's path
 * carrying again too (rebuilt or re-armed); polls nothing (the monitor does it all). */
static int wait_settled(struct pair *p, int slot, double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        int ok = committed_on(p->s, slot) && committed_on(p->r, slot);
        for (int i = 0; i < 2 && ok; i++) {
            struct lg_path *q = C(i ? p->r : p->s)->paths[1 - slot];
            ok = q && lg_path_up(q) && lg_inner_ep_carries(q);
        }
        if (ok)
            return 1;
        usleep(1000);
    }
    return 0;
}

static uint32_t epoch_of(void *comm) { return __atomic_load_n(&C(comm)->epoch, __ATOMIC_ACQUIRE); }

/* Both sides committed a switch since epoch e0. */
static int wait_moved(struct pair *p, uint32_t e0, double max_s)
{
    uint64_t t0 = lg_now_ns();
    while (lg_now_ns() - t0 < (uint64_t)(max_s * 1e9)) {
        if (epoch_of(p->s) > e0 && epoch_of(p->r) > e0)
            return 1;
        usleep(1000);
    }
    return 0;
}

/* A kill of the primary on one side, the move to the backup, the rebuild and the move back. */
static int fail_and_return(struct pair *p, int kill_receiver)
{
    uint32_t e0 = epoch_of(p->s);
    kill_path(kill_receiver ? p->r : p->s, 0);
    return wait_moved(p, e0, 15) && wait_settled(p, 0, 15);
}

/* ---- contexts ------------------------------------------------------------------------------ */

static void test_contexts(void)
{
    void *a = NULL, *b = NULL;
    int live = FST(live_ctxs);
    CHECK_EQ(lg_core_ctx_new(0x1111, 5, &a), ncclSuccess);
    CHECK(FST(init_id) == 0x1111 && FST(connect_tc) == 5); /* v11: both go to the inner init */
    CHECK_EQ(lg_core_ctx_new(0x2222, -1, &b), ncclSuccess);
    CHECK(FST(init_id) == 0x2222 && FST(connect_tc) == -1);
    CHECK_EQ(FST(live_ctxs), live + 2);
    struct pair pa, pb;
    CHECK_EQ(pair_open(&pa, a), 0);
    CHECK(FST(listen_id) == 0x1111 && FST(connect_id) == 0x1111); /* both paths' comms */
    CHECK_EQ(pair_open(&pb, b), 0);
    CHECK(FST(listen_id) == 0x2222 && FST(connect_id) == 0x2222);
    CHECK(roundtrip(&pa, 0, 1) && roundtrip(&pb, 0, 2));
    /* NCCL may finalize before it closes: the inner context lives until its last comm. */
    CHECK_EQ(lg_core_ctx_free(a), ncclSuccess);
    CHECK_EQ(FST(live_ctxs), live + 2);
    CHECK(lg_core_ctx_free(a) != ncclSuccess); /* twice: an error, not a double free */
    pair_close(&pa);
    CHECK_EQ(FST(live_ctxs), live + 1);
    CHECK(FST(finalize_id) == 0x1111);
    pair_close(&pb);
    CHECK_EQ(FST(live_ctxs), live + 1);
    CHECK_EQ(lg_core_ctx_free(b), ncclSuccess);
    CHECK_EQ(FST(live_ctxs), live);
    CHECK(FST(finalize_id) == 0x2222);
    void *l = NULL;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    CHECK(lg_core_listen_ctx(handle, 0, handle, &l) != ncclSuccess && !l); /* not a context */
}

/* ---- registration --------------------------------------------------------------------------- */

static void test_registration(void)
{
    struct pair p;
    CHECK_EQ(pair_open(&p, NULL), 0);
    /* connect/accept returned with every path's inner comm there: regMr registered on both,
     * on each side, before it returned. */
    void *mh = NULL;
    char *buf = malloc(4096);
    int r0 = FST(regs[0]), r1 = FST(regs[1]);
    CHECK_EQ(lg_core_reg_mr(p.s, buf, 4096, NCCL_PTR_HOST, &mh), ncclSuccess);
    CHECK(FST(regs[0]) == r0 + 1 && FST(regs[1]) == r1 + 1);
    CHECK_EQ(lg_core_dereg_mr(p.s, mh), ncclSuccess);
    CHECK(FST(regs[0]) == r0 && FST(regs[1]) == r1);
    /* The inner plugin refuses: regMr fails right there, nothing stays registered. */
    __atomic_store_n(&fst->refuse_reg, 1, __ATOMIC_RELAXED);
    mh = NULL;
    CHECK(lg_core_reg_mr(p.r, buf, 4096, NCCL_PTR_HOST, &mh) != ncclSuccess && !mh);
    __atomic_store_n(&fst->refuse_reg, 0, __ATOMIC_RELAXED);
    CHECK(FST(regs[0]) == r0 && FST(regs[1]) == r1);
    /* A rebuilt path registers what was registered, from the record: after a kill of the
     * primary, the move to the backup, the rebuild and the move back, the fresh primary comm
     * of each side has all NBUF registrations (every buffer on both paths, both sides). */
    CHECK(fail_and_return(&p, 0));
    CHECK(FST(regs[0]) == r0 && FST(regs[1]) == r1);
    CHECK(roundtrip(&p, 1, 3));
    /* ... and when the inner plugin refuses then, that path fails (an INFO line naming
     * regMr) and is built again later, while the other one carries the data. */
    uint32_t e0 = epoch_of(p.s);
    int seen = __atomic_load_n(&refused_lines, __ATOMIC_ACQUIRE);
    __atomic_store_n(&fst->refuse_reg, 1, __ATOMIC_RELAXED);
    kill_path(p.r, 0);
    CHECK(wait_moved(&p, e0, 15));
    uint64_t t0 = lg_now_ns();
    while (__atomic_load_n(&refused_lines, __ATOMIC_ACQUIRE) == seen &&
           lg_now_ns() - t0 < 15000000000ull)
        usleep(1000);
    CHECK(__atomic_load_n(&refused_lines, __ATOMIC_ACQUIRE) > seen);
    CHECK(roundtrip(&p, 2, 4));
    __atomic_store_n(&fst->refuse_reg, 0, __ATOMIC_RELAXED);
    CHECK(wait_settled(&p, 0, 15));
    CHECK(roundtrip(&p, 3, 5));
    CHECK(FST(regs[0]) == r0 && FST(regs[1]) == r1);
    free(buf);
    pair_close(&p);
    CHECK(FST(regs[0]) == r0 - 2 * NBUF && FST(regs[1]) == r1 - 2 * NBUF);
}

/* ---- flush --------------------------------------------------------------------------------- */

static int flushed_on(struct pair *p, int k, int *dev)
{
    void *d = p->rb[k], *mh = p->rmh[k], *req = NULL;
    int sz = BUFSZ;
    __atomic_store_n(&fst->flush_dev, -1, __ATOMIC_RELAXED);
    if (lg_core_iflush(p->r, 1, &d, &sz, &mh, &req) != ncclSuccess)
        return -1;
    *dev = FST(flush_dev);
    return req ? wait_done(req, NULL, 5) : 1;
}

static void test_flush(void)
{
    struct pair p;
    int dev = -1;
    CHECK_EQ(pair_open(&p, NULL), 0);
    CHECK(roundtrip(&p, 0, 10));
    CHECK_EQ(FST(placed_dev), 0);
    CHECK(flushed_on(&p, 0, &dev) == 1 && dev == 0); /* placed by the primary NIC */
    /* After a kill, until the move back: a message placed by the backup NIC is flushed
     * there; once traffic is back on the rebuilt primary, a flush of that buffer still goes
     * to the backup NIC (its re-armed comm), not to the committed path. The window before
     * the move back (LINKGUARD_REJOIN_MS at least) is tried again if a loaded machine
     * misses it. */
    int seen = 0;
    for (int attempt = 0; attempt < 3 && !seen; attempt++) {
        uint32_t e0 = epoch_of(p.s);
        kill_path(p.r, 0);
        CHECK(wait_moved(&p, e0, 15));
        CHECK(roundtrip(&p, 1, 11));
        seen = FST(placed_dev) == 1;
        if (seen)
            CHECK(flushed_on(&p, 1, &dev) == 1 && dev == 1);
        CHECK(wait_settled(&p, 0, 15));
    }
    CHECK(seen);
    CHECK(flushed_on(&p, 1, &dev) == 1 && dev == 1);
    CHECK(roundtrip(&p, 2, 12));
    CHECK(FST(placed_dev) == 0 && flushed_on(&p, 2, &dev) == 1 && dev == 0);
    pair_close(&p);
}

/* ---- completion on placement ------------------------------------------------------------------ */

/* The receiver's receive is posted, the send is matched and copied at once by the fake (its
 * send completes: placed), but the receiver has not looked since, so no ack can exist. */
static void test_placed_completion(int placed)
{
    struct pair p;
    lg_inner_devs->placed = placed;
    CHECK_EQ(pair_open(&p, NULL), 0);
    /* A placed sender says so as its comms come up: its receiver then acks only when due. */
    uint64_t t0 = lg_now_ns();
    int *peer_placed = &lg_inner_ep(C(p.r)->ep)->peer_placed;
    while (placed && !__atomic_load_n(peer_placed, __ATOMIC_ACQUIRE) &&
           lg_now_ns() - t0 < 5000000000ull)
        usleep(1000);
    CHECK_EQ(__atomic_load_n(peer_placed, __ATOMIC_ACQUIRE), placed);
    /* Acknowledged: a send too big to keep in a copy (test_kept_sends has the small ones). */
    uint64_t msg = placed ? 20 : 23;
    void *r = post_recv(&p, 0), *s = post_send(&p, 0, msg);
    int done = 0, size = -1;
    CHECK(r && s && lg_core_test(s, &done, &size) == ncclSuccess);
    CHECK_EQ(done, placed);
    CHECK_EQ(__atomic_load_n(&C(p.r)->ack_sent, __ATOMIC_ACQUIRE), 0);
    CHECK(wait_done(r, &size, 10) == 1 && received_ok(&p, 0, msg, size));
    CHECK(placed || wait_done(s, &size, 10) == 1);
    /* The receive's completion acked it at once only for a sender that waits for acks. */
    CHECK_EQ(__atomic_load_n(&C(p.r)->ack_sent, __ATOMIC_ACQUIRE), !placed);
    pair_close(&p);
    lg_inner_devs->placed = 0;
}

/* Sends completed on placement and then reused (overwritten, as NCCL may) while their
 * receives were not yet seen complete; then a kill on one side. The receiver must hold
 * them (its fence or its commit completes them), so nothing is sent again from the
 * overwritten buffers: every one arrives intact, exactly once. */
static void test_placed_resync(int kill_receiver)
{
    struct pair p;
    void *rreq[NBUF], *sreq[NBUF];
    int size = -1, ok = 1;
    lg_inner_devs->placed = 1;
    CHECK_EQ(pair_open(&p, NULL), 0);
    for (int k = 0; k < NBUF; k++)
        CHECK((rreq[k] = post_recv(&p, k)) != NULL);
    for (int k = 0; k < NBUF; k++) {
        sreq[k] = post_send(&p, k, 30 + (uint64_t)k);
        CHECK(sreq[k] && wait_done(sreq[k], &size, 10) == 1);
        memset(p.sb[k], 0x5a, BUFSZ); /* NCCL reuses a completed send's buffer */
    }
    CHECK_EQ(__atomic_load_n(&C(p.s)->acked, __ATOMIC_ACQUIRE), NBUF);
    CHECK_EQ(__atomic_load_n(&C(p.r)->placed, __ATOMIC_ACQUIRE), 0); /* not seen yet */
    CHECK(fail_and_return(&p, kill_receiver));
    for (int k = 0; k < NBUF; k++)
        ok &= wait_done(rreq[k], &size, 10) == 1 && received_ok(&p, k, 30 + (uint64_t)k, size);
    CHECK(ok);
    CHECK(roundtrip(&p, 0, 40)); /* and on from there */
    pair_close(&p);
    lg_inner_devs->placed = 0;
}

/* A grouped receive (tags 1 and 2) and the send of tag 1 only: the inner plugin places it
 * and could complete its send, but the group completes whole and only once the other
 * message is in, so the receiver could not hold that message across a switch. The
 * receiver's GROUPED before its first group makes the sender complete on the ack instead:
 * no ack, no completion, so after a kill its buffer is still NCCL's untouched one and
 * the replay brings it; the group then completes with both messages. */
static void test_placed_group_switch(int kill_receiver)
{
    struct pair p;
    lg_inner_devs->placed = 1;
    CHECK_EQ(pair_open(&p, NULL), 0);
    uint64_t t0 = lg_now_ns();
    int *peer_placed = &lg_inner_ep(C(p.r)->ep)->peer_placed;
    while (!__atomic_load_n(peer_placed, __ATOMIC_ACQUIRE) && lg_now_ns() - t0 < 5000000000ull)
        usleep(1000);
    CHECK_EQ(__atomic_load_n(peer_placed, __ATOMIC_ACQUIRE), 1); /* a placed sender */
    void *bufs[2] = {p.rb[0], p.rb[1]}, *mhs[2] = {p.rmh[0], p.rmh[1]}, *rreq = NULL;
    size_t caps[2] = {BUFSZ, BUFSZ};
    int tags[2] = {1, 2}, sizes[2] = {-1, -1}, done = 0, sdone = 0, size = -1;
    memset(p.rb[0], 0xee, BUFSZ);
    memset(p.rb[1], 0xee, BUFSZ);
    CHECK(lg_core_irecv(p.r, 2, bufs, caps, tags, mhs, &rreq) == ncclSuccess && rreq);
    void *s0 = post_send_tag(&p, 0, 53, 1); /* 70000 bytes: too big to keep in a copy */
    CHECK(s0 != NULL);
    /* The group goes to the inner plugin once the sender answered; message 53 lands then. */
    int in = 0;
    t0 = lg_now_ns();
    while (s0 && !in && lg_now_ns() - t0 < 5000000000ull) {
        CHECK(lg_core_test(rreq, &done, sizes) == ncclSuccess && !done);
        CHECK(lg_core_test(s0, &sdone, &size) == ncclSuccess);
        in = received_ok(&p, 0, 53, (int)size_of(53));
        usleep(100);
    }
    CHECK(in);
    CHECK_EQ(__atomic_load_n(&lg_inner_ep(C(p.s)->ep)->grouped, __ATOMIC_ACQUIRE),
             LG_GROUPED_SENDER);
    for (int i = 0; i < 3; i++) /* its inner send is complete: test() sees that */
        CHECK(lg_core_test(s0, &sdone, &size) == ncclSuccess && !sdone);
    CHECK_EQ(__atomic_load_n(&C(p.s)->acked, __ATOMIC_ACQUIRE), 0);
    CHECK(fail_and_return(&p, kill_receiver));
    void *s1 = post_send_tag(&p, 1, 54, 2);
    CHECK(s1 && wait_done(rreq, sizes, 10) == 1);
    CHECK(received_ok(&p, 0, 53, sizes[0]) && received_ok(&p, 1, 54, sizes[1]));
    CHECK(wait_done(s0, &size, 10) == 1 && wait_done(s1, &size, 10) == 1);
    CHECK(roundtrip(&p, 2, 55)); /* and on from there */
    pair_close(&p);
    lg_inner_devs->placed = 0;
}

/* ---- sends kept in a copy (acknowledged completion) ---------------------------------------- */

/* Over an inner plugin whose send completes before placement (the fake's early completion),
 * a small host send completes on the inner completion alone, kept in a copy: no ack yet.
 * NCCL then overwrites its buffer, and the sender's primary dies before the message is placed
 * (the inner send is lost with its comm): the replay on the backup brings the bytes the send
 * had when posted, from the copy, registered on the backup for it. A send too big to keep, or
 * one of device memory, still waits for its ack. */
static void test_kept_sends(void)
{
    struct pair p;
    int size = -1, done = 0;
    lg_inner_devs->placed = 0;
    __atomic_store_n(&fst->early_send, 1, __ATOMIC_RELAXED);
    CHECK_EQ(pair_open(&p, NULL), 0);
    /* The sender says so as its comms come up (KEEPS): its receiver may then batch the acks
     * of messages up to that size. */
    uint64_t *keeps = &lg_inner_ep(C(p.r)->ep)->peer_keeps, t0 = lg_now_ns();
    while (!__atomic_load_n(keeps, __ATOMIC_ACQUIRE) && lg_now_ns() - t0 < 5000000000ull)
        usleep(1000);
    CHECK_EQ(__atomic_load_n(keeps, __ATOMIC_ACQUIRE), (uint64_t)lg_params.send_copy);
    uint32_t e0 = epoch_of(p.s);
    void *s = post_send(&p, 0, 2); /* 4096 bytes, no receive posted */
    CHECK(s && wait_done(s, &size, 10) == 1 && size == 4096);
    CHECK_EQ(__atomic_load_n(&C(p.s)->acked, __ATOMIC_ACQUIRE), 0);
    memset(p.sb[0], 0x5a, BUFSZ); /* NCCL reuses the completed send's buffer */
    void *big = post_send(&p, 1, 3); /* BUFSZ bytes: waits for its ack */
    CHECK(big && lg_core_test(big, &done, &size) == ncclSuccess && done == 0);
    kill_path(p.s, 0);
    CHECK(wait_moved(&p, e0, 15));
    void *r0 = post_recv(&p, 0), *r1 = post_recv(&p, 1);
    CHECK(r0 && wait_done(r0, &size, 10) == 1 && received_ok(&p, 0, 2, size));
    CHECK(r1 && wait_done(r1, &size, 10) == 1 && received_ok(&p, 1, 3, size));
    CHECK(wait_done(big, &size, 10) == 1 && size == BUFSZ);
    /* Device memory: the CPU cannot copy it, so the send waits for its ack, and asks for it
     * (its receiver batches the acks of that size). */
    void *dmh = NULL, *ds = NULL;
    CHECK_EQ(lg_core_reg_mr(p.s, p.sb[2], BUFSZ, NCCL_PTR_CUDA, &dmh), ncclSuccess);
    for (size_t i = 0; i < size_of(2); i++)
        p.sb[2][i] = pattern(2, i);
    t0 = lg_now_ns();
    while (dmh && !ds && lg_now_ns() - t0 < 2000000000ull)
        if (lg_core_isend(p.s, p.sb[2], size_of(2), 0, dmh, &ds) != ncclSuccess)
            break;
    CHECK(ds && lg_core_test(ds, &done, &size) == ncclSuccess && done == 0);
    CHECK(__atomic_load_n(&C(p.s)->ack_asked, __ATOMIC_ACQUIRE) >= 3); /* messages 0..2 */
    void *r2 = post_recv(&p, 2);
    CHECK(r2 && wait_done(r2, &size, 10) == 1 && received_ok(&p, 2, 2, size));
    CHECK(ds && wait_done(ds, &size, 10) == 1);
    if (dmh)
        lg_core_dereg_mr(p.s, dmh);
    CHECK(roundtrip(&p, 3, 4)); /* and on from there */
    pair_close(&p);
    __atomic_store_n(&fst->early_send, 0, __ATOMIC_RELAXED);
}

/* ---- a hung inner path -------------------------------------------------------------------- */

/* The primary's inner pair stops moving anything (a hung queue pair: carrier up, heartbeats
 * fine, every request stays posted): the receiver's watchdog sees the message the sender
 * handed to its inner plugin not arrive, fails the path, and the message is replayed on the
 * backup. Without the watchdog it would wait for the inner plugin's own timeouts. */
static void test_inner_stall(void)
{
    struct pair p;
    int size = -1;
    CHECK_EQ(pair_open(&p, NULL), 0);
    CHECK(roundtrip(&p, 0, 50));
    uint32_t e0 = epoch_of(p.s);
    int seen = __atomic_load_n(&stalled_lines, __ATOMIC_ACQUIRE);
    __atomic_store_n(&fst->stall_dev, 1, __ATOMIC_RELAXED); /* device 0: the primary */
    void *r = post_recv(&p, 1), *s = post_send(&p, 1, 51);
    int rdone = 0, sdone = 0, ssize = -1;
    uint64_t t0 = lg_now_ns();
    while (r && s && (!rdone || !sdone) && lg_now_ns() - t0 < 15000000000ull) {
        /* Both, as NCCL's proxy polls every request: the sender replays from its test(). */
        if ((!rdone && lg_core_test(r, &rdone, &size) != ncclSuccess) ||
            (!sdone && lg_core_test(s, &sdone, &ssize) != ncclSuccess))
            break;
        usleep(20);
    }
    CHECK(rdone && sdone && received_ok(&p, 1, 51, size));
    CHECK(wait_moved(&p, e0, 5));
    CHECK(__atomic_load_n(&stalled_lines, __ATOMIC_ACQUIRE) > seen);
    __atomic_store_n(&fst->stall_dev, 0, __ATOMIC_RELAXED);
    CHECK(roundtrip(&p, 2, 52));
    pair_close(&p);
}

/* ---- traffic across a kill and the move back --------------------------------------------------- */

/* NBUF messages in flight each way; the primary killed after 20, back on it after 60. */
static void test_traffic(int placed, int kill_receiver)
{
    struct pair ab, ba;
    struct pair *pp[2] = {&ab, &ba};
    void *rreq[2][NBUF], *sreq[2][NBUF];
    uint64_t posted[2] = {0}, done_s[2] = {0}, done_r[2] = {0};
    const uint64_t total = 120;
    int bad = 0, errors = 0, killed = 0;
    lg_inner_devs->placed = placed;
    CHECK_EQ(pair_open(&ab, NULL), 0);
    CHECK_EQ(pair_open(&ba, NULL), 0);
    uint32_t e0[2] = {epoch_of(ab.s), epoch_of(ba.s)};
    uint64_t t0 = lg_now_ns();
    while ((done_r[0] < total || done_r[1] < total || done_s[0] < total || done_s[1] < total) &&
           !errors && lg_now_ns() - t0 < 60000000000ull) {
        for (int f = 0; f < 2; f++) {
            struct pair *p = pp[f];
            while (posted[f] < total && posted[f] - done_r[f] < NBUF &&
                   posted[f] - done_s[f] < NBUF) {
                int k = (int)(posted[f] % NBUF);
                rreq[f][k] = post_recv(p, k);
                sreq[f][k] = post_send(p, k, posted[f]);
                errors += !rreq[f][k] || !sreq[f][k];
                posted[f]++;
            }
            int done = 0, size = -1;
            while (done_s[f] < posted[f] &&
                   lg_core_test(sreq[f][done_s[f] % NBUF], &done, &size) == ncclSuccess && done)
                done_s[f]++, done = 0;
            while (done_r[f] < posted[f] &&
                   lg_core_test(rreq[f][done_r[f] % NBUF], &done, &size) == ncclSuccess && done) {
                bad += !received_ok(p, (int)(done_r[f] % NBUF), done_r[f], size);
                done_r[f]++, done = 0;
            }
        }
        if (!killed && done_r[0] >= 20 && done_r[1] >= 20) {
            killed = 1;
            for (int f = 0; f < 2; f++)
                kill_path(kill_receiver ? pp[f]->r : pp[f]->s, 0);
        }
        usleep(20);
    }
    CHECK(killed && !errors && !bad);
    CHECK(done_r[0] == total && done_r[1] == total && done_s[0] == total && done_s[1] == total);
    CHECK(wait_moved(&ab, e0[0], 15) && wait_moved(&ba, e0[1], 15));
    CHECK(wait_settled(&ab, 0, 15) && wait_settled(&ba, 0, 15));
    CHECK(roundtrip(&ab, 0, 200) && roundtrip(&ba, 0, 201));
    pair_close(&ab);
    pair_close(&ba);
    lg_inner_devs->placed = 0;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    if (level > NCCL_LOG_INFO)
        return;
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (strstr(buf, "regMr failed on a path"))
        __atomic_add_fetch(&refused_lines, 1, __ATOMIC_ACQ_REL);
    if (strstr(buf, "stalled: the inner receive of message #"))
        __atomic_add_fetch(&stalled_lines, 1, __ATOMIC_ACQ_REL);
    if (level == NCCL_LOG_INFO && !getenv("LG_TEST_VERBOSE"))
        return;
    fprintf(stderr, "%s %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", buf);
}

int main(void)
{
    char fake[PATH_MAX];
    find_build_dir();
    lib_path(fake, sizeof(fake), "tests/libfake-inner.so");
    void *dl = dlopen(fake, RTLD_NOW | RTLD_LOCAL); /* the same object the plugin loads */
    fst = dl ? dlsym(dl, "fake_inner_stats") : NULL;
    CHECK(fst != NULL);
    if (!fst)
        LG_TEST_DONE();
    setenv("LINKGUARD_INNER", fake, 1);
    setenv("FAKE_INNER_MODE", "loop", 1);
    setenv("FAKE_INNER_DEVS", "lgt0,lgt1", 1);
    setenv(LG_SHM_PATH_ENV, "/nonexistent/linkguard.shm", 1); /* no daemon */
    fast_failover_env("3000");
    loopback_devices("lgt0", "lgt1");
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, logger), ncclSuccess);
    CHECK(lg_inner_devs != NULL);
    if (!lg_inner_devs)
        LG_TEST_DONE();
    test_contexts();
    test_registration();
    test_flush();
    test_placed_completion(0);
    test_placed_completion(1);
    test_placed_resync(0);
    test_placed_resync(1);
    test_placed_group_switch(0);
    test_placed_group_switch(1);
    test_inner_stall();
    test_kept_sends();
    test_traffic(0, 0);
    test_traffic(1, 1);
    test_traffic(1, 0);
    /* Early inner completion: the small sends complete kept, and a replay reads the copies. */
    __atomic_store_n(&fst->early_send, 1, __ATOMIC_RELAXED);
    test_traffic(0, 0);
    test_traffic(0, 1);
    __atomic_store_n(&fst->early_send, 0, __ATOMIC_RELAXED);
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    LG_TEST_DONE();
}
