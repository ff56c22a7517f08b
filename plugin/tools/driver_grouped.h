/* lg_nccl_driver --grouped: grouped receives (irecv of n = 1..8 buffers, tools/grouped_shape.h:
 * mixed sizes up to --size, mixed and repeated tags, buffers up to --recv-extra larger), the
 * sender posting each group's sends out of buffer order; --count groups per connection,
 * every byte and every reported size checked. Client -> server, one connection; --pace-us:
 * at most one group posted every N us (a long run for a fault to land in). Needs the main
 * file's D, drv_*, record_error() and completed(). */
#ifndef LG_DRIVER_GROUPED_H
#define LG_DRIVER_GROUPED_H

#include "grouped_shape.h"


struct grp_state {
    uint64_t posted, done; /* groups */
    int k, done_k;         /* sender: place in the group's send order */
    void *req[DRV_GROUPS][LG_GROUP_MAXN];
    double next_post;
};

static char *grp_slot(struct drv_comm *m, uint64_t g, int i)
{
    return m->buf + ((size_t)(g % DRV_GROUPS) * LG_GROUP_MAXN + (size_t)i) * m->slot_bytes;
}

static uint64_t grp_key(struct drv_comm *m, uint64_t g, int i)
{
    return drv_key(m->conn, m->dir, g * LG_GROUP_MAXN + (uint64_t)i);
}

static void grp_shape(struct drv_comm *m, uint64_t g, int i, size_t *cap, size_t *sz, int *tag)
{
    lg_group_shape(g, i, D.o.size, m->slot_bytes, cap, sz, tag);
}

static ncclResult_t grp_irecv(struct drv_comm *m, uint64_t g, void **req)
{
    struct drv_net *n = &D.net; /* for T8/T9/T12 */
    int cnt = lg_group_n(g), tags[LG_GROUP_MAXN], s8[LG_GROUP_MAXN];
    void *data[LG_GROUP_MAXN], *mhs[LG_GROUP_MAXN], *ph[LG_GROUP_MAXN] = {0};
    size_t caps[LG_GROUP_MAXN], sz;
    for (int i = 0; i < cnt; i++) {
        grp_shape(m, g, i, &caps[i], &sz, &tags[i]);
        data[i] = grp_slot(m, g, i);
        mhs[i] = m->mh;
        s8[i] = (int)caps[i];
        memset(data[i], 0xee, caps[i] < 64 ? caps[i] : 64); /* a stale buffer must not pass */
    }
    *req = NULL;
    switch (n->version) {
    case 8: return T8->irecv(m->comm, cnt, data, s8, tags, mhs, req);
    case 9: return T9->irecv(m->comm, cnt, data, caps, tags, mhs, req);
    default: return T12->irecv(m->comm, cnt, data, caps, tags, mhs, ph, req);
    }
}

/* One pass over the receiving comm: post groups, complete them in order, verify. */
static int grp_recv_pass(struct drv_comm *m, struct grp_state *st)
{
    int moved = 0;
    ncclResult_t rc;
    while (st->posted < m->limit && st->posted - st->done < DRV_GROUPS) {
        void *req;
        if ((rc = grp_irecv(m, st->posted, &req)) != ncclSuccess)
            return record_error("irecv", rc, m->conn), -1;
        if (!req)
            break;
        st->req[st->posted % DRV_GROUPS][0] = req;
        st->posted++;
        moved = 1;
    }
    while (st->done < st->posted) {
        uint64_t g = st->done;
        int done = 0, sizes[NCCL_PROXY_MAX_SUBS];
        for (int i = 0; i < NCCL_PROXY_MAX_SUBS; i++)
            sizes[i] = -1;
        if ((rc = drv_test(&D.net, st->req[g % DRV_GROUPS][0], &done, sizes)) != ncclSuccess)
            return record_error("test", rc, m->conn), -1;
        if (!done)
            break;
        for (int i = 0; i < lg_group_n(g); i++) {
            size_t cap, sz;
            int tag;
            grp_shape(m, g, i, &cap, &sz, &tag);
            if (sizes[i] != (int)sz)
                D.mismatched++;
            D.bytes_recv += (uint64_t)(sizes[i] > 0 ? sizes[i] : 0);
            long long bad = drv_verify(&D.pat, grp_slot(m, g, i), sz, grp_key(m, g, i));
            if (bad >= 0 && D.corrupt++ < 5)
                fprintf(stderr, "lg_nccl_driver: group %llu buffer %d (tag %d): wrong byte at "
                        "%lld\n", (unsigned long long)g, i, tag, bad);
        }
        D.mismatched += sizes[lg_group_n(g)] != -1; /* nothing written past the group */
        st->done++;
        completed(m, drv_now());
        moved = 1;
    }
    return moved;
}

/* One pass over the sending comm: the groups' sends in their send order, then completions. */
static int grp_send_pass(struct drv_comm *m, struct grp_state *st)
{
    int moved = 0;
    ncclResult_t rc;
    while (st->posted < m->limit && st->posted - st->done < DRV_GROUPS &&
           (st->k || drv_now() >= st->next_post)) {
        uint64_t g = st->posted;
        int i = lg_group_order(g, st->k), tag;
        size_t cap, sz;
        grp_shape(m, g, i, &cap, &sz, &tag);
        char *b = grp_slot(m, g, i);
        drv_fill(&D.pat, b, sz, grp_key(m, g, i));
        void *req = NULL;
        if ((rc = drv_isend(&D.net, m->comm, b, sz, tag, m->mh, &req)) != ncclSuccess)
            return record_error("isend", rc, m->conn), -1;
        if (!req)
            break;
        st->req[g % DRV_GROUPS][st->k] = req;
        if (++st->k == lg_group_n(g)) {
            st->k = 0, st->posted++;
            st->next_post = drv_now() + D.o.pace_us * 1e-6;
        }
        moved = 1;
    }
    while (st->done < st->posted || (st->done == st->posted && st->done_k < st->k)) {
        uint64_t g = st->done;
        int done = 0, size = -1, tag;
        if ((rc = drv_test(&D.net, st->req[g % DRV_GROUPS][st->done_k], &done, &size)))
            return record_error("test", rc, m->conn), -1;
        if (!done)
            break;
        size_t cap, sz;
        grp_shape(m, g, lg_group_order(g, st->done_k), &cap, &sz, &tag);
        D.mismatched += size != (int)sz;
        D.bytes_sent += sz;
        if (++st->done_k == lg_group_n(g)) {
            st->done_k = 0, st->done++;
            completed(m, drv_now());
        }
        moved = 1;
    }
    return moved;
}

static void run_grouped(double deadline)
{
    static struct grp_state st[2 * DRV_MAX_CONNS];
    memset(st, 0, sizeof(st));
    D.t_start = drv_now();
    uint64_t target = (uint64_t)D.ncomms * D.o.count;
    unsigned spins = 0;
    while (D.completions < target) {
        int moved = 0;
        for (int i = 0; i < D.ncomms; i++) {
            struct drv_comm *m = &D.comms[i];
            int r = m->send ? grp_send_pass(m, &st[i]) : grp_recv_pass(m, &st[i]);
            if (r < 0)
                return;
            moved |= r;
        }
        if (!moved) {
            sched_yield();
            if ((++spins & 1023) == 0 && drv_now() > deadline) {
                D.failure = "timed out with groups missing";
                return;
            }
        }
    }
}

#endif
