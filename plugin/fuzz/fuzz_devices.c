/* Fuzzes device discovery from LINKGUARD_PAIRS / LGTCP_IFS (lg_devices_from_pairs), from the
 * interface list (lg_devices_from_ifaces) and the LINKGUARD_IFNAME filter (lg_ifname_match),
 * src/daemon/devices.c, against a fuzzed interface list.
 * Input: a byte k (k % 9 interfaces), then per interface a flags byte (bit 0 up, bit 1
 * loopback, bit 2 has an IPv4 address, bit 3: the spec's backups are used), a length byte
 * (% 16) and that many name bytes; then the pairs spec up to a NUL, and after the NUL (if there
 * is one) the LINKGUARD_IFNAME list.
 * Checks: an error leaves a NUL-terminated message; otherwise every device's NICs are listed
 * interfaces with an address, named and addressed as listed, the primary never its own
 * backup, no primary twice, a backup only where allowed; the filter agrees with a plain model
 * of its documented rule; from the interface list, exactly the usable interfaces (up, not
 * loopback, with an address, passing the filter), each backed by the next one. */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz.h"
#include "daemon/devices.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

static const struct lg_ifinfo *find(const struct lg_ifinfo *ifs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ifs[i].name, name))
            return &ifs[i];
    return NULL;
}

static void check_nic(const struct lg_nic *nic, const struct lg_ifinfo *ifs, int n)
{
    FUZZ_ASSERT(strnlen(nic->name, IFNAMSIZ) < IFNAMSIZ);
    const struct lg_ifinfo *fi = find(ifs, n, nic->name);
    FUZZ_ASSERT(fi && fi->ip && nic->ip == fi->ip);
}

static void check_pairs(const char *spec, const struct lg_ifinfo *ifs, int n, int backup)
{
    static struct lg_device_table t;
    char err[128];
    memset(err, 0x55, sizeof(err));
    int rc = lg_devices_from_pairs(spec, ifs, n, backup, &t, err, sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(rc == -1 && strnlen(err, sizeof(err)) < sizeof(err) && err[0]);
        return;
    }
    FUZZ_ASSERT(rc == t.count && rc <= LG_MAX_DEVS);
    for (int d = 0; d < t.count; d++) {
        check_nic(&t.dev[d].nic[0], ifs, n);
        FUZZ_ASSERT(!t.dev[d].has_backup || backup);
        if (t.dev[d].has_backup) {
            check_nic(&t.dev[d].nic[1], ifs, n);
            FUZZ_ASSERT(strcmp(t.dev[d].nic[0].name, t.dev[d].nic[1].name) != 0);
        }
        for (int e = 0; e < d; e++)
            FUZZ_ASSERT(strcmp(t.dev[d].nic[0].name, t.dev[e].nic[0].name) != 0);
    }
}

/* The documented rule, written plainly: comma-separated entries (empty ones ignored), a
 * leading '^' excludes, then a '=' asks for exact names instead of prefixes. */
static int ifname_model(const char *spec, const char *name)
{
    if (!spec || !*spec)
        return 1;
    int exclude = spec[0] == '^';
    int exact = spec[exclude] == '=';
    char *copy = strdup(spec + exclude + exact), *save = NULL;
    int hit = 0;
    for (char *e = strtok_r(copy, ",", &save); e && !hit; e = strtok_r(NULL, ",", &save))
        hit = exact ? !strcmp(name, e) : !strncmp(name, e, strlen(e));
    free(copy);
    return exclude ? !hit : hit;
}

static void check_ifaces(const struct lg_ifinfo *ifs, int n, int backup, const char *ifname)
{
    static struct lg_device_table t;
    char err[128] = "";
    int usable[LG_MAX_IFS], nu = 0;
    for (int i = 0; i < n; i++) {
        int pass = lg_ifname_match(ifname, ifs[i].name);
        FUZZ_ASSERT(pass == ifname_model(ifname, ifs[i].name));
        if (ifs[i].up && !ifs[i].loopback && ifs[i].ip && pass)
            usable[nu++] = i;
    }
    int rc = lg_devices_from_ifaces(ifs, n, backup, ifname, &t, err, sizeof(err));
    FUZZ_ASSERT(rc == nu && t.count == nu);
    for (int d = 0; d < nu; d++) {
        check_nic(&t.dev[d].nic[0], ifs, n);
        /* the first interface of that name: duplicates resolve to it */
        FUZZ_ASSERT(!strcmp(t.dev[d].nic[0].name, ifs[usable[d]].name));
        FUZZ_ASSERT(t.dev[d].has_backup == (nu > 1 && backup));
        if (t.dev[d].has_backup)
            FUZZ_ASSERT(!strcmp(t.dev[d].nic[1].name, ifs[usable[(d + 1) % nu]].name));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_ifinfo ifs[8];
    memset(ifs, 0, sizeof(ifs));
    size_t pos = 0;
    int want = size ? data[pos++] % 9 : 0, n = 0, backup = 0;
    for (int i = 0; i < want; i++) {
        uint8_t flags = pos < size ? data[pos++] : 0;
        size_t len = pos < size ? data[pos++] % IFNAMSIZ : 0;
        if (len > size - pos)
            len = size - pos;
        struct lg_ifinfo *fi = &ifs[n];
        memcpy(fi->name, data + pos, len);
        fi->name[len] = 0; /* a NUL inside shortens it, as the kernel's names cannot hold one */
        pos += len;
        fi->up = flags & 1;
        fi->loopback = !!(flags & 2);
        fi->ip = flags & 4 ? htonl(0xc6120001u + (uint32_t)i) : 0;
        backup |= !!(flags & 8);
        /* One entry per name, as lg_ifaces_scan lists them. */
        if (fi->name[0] && !find(ifs, n, fi->name))
            n++;
    }
    char *spec = strndup((const char *)data + pos, size - pos);
    size_t used = strlen(spec) + 1;
    char *ifname = pos + used <= size ? strndup((const char *)data + pos + used, size - pos - used)
                                      : NULL;
    check_pairs(spec, ifs, n, backup);
    check_ifaces(ifs, n, backup, ifname);
    free(spec);
    free(ifname);
    return 0;
}
