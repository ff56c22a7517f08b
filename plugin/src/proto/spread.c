/* Spreading backup paths over a backup set (see spread.h). */
#include "proto/spread.h"

#include <pthread.h>
#include <string.h>

#include "daemon/health.h"
#include "proto/conn.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "session/handle.h"

/* Backup paths per NIC of this process, and of each device: one entry per NIC that ever
 * carried one. The re-spread state: each device's generation (moved by a return of one of its
 * NICs), what each of its NICs was at the last look, and this heartbeat period's budget. */
static struct {
    pthread_mutex_t mu;
    int n;
    struct {
        char nic[IFNAMSIZ];
        int load;
    } e[LG_MAX_IFS];
    int dload[LG_MAX_DEVS][LG_MAX_IFS]; /* [dev][entry] */
    uint32_t gen[LG_MAX_DEVS];          /* atomic */
    /* monitor thread only */
    uint64_t health_gen;
    int alive, watched;
    uint8_t seen[LG_MAX_DEVS][1 + LG_MAX_BACKUP_SET]; /* 1: usable at the last look; 2: not */
    /* under mu */
    uint64_t window_ns;
    int moves;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under mu: the index of `nic`'s entry, made on first use; -1 when the table is full. */
static int entry_of(const char *nic)
{
    for (int i = 0; i < S.n; i++)
        if (!strncmp(S.e[i].nic, nic, IFNAMSIZ))
            return i;
    if (S.n == LG_MAX_IFS)
        return -1;
    strncpy(S.e[S.n].nic, nic, IFNAMSIZ - 1);
    S.e[S.n].nic[IFNAMSIZ - 1] = 0;
    S.e[S.n].load = 0;
    for (int d = 0; d < LG_MAX_DEVS; d++)
        S.dload[d][S.n] = 0;
    return S.n++;
}

static int dev_ok(int dev) { return dev >= 0 && dev < LG_MAX_DEVS; }

/* Under mu: one more (dir 1) or one fewer (-1) backup on `nic` for device `dev`. */
static void count(int dev, const char *nic, int dir)
{
    int e = entry_of(nic);
    if (e < 0)
        return;
    if (dir > 0 || S.e[e].load > 0)
        S.e[e].load += dir;
    if (dev_ok(dev) && (dir > 0 || S.dload[dev][e] > 0))
        S.dload[dev][e] += dir;
}

int lg_spread_choose(const int *dload, const int *pload, const int *usable, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (usable[i] && (best < 0 || dload[i] < dload[best] ||
                          (dload[i] == dload[best] && pload && pload[i] < pload[best])))
            best = i;
    return best;
}

/* Under mu: the counts and usability of d's members. */
static void loads(int dev, const struct lg_device *d, int *dload, int *pload, int *usable)
{
    int alive = lg_health_alive();
    for (int i = 0; i < d->nset; i++) {
        int e = entry_of(d->set[i].name);
        pload[i] = e >= 0 ? S.e[e].load : 0;
        dload[i] = e >= 0 && dev_ok(dev) ? S.dload[dev][e] : 0;
        usable[i] = !alive || lg_health_usable(lg_health_state(lg_health_find(d->set[i].name),
                                                               NULL));
    }
}

int lg_spread_take(int dev, const struct lg_device *d)
{
    int dload[LG_MAX_BACKUP_SET], pload[LG_MAX_BACKUP_SET], usable[LG_MAX_BACKUP_SET];
    pthread_mutex_lock(&S.mu);
    loads(dev, d, dload, pload, usable);
    int j = lg_spread_choose(dload, pload, usable, d->nset);
    if (j >= 0)
        count(dev, d->set[j].name, 1);
    pthread_mutex_unlock(&S.mu);
    return j;
}

void lg_spread_put(int dev, const char *nic)
{
    pthread_mutex_lock(&S.mu);
    count(dev, nic, -1);
    pthread_mutex_unlock(&S.mu);
}

int lg_spread_load(const char *nic)
{
    pthread_mutex_lock(&S.mu);
    int e = entry_of(nic);
    int v = e >= 0 ? S.e[e].load : 0;
    pthread_mutex_unlock(&S.mu);
    return v;
}

int lg_spread_dev_load(int dev, const char *nic)
{
    pthread_mutex_lock(&S.mu);
    int e = entry_of(nic);
    int v = e >= 0 && dev_ok(dev) ? S.dload[dev][e] : 0;
    pthread_mutex_unlock(&S.mu);
    return v;
}

int lg_spread_peer(const struct lg_nic *local, int j, const struct lg_handle *h, uint32_t *ip,
                   uint16_t *port)
{
    uint32_t ips[LG_HANDLE_MAX_SET];
    uint16_t ports[LG_HANDLE_MAX_SET];
    int n = 0;
    if (h->flags & LG_HANDLE_F_BACKUP) {
        ips[n] = h->ip[1];
        ports[n++] = h->port[1];
    }
    for (int k = 0; n && k < h->nmore && n < LG_HANDLE_MAX_SET; k++) {
        ips[n] = h->more_ip[k];
        ports[n++] = h->more_port[k];
    }
    int pick = -1;
    for (int k = 0; local->mask && k < n && pick < 0; k++)
        if (!((ips[k] ^ local->ip) & local->mask))
            pick = k;
    if (pick < 0 && j >= 0 && j < n)
        pick = j;
    if (pick < 0)
        return -1;
    *ip = ips[pick];
    *port = ports[pick];
    return 0;
}

/* c's backup slot onto member j of d's set, on the listener's NIC of that rail: 0, or -1 when
 * the handle names none (nothing changed). */
static int retarget(struct lg_conn *c, const struct lg_device *d, int j)
{
    uint32_t ip;
    uint16_t port;
    if (lg_spread_peer(&d->set[j], j, &c->peer, &ip, &port) != 0)
        return -1;
    lg_nic_name_copy(c->nic[1], d->set[j].name);
    c->local_ip[1] = d->set[j].ip;
    c->peer_ip[1] = ip;
    c->peer_port[1] = port;
    return 0;
}

int lg_spread_move(struct lg_conn *c)
{
    const struct lg_device *d = lg_device_get(c->dev);
    int j = d && c->spread_held ? lg_spread_take(c->dev, d) : -1;
    if (j < 0)
        return 0;
    char from[IFNAMSIZ];
    lg_nic_name_copy(from, c->nic[1]);
    if (!strncmp(d->set[j].name, from, IFNAMSIZ) || retarget(c, d, j) != 0) {
        lg_spread_put(c->dev, d->set[j].name); /* where it is already, or no peer on that rail */
        return 0;
    }
    lg_spread_put(c->dev, from);
    return 1;
}

/* ---- re-spreading after a return ---------------------------------------------------------- */

int lg_spread_respread_target(const int *dload, const int *pload, const int *usable, int n,
                              int cur)
{
    if (n < 2 || cur < 0 || cur >= n)
        return -1;
    int others[LG_MAX_BACKUP_SET];
    for (int i = 0; i < n && i < LG_MAX_BACKUP_SET; i++)
        others[i] = usable[i] && i != cur;
    int t = lg_spread_choose(dload, pload, others, n < LG_MAX_BACKUP_SET ? n : LG_MAX_BACKUP_SET);
    return t >= 0 && dload[cur] - dload[t] >= 2 ? t : -1;
}

int lg_spread_may_move(const struct lg_spread_standby *s)
{
    return s->spread && s->active == 0 && s->committed && s->primary_works && s->standby_up &&
           !s->switching && !s->rebuilding && !s->held;
}

uint32_t lg_spread_gen(int dev)
{
    return dev_ok(dev) ? __atomic_load_n(&S.gen[dev], __ATOMIC_ACQUIRE) : 0;
}

void lg_spread_watch(uint64_t now)
{
    (void)now;
    uint64_t g = lg_health_poll();
    int alive = lg_health_alive();
    if (S.watched && g == S.health_gen && alive == S.alive)
        return;
    S.watched = 1;
    S.health_gen = g;
    S.alive = alive;
    for (int dev = 0; dev < LG_MAX_DEVS; dev++) {
        const struct lg_device *d = lg_device_get(dev);
        if (!d)
            break;
        if (d->nset < 2)
            continue; /* a pair never spreads */
        int back = 0;
        for (int k = 0; k <= d->nset && k <= LG_MAX_BACKUP_SET; k++) {
            const char *name = k ? d->set[k - 1].name : d->nic[0].name;
            int ok = !alive || lg_health_usable(lg_health_state(lg_health_find(name), NULL));
            uint8_t was = S.seen[dev][k];
            if (was == 2 && ok)
                back = 1; /* not usable at the last look, usable now: it returned */
            S.seen[dev][k] = ok ? 1 : 2;
        }
        if (back) {
            __atomic_add_fetch(&S.gen[dev], 1, __ATOMIC_RELEASE);
            LG_INFO(NCCL_NET, "dev %d: a NIC of the device or its backup set is usable again; "
                    "its idle standby paths re-spread over the set (gen %u)", dev,
                    lg_spread_gen(dev));
        }
    }
}

int lg_spread_respread(struct lg_conn *c, uint64_t now)
{
    const struct lg_device *d = lg_device_get(c->dev);
    if (!d || !c->spread_held || d->nset < 2)
        return -1;
    int dload[LG_MAX_BACKUP_SET], pload[LG_MAX_BACKUP_SET], usable[LG_MAX_BACKUP_SET];
    int cur = -1;
    for (int i = 0; i < d->nset && cur < 0; i++)
        if (!strncmp(d->set[i].name, c->nic[1], IFNAMSIZ))
            cur = i;
    pthread_mutex_lock(&S.mu);
    loads(c->dev, d, dload, pload, usable);
    int t = lg_spread_respread_target(dload, pload, usable, d->nset, cur);
    uint64_t period = LG_MS(lg_params.heartbeat_ms);
    if (t >= 0 && now - S.window_ns >= period) {
        S.window_ns = now;
        S.moves = 0;
    }
    if (t >= 0 && S.moves >= lg_params.respread_moves)
        t = LG_SPREAD_LATER;
    else if (t >= 0 && retarget(c, d, t) != 0)
        t = -1; /* the listener names no NIC on that rail: it stays */
    if (t >= 0) {
        S.moves++;
        count(c->dev, d->set[cur].name, -1);
        count(c->dev, d->set[t].name, 1);
    }
    pthread_mutex_unlock(&S.mu);
    return t;
}

void lg_spread_reset(void)
{
    pthread_mutex_lock(&S.mu);
    S.n = 0;
    memset(S.dload, 0, sizeof(S.dload));
    for (int d = 0; d < LG_MAX_DEVS; d++)
        __atomic_store_n(&S.gen[d], 0, __ATOMIC_RELEASE);
    S.watched = 0;
    memset(S.seen, 0, sizeof(S.seen));
    S.window_ns = 0;
    S.moves = 0;
    pthread_mutex_unlock(&S.mu);
}

const struct lg_nic *lg_spread_member(const struct lg_conn *c, uint32_t local_ip)
{
    return c->tr->any_backup_nic ? lg_device_set_member(lg_device_get(c->dev), local_ip) : NULL;
}
