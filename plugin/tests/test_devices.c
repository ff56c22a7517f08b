/* Device discovery: LINKGUARD_PAIRS parsing against a fake interface list (order, backups,
 * errors naming the culprit), the automatic pairing, devices from the daemon's table (pure,
 * and through discovery with a live control file: the daemon decides), and properties from a
 * fake sysfs. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/devices.h"
#include "daemon/health.h"
#include "lg_test.h"
#include "lg_test_warn.h"
#include "linkguard_shm.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"

#define MASK24 0x00ffffffu /* 255.255.255.0 in network order (little-endian hosts) */
static struct lg_ifinfo ifs[] = {
    {"lo", 0x0100007f, 1, 1, 0x000000ff},
    {"mgmt", 0, 1, 0, 0}, /* no IPv4 */
    {"rail0", 0x01001283, 1, 0, MASK24},
    {"rail1", 0x01011283, 1, 0, MASK24},
    {"rail2", 0x01021283, 0, 0, MASK24}, /* down */
    {"rail3", 0x01031283, 1, 0, MASK24},
};
static const int nifs = sizeof(ifs) / sizeof(ifs[0]);
static struct lg_device_table t;
static char err[256];

static int pairs(const char *spec, int backup)
{
    err[0] = 0;
    return lg_devices_from_pairs(spec, ifs, nifs, backup, &t, err, sizeof(err));
}

static void test_pairs(void)
{
    CHECK_EQ(pairs("rail0:rail1,rail1:rail0", 1), 2);
    CHECK(!strcmp(t.dev[0].nic[0].name, "rail0") && !strcmp(t.dev[0].nic[1].name, "rail1"));
    CHECK(!strcmp(t.dev[1].nic[0].name, "rail1") && !strcmp(t.dev[1].nic[1].name, "rail0"));
    CHECK(t.dev[0].has_backup && t.dev[1].has_backup);
    CHECK(t.dev[0].nic[0].ip == ifs[2].ip && t.dev[0].nic[1].ip == ifs[3].ip);
    CHECK(t.dev[0].nic[0].mask == MASK24); /* for the WARN of a cross-rail connect */
    CHECK_EQ(pairs(" rail1 : rail3 , rail0 ", 1), 2); /* spaces; no backup for rail0 */
    CHECK(!strcmp(t.dev[0].nic[1].name, "rail3") && !t.dev[1].has_backup);
    CHECK_EQ(pairs("rail0:rail1", 0), 1); /* LINKGUARD_BACKUP=0 */
    CHECK(!t.dev[0].has_backup);
    CHECK_EQ(pairs("rail2:rail0", 1), 1); /* an interface that is down is still a device */
    CHECK_EQ(pairs("", 1), 0);            /* not set: next source */

    CHECK_EQ(pairs("rail0:bogus9", 1), -1);
    CHECK(strstr(err, "unknown interface 'bogus9'") != NULL);
    CHECK_EQ(pairs("nope:rail0", 1), -1);
    CHECK(strstr(err, "'nope'") != NULL);
    CHECK_EQ(pairs("rail1:rail1", 1), -1);
    CHECK(strstr(err, "'rail1' is paired with itself") != NULL);
    CHECK_EQ(pairs("rail0:rail1,rail0:rail3", 1), -1);
    CHECK(strstr(err, "'rail0'") != NULL);
    CHECK_EQ(pairs("mgmt:rail0", 1), -1);
    CHECK(strstr(err, "no IPv4") != NULL);
    CHECK_EQ(pairs("rail0:bogus", 0), -1); /* a typo fails even with the backup disabled */
    CHECK_EQ(pairs("rail0,,rail1", 1), -1);
    CHECK_EQ(pairs("rail0:", 1), -1);
    CHECK_EQ(pairs(":rail0", 1), -1);
    CHECK_EQ(pairs("averyveryverylongname:rail0", 1), -1);
}

/* NCCL_SOCKET_IFNAME's syntax (NCCL's environment variable docs): prefixes, '=' exact, '^'
 * exclude. */
static void test_ifname(void)
{
    static const struct {
        const char *spec, *name;
        int want;
    } t[] = {
        {NULL, "eth0", 1},           {"", "eth0", 1},           {"eth", "eth0", 1},
        {"eth", "ens1", 0},          {"ib,eth", "eth3", 1},     {"=eth0", "eth0", 1},
        {"=eth0", "eth01", 0},       {"=eth0,eth1", "eth1", 1}, {"^docker,lo", "docker0", 0},
        {"^docker,lo", "lo", 0},     {"^docker,lo", "rail0", 1}, {"^=lo", "lo", 0},
        {"^=lo", "lo0", 1},          {"^docker,lo,virbr", "virbr0", 0},
        {",,", "eth0", 0},           {"^", "eth0", 1},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        CHECK_EQ(lg_ifname_match(t[i].spec, t[i].name), t[i].want);
}

static void test_auto(void)
{
    /* Up, not loopback, with IPv4: rail0, rail1, rail3; each backed by the next. */
    CHECK_EQ(lg_devices_from_ifaces(ifs, nifs, 1, NULL, &t, err, sizeof(err)), 3);
    CHECK(!strcmp(t.dev[0].nic[0].name, "rail0") && !strcmp(t.dev[0].nic[1].name, "rail1"));
    CHECK(!strcmp(t.dev[1].nic[0].name, "rail1") && !strcmp(t.dev[1].nic[1].name, "rail3"));
    CHECK(!strcmp(t.dev[2].nic[0].name, "rail3") && !strcmp(t.dev[2].nic[1].name, "rail0"));
    CHECK_EQ(lg_devices_from_ifaces(ifs, 3, 1, NULL, &t, err, sizeof(err)), 1); /* lo, mgmt, rail0 */
    CHECK(!t.dev[0].has_backup); /* alone: nobody to pair with */
    CHECK_EQ(lg_devices_from_ifaces(ifs, nifs, 0, NULL, &t, err, sizeof(err)), 3);
    CHECK(!t.dev[0].has_backup);
    /* docker0 and virbr0 are up with addresses, and still no device by default. */
    struct lg_ifinfo more[] = {{"docker0", 0x010011ac, 1, 0, 0}, {"rail0", 0x01001283, 1, 0, 0},
                               {"virbr0", 0x01007ac0, 1, 0, 0}, {"rail1", 0x01011283, 1, 0, 0}};
    CHECK_EQ(lg_devices_from_ifaces(more, 4, 1, "^docker,lo,virbr", &t, err, sizeof(err)), 2);
    CHECK(!strcmp(t.dev[0].nic[0].name, "rail0") && !strcmp(t.dev[0].nic[1].name, "rail1"));
    CHECK_EQ(lg_devices_from_ifaces(more, 4, 1, "=rail1", &t, err, sizeof(err)), 1);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_sysfs(void)
{
    char root[] = "/tmp/lg-sysfs-XXXXXX", p[512];
    if (!mkdtemp(root)) {
        CHECK(0);
        return;
    }
    /* class/net/rail0 -> a PCI device; rail1 virtual with speed -1. */
    snprintf(p, sizeof(p), "%s/class", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/class/net", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/devices", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/devices/0000:17:00.0", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/class/net/rail0", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/class/net/rail1", root);
    mkdir(p, 0755);
    char target[512];
    snprintf(target, sizeof(target), "%s/devices/0000:17:00.0", root);
    snprintf(p, sizeof(p), "%s/class/net/rail0/device", root);
    CHECK_EQ(symlink(target, p), 0);
    snprintf(p, sizeof(p), "%s/class/net/rail0/speed", root);
    put(p, "100000\n");
    snprintf(p, sizeof(p), "%s/class/net/rail0/address", root);
    put(p, "0a:0b:0c:0d:0e:0f\n");
    snprintf(p, sizeof(p), "%s/class/net/rail1/speed", root);
    put(p, "-1\n");
    CHECK_EQ(pairs("rail0:rail1,rail1:rail0", 1), 2);
    lg_devices_fill_props(&t, root);
    CHECK(!strcmp(t.dev[0].pci_path, target));
    CHECK_EQ(t.dev[0].speed_mbps, 100000);
    CHECK(t.dev[0].guid == ((1ull << 48) | 0x0a0b0c0d0e0full));
    CHECK_EQ(t.dev[1].pci_path[0], 0); /* virtual: reported as NULL */
    CHECK_EQ(t.dev[1].speed_mbps, 10000); /* unknown speed */
    CHECK(t.dev[0].guid != t.dev[1].guid);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CHECK_EQ(system(cmd), 0);
}

/* The daemon's table: table order, pairs from backup_index, the entry's address first. */
static void test_from_shm(void)
{
    static struct lg_shm_snapshot snap;
    memset(&snap, 0, sizeof(snap));
    const char *names[] = {"rail0", "rail1", "mgmt", "rail3", "rail9"};
    int backups[] = {1, 0, LG_NO_BACKUP, 7, 0};
    for (int i = 0; i < 5; i++) {
        snprintf(snap.nics[i].name, sizeof(snap.nics[i].name), "%s", names[i]);
        snap.nics[i].backup_index = backups[i];
    }
    snap.nics[0].n_ipv4 = 1;
    snap.nics[0].ipv4[0] = 0x09001283; /* the daemon's address wins over the interface's */
    snap.nic_count = 5;
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 1, NULL, &t), 3);
    CHECK(!strcmp(t.dev[0].nic[0].name, "rail0") && t.dev[0].nic[0].ip == 0x09001283);
    CHECK(t.dev[0].has_backup && !strcmp(t.dev[0].nic[1].name, "rail1"));
    CHECK(t.dev[0].nic[1].ip == ifs[3].ip);
    /* The table has no prefix lengths: the interface's mask when its address is the one used. */
    CHECK(t.dev[0].nic[0].mask == 0 && t.dev[0].nic[1].mask == MASK24);
    CHECK(!strcmp(t.dev[1].nic[0].name, "rail1") && t.dev[1].has_backup);
    CHECK(t.dev[1].nic[1].ip == 0x09001283);
    /* mgmt has no address: not a device; rail3's backup index is out of the table;
     * rail9 is unknown to the system and the table gives it no address. */
    CHECK(!strcmp(t.dev[2].nic[0].name, "rail3") && !t.dev[2].has_backup);
    /* LINKGUARD_IFNAME applies to the daemon's table too: rail1 left out, so rail0 keeps
     * no backup. */
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 1, "^rail1", &t), 2);
    CHECK(!strcmp(t.dev[0].nic[0].name, "rail0") && !t.dev[0].has_backup);
    CHECK(!strcmp(t.dev[1].nic[0].name, "rail3"));
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 0, NULL, &t), 3); /* LINKGUARD_BACKUP=0 */
    CHECK(!t.dev[0].has_backup);
    /* A backup set: its members in the daemon's order, those without an address or left out
     * by LINKGUARD_IFNAME skipped; the first that stays is the backup. */
    static const uint8_t set0[] = {2, 3, 1};
    snap.nics[0].n_backups = sizeof(set0);
    memcpy(snap.nics[0].backup_set, set0, sizeof(set0));
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 1, NULL, &t), 3);
    CHECK_EQ(t.dev[0].nset, 2); /* mgmt (2) has no address */
    CHECK(!strcmp(t.dev[0].set[0].name, "rail3") && !strcmp(t.dev[0].set[1].name, "rail1"));
    CHECK(t.dev[0].has_backup && !strcmp(t.dev[0].nic[1].name, "rail3"));
    CHECK_EQ(t.dev[1].nset, 1); /* no set: its backup_index alone */
    CHECK(!strcmp(t.dev[1].set[0].name, "rail0"));
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 1, "^rail3", &t), 2);
    CHECK(t.dev[0].nset == 1 && !strcmp(t.dev[0].nic[1].name, "rail1"));
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 0, NULL, &t), 3); /* LINKGUARD_BACKUP=0 */
    CHECK(t.dev[0].nset == 0 && !t.dev[0].has_backup);
    snap.nic_count = 0;
    CHECK_EQ(lg_devices_from_shm(&snap, ifs, nifs, 1, NULL, &t), 0); /* empty: the next source */
}

static const char *getenv_wrap(const char *name) { return getenv(name); }

static void daemon_nics(struct lg_shm_writer *w, int count, int with_ipv4)
{
    struct lg_shm_nic nics[3];
    const char *names[] = {"lgx0", "lgx1", "lgxmgmt"}; /* not on this system */
    uint32_t ips[] = {inet_addr("198.18.0.1"), inet_addr("198.18.1.1"), inet_addr("198.19.0.1")};
    int backups[] = {1, 0, LG_NO_BACKUP};
    memset(nics, 0, sizeof(nics));
    for (int i = 0; i < count; i++) {
        snprintf(nics[i].name, sizeof(nics[i].name), "%s", names[i]);
        nics[i].state = LG_NIC_UP;
        nics[i].backup_index = backups[i];
        nics[i].n_ipv4 = (uint32_t)with_ipv4;
        nics[i].ipv4[0] = ips[i];
    }
    lg_shm_writer_update(w, nics, (uint32_t)count);
    lg_health_fini();
    lg_health_init(); /* reads the table as at NCCL's init */
}

/* What a job sees, with LINKGUARD_PAIRS naming "lo" (up with an address on every system): the
 * pairs without a daemon; the daemon's NICs, filtered by LINKGUARD_IFNAME, once it runs; an
 * error, not "lo", when none of the daemon's NICs is usable; the pairs again when the daemon
 * watches no NIC. */
static void test_discover_with_daemon(void)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/lgtest-devices-%d", (int)getpid());
    unlink(path);
    setenv(LG_SHM_PATH_ENV, path, 1);
    setenv("LINKGUARD_PAIRS", "lo", 1);
    setenv("LINKGUARD_IFNAME", "^lgxmgmt", 1);
    setenv("LINKGUARD_SYSFS_ROOT", "/nonexistent", 1);
    lg_params_load(&lg_params, getenv_wrap);
    lg_log_set(test_logger);
    lg_health_init();
    CHECK_EQ(lg_devices_discover(&t, 0), 1); /* no daemon */
    CHECK(!strcmp(t.dev[0].nic[0].name, "lo") && !strcmp(t.source, "LINKGUARD_PAIRS"));

    int e = 0;
    struct lg_shm_writer *w = lg_shm_writer_create(path, 8, 16, 1, &e);
    CHECK(w != NULL);
    if (!w)
        return;
    lg_shm_writer_heartbeat(w, lg_now_ns());
    daemon_nics(w, 3, 1);
    CHECK(lg_health_alive());
    CHECK_EQ(lg_devices_discover(&t, 0), 2);
    CHECK(!strcmp(t.source, "daemon"));
    CHECK(!strcmp(t.dev[0].nic[0].name, "lgx0") && !strcmp(t.dev[0].nic[1].name, "lgx1"));
    CHECK(t.dev[0].has_backup && t.dev[0].nic[0].ip == inet_addr("198.18.0.1"));
    CHECK(!strcmp(t.dev[1].nic[0].name, "lgx1") && !strcmp(t.dev[1].nic[1].name, "lgx0"));

    daemon_nics(w, 2, 0); /* listed, but no address yet */
    last_warn[0] = 0;
    CHECK_EQ(lg_devices_discover(&t, 0), -1);
    CHECK(strstr(last_warn, "lists NIC(s) lgx0,lgx1") && strstr(last_warn, "no other NIC"));

    daemon_nics(w, 0, 0);
    CHECK_EQ(lg_devices_discover(&t, 0), 1);
    CHECK(!strcmp(t.dev[0].nic[0].name, "lo"));

    lg_health_fini();
    lg_shm_writer_close(w, 1);
    lg_log_set(NULL);
}

int main(void)
{
    test_pairs();
    test_ifname();
    test_from_shm();
    test_discover_with_daemon();
    test_auto();
    test_sysfs();
    LG_TEST_DONE();
}
