/* Goodput holds per NIC (see nic_gray.h). */
#include "proto/nic_gray.h"

#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "daemon/devices.h"

static struct nic_hold {
    char nic[IFNAMSIZ];
    uint64_t until;
    char why[LG_NIC_GRAY_WHY];
} holds[2 * LG_MAX_DEVS]; /* every NIC of every device at most (under mu) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static struct nic_hold *find(const char *nic, int add)
{
    struct nic_hold *spare = NULL;
    for (size_t i = 0; i < sizeof(holds) / sizeof(holds[0]); i++) {
        if (holds[i].nic[0] && strncmp(holds[i].nic, nic, IFNAMSIZ) == 0)
            return &holds[i];
        if (!holds[i].nic[0] && !spare)
            spare = &holds[i];
    }
    if (add && spare)
        snprintf(spare->nic, sizeof(spare->nic), "%s", nic);
    return add ? spare : NULL;
}

void lg_nic_gray_hold(const char *nic, uint64_t until, const char *why)
{
    pthread_mutex_lock(&mu);
    struct nic_hold *h = nic && nic[0] ? find(nic, 1) : NULL;
    if (h && until > h->until) {
        h->until = until;
        if (why)
            snprintf(h->why, sizeof(h->why), "%s", why);
    }
    pthread_mutex_unlock(&mu);
}

uint64_t lg_nic_gray_until(const char *nic, char *why, size_t len)
{
    pthread_mutex_lock(&mu);
    const struct nic_hold *h = nic && nic[0] ? find(nic, 0) : NULL;
    uint64_t until = h ? h->until : 0;
    if (why && len)
        snprintf(why, len, "%s", h ? h->why : "");
    pthread_mutex_unlock(&mu);
    return until;
}

void lg_nic_gray_reset(void)
{
    pthread_mutex_lock(&mu);
    memset(holds, 0, sizeof(holds));
    pthread_mutex_unlock(&mu);
}
