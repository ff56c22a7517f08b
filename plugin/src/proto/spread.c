/* Spreading backup paths over a backup set (see spread.h). */
#include "proto/spread.h"

#include <pthread.h>
#include <string.h>

#include "daemon/health.h"
#include "proto/conn.h"
#include "session/handle.h"

/* Backup paths per NIC of this process: one entry per NIC that ever carried one. */
static struct {
    pthread_mutex_t mu;
    int n;
    struct {
        char nic[IFNAMSIZ];
        int load;
    } e[LG_MAX_IFS];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under mu: the entry of `nic`, made on first use; NULL when the table is full. */
static int *load_of(const char *nic)
{
    for (int i = 0; i < S.n; i++)
        if (!strncmp(S.e[i].nic, nic, IFNAMSIZ))
            return &S.e[i].load;
    if (S.n == LG_MAX_IFS)
        return NULL;
    strncpy(S.e[S.n].nic, nic, IFNAMSIZ - 1);
    S.e[S.n].load = 0;
    return &S.e[S.n++].load;
}

int lg_spread_choose(const int *load, const int *usable, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (usable[i] && (best < 0 || load[i] < load[best]))
            best = i;
    return best;
}

int lg_spread_take(const struct lg_device *d)
{
    int load[LG_MAX_BACKUP_SET], usable[LG_MAX_BACKUP_SET];
    int alive = lg_health_alive();
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < d->nset; i++) {
        int *l = load_of(d->set[i].name);
        load[i] = l ? *l : 0;
        usable[i] = !alive || lg_health_usable(lg_health_state(lg_health_find(d->set[i].name),
                                                               NULL));
    }
    int j = lg_spread_choose(load, usable, d->nset);
    int *l = j >= 0 ? load_of(d->set[j].name) : NULL;
    if (l)
        (*l)++;
    pthread_mutex_unlock(&S.mu);
    return j;
}

void lg_spread_put(const char *nic)
{
    pthread_mutex_lock(&S.mu);
    int *l = load_of(nic);
    if (l && *l > 0)
        (*l)--;
    pthread_mutex_unlock(&S.mu);
}

int lg_spread_load(const char *nic)
{
    pthread_mutex_lock(&S.mu);
    int *l = load_of(nic);
    int v = l ? *l : 0;
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

int lg_spread_move(struct lg_conn *c)
{
    const struct lg_device *d = lg_device_get(c->dev);
    int j = d && c->spread_held ? lg_spread_take(d) : -1;
    if (j < 0)
        return 0;
    uint32_t ip;
    uint16_t port;
    if (!strncmp(d->set[j].name, c->nic[1], IFNAMSIZ) ||
        lg_spread_peer(&d->set[j], j, &c->peer, &ip, &port) != 0) {
        lg_spread_put(d->set[j].name); /* where it is already, or no peer on that rail */
        return 0;
    }
    lg_spread_put(c->nic[1]);
    lg_nic_name_copy(c->nic[1], d->set[j].name);
    c->local_ip[1] = d->set[j].ip;
    c->peer_ip[1] = ip;
    c->peer_port[1] = port;
    return 1;
}

const struct lg_nic *lg_spread_member(const struct lg_conn *c, uint32_t local_ip)
{
    return c->tr->any_backup_nic ? lg_device_set_member(lg_device_get(c->dev), local_ip) : NULL;
}
