/* Wrap mode: matching inner devices to NICs and building the pairs (see inner_pair.h). */
#include "transport/inner/inner_pair.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LG_KEY_NETDEV, LG_KEY_RDMA, LG_KEY_PCI, LG_KEY_COUNT };

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }
static int ports_ok(int a, int b) { return !a || !b || a == b; }

static int key_match(int key, const struct lg_inner_devid *d, const struct lg_nic_id *n)
{
    switch (key) {
    case LG_KEY_NETDEV: return same(d->name, n->netdev);
    case LG_KEY_RDMA: return same(d->name, n->rdma_dev) && ports_ok(d->port, n->rdma_port);
    default: return same(d->pci_real, n->pci_real) && ports_ok(d->port, n->rdma_port);
    }
}

int lg_inner_dev_duplicate_of(const struct lg_inner_devid *devs, int i)
{
    const struct lg_inner_devid *a = &devs[i];
    for (int j = 0; j < i; j++) {
        const struct lg_inner_devid *b = &devs[j];
        if (same(a->name, b->name) && !a->pci_real && !b->pci_real && a->port == b->port &&
            a->speed == b->speed)
            return j; /* (the lowest: j's own duplicates are above it) */
    }
    return -1;
}

/* The strongest key decides; two hits on it are ambiguous rather than a guess. */
#define LG_MATCH_BODY(count, a, b)                                        \
    for (int key = 0; key < LG_KEY_COUNT; key++) {                        \
        int hit = LG_MATCH_NONE;                                          \
        for (int i = 0; i < (count); i++) {                               \
            if (!key_match(key, (a), (b)))                                \
                continue;                                                 \
            if (hit != LG_MATCH_NONE)                                     \
                return LG_MATCH_AMBIGUOUS;                                \
            hit = i;                                                      \
        }                                                                 \
        if (hit != LG_MATCH_NONE)                                         \
            return hit;                                                   \
    }                                                                     \
    return LG_MATCH_NONE

int lg_inner_dev_match(const struct lg_inner_devid *devs, int ndev, const struct lg_nic_id *nic)
{
    LG_MATCH_BODY(ndev, &devs[i], nic);
}

int lg_inner_nic_match(const struct lg_nic_id *nics, int nnic, const struct lg_inner_devid *dev)
{
    LG_MATCH_BODY(nnic, dev, &nics[i]);
}

/* One name of a pair: an inner device name first, else a netdev. */
static int resolve(const char *name, const struct lg_inner_devid *devs, int ndev,
                   const struct lg_nic_id *nics, int nnic, struct lg_inner_member *m, char *err,
                   size_t errlen)
{
    int found = LG_MATCH_NONE, is_netdev = 0;
    for (int k = 0; k < nnic; k++)
        is_netdev |= same(nics[k].netdev, name);
    for (int i = 0; i < ndev && found != LG_MATCH_AMBIGUOUS; i++)
        if (same(devs[i].name, name))
            found = found == LG_MATCH_NONE ? i : LG_MATCH_AMBIGUOUS;
    if (found == LG_MATCH_AMBIGUOUS && !is_netdev) {
        snprintf(err, errlen, LG_INNER_SHARED_NAME_ERR, name);
        return -1;
    }
    if (found == LG_MATCH_AMBIGUOUS) /* a netdev: its own rules say which, or that none can */
        found = LG_MATCH_NONE;
    if (found != LG_MATCH_NONE) {
        m->dev = found;
        m->nic = lg_inner_nic_match(nics, nnic, &devs[found]);
        if (m->nic < 0)
            m->nic = LG_MATCH_NONE;
        return 0;
    }
    for (int k = 0; k < nnic; k++) {
        if (!same(nics[k].netdev, name))
            continue;
        int d = lg_inner_dev_match(devs, ndev, &nics[k]);
        if (d < 0) {
            snprintf(err, errlen, "netdev '%s' matches %s inner device (by name, RDMA device "
                     "or PCI path)%s", name, d == LG_MATCH_NONE ? "no" : "more than one",
                     d == LG_MATCH_NONE ? "" : "; make the inner plugin list that NIC once (its "
                     "own device or provider filter)");
            return -1;
        }
        m->dev = d;
        m->nic = k;
        return 0;
    }
    snprintf(err, errlen, "'%s' is neither an inner device nor a known netdev", name);
    return -1;
}

static int add_pair(struct lg_inner_pair *out, int count, int max, const char *const names[2],
                    const struct lg_inner_devid *devs, int ndev, const struct lg_nic_id *nics,
                    int nnic, char *err, size_t errlen)
{
    struct lg_inner_pair p = {.m = {{LG_MATCH_NONE, LG_MATCH_NONE}, {LG_MATCH_NONE, LG_MATCH_NONE}}};
    if (count == max) {
        snprintf(err, errlen, "more than %d devices", max);
        return -1;
    }
    for (int k = 0; k < 2; k++)
        if (names[k] && resolve(names[k], devs, ndev, nics, nnic, &p.m[k], err, errlen) != 0)
            return -1;
    p.has_backup = names[1] != NULL;
    if (p.has_backup && p.m[0].dev == p.m[1].dev) {
        snprintf(err, errlen, "'%s' and '%s' are the same inner device", names[0], names[1]);
        return -1;
    }
    for (int i = 0; i < count; i++)
        if (out[i].m[0].dev == p.m[0].dev) {
            snprintf(err, errlen, "inner device '%s' is the primary of two devices",
                     devs[p.m[0].dev].name);
            return -1;
        }
    out[count] = p;
    return 0;
}

/* Copies the trimmed text of [b, e) into out; -1 if empty or too long. */
static int token(const char *b, const char *e, char *out, size_t len)
{
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (e == b || (size_t)(e - b) >= len)
        return -1;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = 0;
    return 0;
}

int lg_inner_pairs_parse(const char *spec, const struct lg_inner_devid *devs, int ndev,
                         const struct lg_nic_id *nics, int nnic, struct lg_inner_pair *out,
                         int max, char *err, size_t errlen)
{
    int count = 0;
    for (const char *p = spec ? spec : ""; *p;) {
        const char *end = p + strcspn(p, ",");
        const char *colon = memchr(p, ':', (size_t)(end - p));
        char a[128], b[128];
        const char *names[2] = {a, colon ? b : NULL};
        if (token(p, colon ? colon : end, a, sizeof(a)) != 0 ||
            (colon && token(colon + 1, end, b, sizeof(b)) != 0)) {
            snprintf(err, errlen, "entry %d: a name is missing or too long", count + 1);
            return -1;
        }
        if (add_pair(out, count, max, names, devs, ndev, nics, nnic, err, errlen) != 0)
            return -1;
        count++;
        p = *end ? end + 1 : end;
    }
    return count;
}

int lg_inner_pairs_from_table(const struct lg_device_table *t, const struct lg_inner_devid *devs,
                              int ndev, const struct lg_nic_id *nics, int nnic,
                              struct lg_inner_pair *out, int max, char *err, size_t errlen)
{
    for (int i = 0; i < t->count; i++) {
        const struct lg_device *d = &t->dev[i];
        const char *names[2] = {d->nic[0].name, d->has_backup ? d->nic[1].name : NULL};
        if (add_pair(out, i, max, names, devs, ndev, nics, nnic, err, errlen) != 0)
            return -1;
    }
    return t->count;
}

int lg_inner_set_map(const struct lg_inner_devid *devs, int ndev, const struct lg_nic_id *ids,
                     int n, int primary, int first, int *out)
{
    int own = 0;
    for (int k = 0; k < n; k++) {
        int m = k ? lg_inner_dev_match(devs, ndev, &ids[k]) : first;
        for (int j = 0; j < k && m >= 0; j++)
            if (m == out[j])
                m = LG_MATCH_CLASH;
        if (m >= 0 && m == primary)
            m = LG_MATCH_CLASH;
        out[k] = m;
        own += m >= 0;
    }
    return own;
}

int lg_nic_rdma_id(const char *sysfs_root, const char *ifname, char *dev, size_t len, int *port)
{
    char path[PATH_MAX];
    const char *root = sysfs_root && *sysfs_root ? sysfs_root : "/sys";
    snprintf(path, sizeof(path), "%s/class/net/%s/device/infiniband", root, ifname);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)) && found < 0)
        if (e->d_name[0] != '.' && (size_t)snprintf(dev, len, "%s", e->d_name) < len)
            found = 0;
    closedir(d);
    *port = 0;
    snprintf(path, sizeof(path), "%s/class/net/%s/dev_port", root, ifname);
    FILE *f = found == 0 ? fopen(path, "re") : NULL;
    int dp;
    if (f) {
        if (fscanf(f, "%d", &dp) == 1 && dp >= 0 && dp < 255)
            *port = dp + 1; /* dev_port counts from 0, verbs ports from 1 */
        fclose(f);
    }
    return found;
}

int lg_nic_pci_real(const char *sysfs_root, const char *ifname, char *out, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/class/net/%s/device",
             sysfs_root && *sysfs_root ? sysfs_root : "/sys", ifname);
    char *rp = realpath(path, NULL);
    if (!rp)
        return -1;
    int n = snprintf(out, len, "%s", rp);
    free(rp);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
