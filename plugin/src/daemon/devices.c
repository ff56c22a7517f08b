/* Device discovery: NIC pairs from LINKGUARD_PAIRS or from the interface list, and their
 * properties from sysfs. */
#include "daemon/devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/health.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"

int lg_ifaces_scan(struct lg_ifinfo *out, int max)
{
    struct ifaddrs *ifa0, *ifa;
    int n = 0;
    if (getifaddrs(&ifa0) != 0)
        return -1;
    for (ifa = ifa0; ifa; ifa = ifa->ifa_next) {
        int i;
        for (i = 0; i < n; i++)
            if (!strcmp(out[i].name, ifa->ifa_name))
                break;
        if (i == n) {
            if (n == max || strlen(ifa->ifa_name) >= IFNAMSIZ)
                continue;
            memset(&out[n], 0, sizeof(out[n]));
            strcpy(out[n].name, ifa->ifa_name);
            n++;
        }
        out[i].up = !!(ifa->ifa_flags & IFF_UP);
        out[i].loopback = !!(ifa->ifa_flags & IFF_LOOPBACK);
        if (!out[i].ip && ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET) {
            out[i].ip = ((struct sockaddr_in *)ifa->ifa_addr)->sin_addr.s_addr;
            if (ifa->ifa_netmask)
                out[i].mask = ((struct sockaddr_in *)ifa->ifa_netmask)->sin_addr.s_addr;
        }
    }
    freeifaddrs(ifa0);
    return n;
}

const struct lg_nic *lg_device_set_member(const struct lg_device *d, uint32_t ip)
{
    for (int k = 0; d && k < d->nset; k++)
        if (d->set[k].ip == ip)
            return &d->set[k];
    return NULL;
}

static const struct lg_ifinfo *find_if(const struct lg_ifinfo *ifs, int nifs, const char *name)
{
    for (int i = 0; i < nifs; i++)
        if (!strcmp(ifs[i].name, name))
            return &ifs[i];
    return NULL;
}

/* Copies one trimmed name from [b, e) into out; -1 if empty or too long. */
static int take_name(const char *b, const char *e, char out[IFNAMSIZ])
{
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (e == b || e - b >= IFNAMSIZ)
        return -1;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = 0;
    return 0;
}

static int resolve(const char *name, const struct lg_ifinfo *ifs, int nifs, struct lg_nic *nic,
                   char *err, size_t errlen)
{
    const struct lg_ifinfo *fi = find_if(ifs, nifs, name);
    if (!fi) {
        snprintf(err, errlen, "unknown interface '%s'", name);
        return -1;
    }
    if (!fi->ip) {
        snprintf(err, errlen, "interface '%s' has no IPv4 address", name);
        return -1;
    }
    memset(nic, 0, sizeof(*nic));
    strcpy(nic->name, fi->name);
    nic->ip = fi->ip;
    nic->mask = fi->mask;
    return 0;
}

int lg_devices_from_pairs(const char *spec, const struct lg_ifinfo *ifs, int nifs, int backup,
                          struct lg_device_table *t, char *err, size_t errlen)
{
    t->count = 0;
    if (!spec)
        return 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(end - p));
        char prim[IFNAMSIZ], back[IFNAMSIZ] = "";
        int entry = t->count + 1;
        if (take_name(p, colon ? colon : end, prim) != 0) {
            snprintf(err, errlen, "entry %d: missing or too long primary interface name", entry);
            return -1;
        }
        if (colon && take_name(colon + 1, end, back) != 0) {
            snprintf(err, errlen, "entry %d ('%s'): missing or too long backup name", entry, prim);
            return -1;
        }
        if (back[0] && !strcmp(prim, back)) {
            snprintf(err, errlen, "NIC '%s' is paired with itself", prim);
            return -1;
        }
        if (t->count == LG_MAX_DEVS) {
            snprintf(err, errlen, "more than %d devices", LG_MAX_DEVS);
            return -1;
        }
        for (int i = 0; i < t->count; i++)
            if (!strcmp(t->dev[i].nic[0].name, prim)) {
                snprintf(err, errlen, "'%s' is the primary of two devices", prim);
                return -1;
            }
        struct lg_device *d = &t->dev[t->count];
        memset(d, 0, sizeof(*d));
        if (resolve(prim, ifs, nifs, &d->nic[0], err, errlen) != 0)
            return -1;
        if (back[0]) {
            /* The backup is checked even when disabled: a typo should not wait for the day
             * the backup is switched on. */
            if (resolve(back, ifs, nifs, &d->nic[1], err, errlen) != 0)
                return -1;
            d->has_backup = backup;
            d->nset = backup; /* a pair's set is its backup alone */
            d->set[0] = d->nic[1];
        }
        t->count++;
        p = *end ? end + 1 : end;
    }
    return t->count;
}

int lg_ifname_match(const char *spec, const char *name)
{
    if (!spec || !*spec)
        return 1;
    int exclude = *spec == '^';
    spec += exclude;
    int exact = *spec == '=';
    spec += exact;
    int hit = 0;
    for (const char *p = spec; *p && !hit;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && (exact ? strlen(name) == len && !strncmp(name, p, len)
                          : !strncmp(name, p, len)))
            hit = 1;
        p = end ? end + 1 : p + len;
    }
    return exclude ? !hit : hit;
}

int lg_devices_from_ifaces(const struct lg_ifinfo *ifs, int nifs, int backup, const char *ifname,
                           struct lg_device_table *t, char *err, size_t errlen)
{
    int idx[LG_MAX_DEVS], n = 0;
    for (int i = 0; i < nifs && n < LG_MAX_DEVS; i++)
        if (ifs[i].up && !ifs[i].loopback && ifs[i].ip && lg_ifname_match(ifname, ifs[i].name))
            idx[n++] = i;
    t->count = 0;
    for (int k = 0; k < n; k++) {
        struct lg_device *d = &t->dev[k];
        memset(d, 0, sizeof(*d));
        if (resolve(ifs[idx[k]].name, ifs, nifs, &d->nic[0], err, errlen) != 0)
            return -1;
        if (n > 1 && backup) {
            if (resolve(ifs[idx[(k + 1) % n]].name, ifs, nifs, &d->nic[1], err, errlen) != 0)
                return -1;
            d->has_backup = 1;
            d->nset = 1;
            d->set[0] = d->nic[1];
        }
    }
    t->count = n;
    return n;
}

/* A NIC of the daemon's table: its netdev and first IPv4 address (else the interface's). */
_Static_assert(LG_MAX_BACKUP_SET == LG_SHM_MAX_BACKUPS, "a device holds a whole set");

static int shm_nic(const struct lg_shm_nic *e, const struct lg_ifinfo *ifs, int nifs,
                   struct lg_nic *out)
{
    char name[IFNAMSIZ];
    size_t n = strnlen(e->name, sizeof(e->name));
    if (n == 0 || n >= IFNAMSIZ)
        return -1;
    memcpy(name, e->name, n);
    name[n] = 0;
    const struct lg_ifinfo *fi = find_if(ifs, nifs, name);
    uint32_t ip = e->n_ipv4 > 0 ? e->ipv4[0] : fi ? fi->ip : 0;
    if (!ip)
        return -1;
    memset(out, 0, sizeof(*out));
    memcpy(out->name, name, n + 1);
    out->ip = ip;
    out->mask = fi && fi->ip == ip ? fi->mask : 0; /* the table has no prefix lengths */
    return 0;
}

/* What a device source sees. */
struct lg_dev_source_ctx {
    const struct lg_ifinfo *ifs;
    int nifs;
    int single; /* standalone lgtcp: one NIC per device */
    int backup;
};

static int source_env(const struct lg_dev_source_ctx *x, struct lg_device_table *t, char *err,
                      size_t errlen)
{
    const char *spec = x->single ? lg_params.tcp_ifs : lg_params.pairs;
    return lg_devices_from_pairs(spec, x->ifs, x->nifs, x->backup, t, err, errlen);
}

static int source_ifaces(const struct lg_dev_source_ctx *x, struct lg_device_table *t,
                         char *err, size_t errlen)
{
    return lg_devices_from_ifaces(x->ifs, x->nifs, x->backup, lg_params.ifname, t, err, errlen);
}

int lg_devices_from_shm(const struct lg_shm_snapshot *snap, const struct lg_ifinfo *ifs,
                        int nifs, int backup, const char *ifname, struct lg_device_table *t)
{
    t->count = 0;
    for (uint32_t i = 0; i < snap->nic_count && t->count < LG_MAX_DEVS; i++) {
        const struct lg_shm_nic *e = &snap->nics[i];
        struct lg_nic nic;
        if (shm_nic(e, ifs, nifs, &nic) != 0 || !lg_ifname_match(ifname, nic.name))
            continue; /* no IPv4 address (yet): not a device for a TCP transport */
        struct lg_device *d = &t->dev[t->count];
        memset(d, 0, sizeof(*d));
        d->nic[0] = nic;
        /* The set; without one (a table before sets) the backup index alone. */
        uint32_t one = (uint32_t)e->backup_index;
        const uint8_t *members = e->n_backups ? e->backup_set : NULL;
        uint32_t nb = !backup ? 0 : e->n_backups ? LG_MIN(e->n_backups, LG_MAX_BACKUP_SET)
                                                 : e->backup_index >= 0;
        for (uint32_t k = 0; k < nb; k++) {
            uint32_t b = members ? members[k] : one;
            if (b < snap->nic_count && b != i &&
                shm_nic(&snap->nics[b], ifs, nifs, &d->set[d->nset]) == 0 &&
                lg_ifname_match(ifname, d->set[d->nset].name))
                d->nset++;
        }
        d->has_backup = d->nset > 0;
        if (d->has_backup)
            d->nic[1] = d->set[0];
        t->count++;
    }
    return t->count;
}

static int source_shm(const struct lg_dev_source_ctx *x, struct lg_device_table *t, char *err,
                      size_t errlen)
{
    static struct lg_shm_snapshot snap; /* init runs under NCCL's global mutex */
    if (x->single || lg_health_snapshot(&snap) != LG_SHM_OK)
        return 0; /* no live daemon: the next source */
    int n = lg_devices_from_shm(&snap, x->ifs, x->nifs, x->backup, lg_params.ifname, t);
    /* A daemon that watches NICs decides which exist: never offer others (a management
     * network, a NIC it was told to leave alone) because none of its NICs is usable yet. A
     * daemon watching none is no daemon. */
    if (n == 0 && snap.nic_count > 0) {
        char names[128] = "";
        for (uint32_t i = 0; i < snap.nic_count; i++) {
            size_t len = strlen(names);
            snprintf(names + len, sizeof(names) - len, "%s%.*s", i ? "," : "",
                     (int)sizeof(snap.nics[i].name), snap.nics[i].name);
        }
        snprintf(err, errlen, "the daemon's table lists NIC(s) %s, but none has an IPv4 "
                 "address and passes LINKGUARD_IFNAME=\"%s\"; no other NIC is used while the "
                 "daemon runs", names, lg_params.ifname);
        return -1;
    }
    return n;
}

/* Device sources, tried in order; the first that yields devices wins. Contract: return the
 * device count, 0 when the source is absent (try the next), or -1 with a message in err when
 * it is present but wrong (init then fails with a WARN naming the problem).
 * DESIGN.md: "from the daemon's table, else from LINKGUARD_PAIRS", else every interface. */
static const struct lg_dev_source {
    const char *name;
    int (*fn)(const struct lg_dev_source_ctx *, struct lg_device_table *, char *, size_t);
} lg_dev_sources[] = {
    {"daemon", source_shm},
    {"environment", source_env},
    {"interfaces", source_ifaces},
};

int lg_devices_discover(struct lg_device_table *t, int single)
{
    static struct lg_ifinfo ifs[LG_MAX_IFS]; /* init runs under NCCL's global mutex */
    char err[512] = "";
    int nifs = lg_ifaces_scan(ifs, LG_MAX_IFS);
    if (nifs < 0) {
        LG_WARN("cannot list network interfaces (getifaddrs failed)");
        return -1;
    }
    struct lg_dev_source_ctx x = {ifs, nifs, single, single ? 0 : (int)lg_params.backup};
    const char *env_name = single ? "LGTCP_IFS" : "LINKGUARD_PAIRS";
    const char *env = single ? lg_params.tcp_ifs : lg_params.pairs;
    for (size_t i = 0; i < sizeof(lg_dev_sources) / sizeof(lg_dev_sources[0]); i++) {
        const struct lg_dev_source *src = &lg_dev_sources[i];
        int n = src->fn(&x, t, err, sizeof(err));
        if (n < 0) {
            if (src->fn == source_env)
                LG_WARN("%s=\"%s\": %s; linkguard disabled (set NCCL_NET=%s to make this "
                        "fatal instead of falling back to NCCL's transports)",
                        env_name, env, err, single ? "lgtcp" : "linkguard");
            else
                LG_WARN("devices from %s: %s", src->name, err);
            return -1;
        }
        if (n > 0) {
            t->source = src->fn == source_env ? env_name : src->name;
            if (src->fn == source_shm && env && *env)
                LG_INFO(NCCL_INIT | NCCL_NET, "%s=\"%s\" not used: the daemon's table lists the "
                        "devices while a daemon runs", env_name, env);
            lg_devices_fill_props(t, lg_params.sysfs_root);
            return n;
        }
    }
    LG_WARN("no usable network interface (up, not loopback, with an IPv4 address, passing "
            "LINKGUARD_IFNAME=\"%s\")", lg_params.ifname);
    return -1;
}

/* Reads one line of a sysfs attribute; -1 if absent. */
static int read_attr(const char *root, const char *ifname, const char *attr, char *buf,
                     size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/class/net/%s/%s", root, ifname, attr);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *ok = fgets(buf, (int)len, f);
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

void lg_devices_fill_props(struct lg_device_table *t, const char *sysfs_root)
{
    const char *root = sysfs_root && *sysfs_root ? sysfs_root : "/sys";
    for (int i = 0; i < t->count; i++) {
        struct lg_device *d = &t->dev[i];
        char path[PATH_MAX], buf[64];
        /* Documentation/ABI/testing/sysfs-class-net: "device" links to the parent (PCI)
         * device; virtual NICs (veth, bridges) have none, and NCCL then attaches the NIC to
         * the CPU. */
        snprintf(path, sizeof(path), "%s/class/net/%s/device", root, d->nic[0].name);
        d->pci_path[0] = 0;
        char *rp = realpath(path, NULL);
        if (rp) {
            snprintf(d->pci_path, sizeof(d->pci_path), "%s", rp);
            free(rp);
        }
        /* "speed" is Mbit/s; -1 or unreadable for links without a speed (some virtual NICs,
         * carrier down). We report 10000 then, as NCCL would assume for speed <= 0, but
         * explicitly so the topology dump shows a number. */
        d->speed_mbps = 10000;
        if (read_attr(root, d->nic[0].name, "speed", buf, sizeof(buf)) == 0 && atoi(buf) > 0)
            d->speed_mbps = atoi(buf);
        /* guid: the primary's MAC (48 bits) with the device index above it, so it is unique
         * per device even if MACs repeat across namespaces. */
        uint64_t mac = 0;
        unsigned b[6];
        if (read_attr(root, d->nic[0].name, "address", buf, sizeof(buf)) == 0 &&
            sscanf(buf, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) == 6)
            for (int k = 0; k < 6; k++)
                mac = (mac << 8) | (b[k] & 0xff);
        d->guid = ((uint64_t)(i + 1) << 48) | mac;
    }
}

static const struct lg_device_table *lg_devices_now;

void lg_devices_publish(const struct lg_device_table *t)
{
    __atomic_store_n(&lg_devices_now, t, __ATOMIC_RELEASE);
}

const struct lg_device *lg_device_get(int dev)
{
    const struct lg_device_table *t = __atomic_load_n(&lg_devices_now, __ATOMIC_ACQUIRE);
    return t && dev >= 0 && dev < t->count ? &t->dev[dev] : NULL;
}
