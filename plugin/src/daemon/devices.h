/* Devices: one NCCL device per data NIC, each the pair (primary NIC, backup NIC), and their
 * NCCL properties. */
#ifndef LG_DEVICES_H
#define LG_DEVICES_H

#include <net/if.h>
#include <stdint.h>

#define LG_MAX_DEVS 64
#define LG_MAX_IFS 128
#define LG_NIC_NONE (-1)
#define LG_MAX_BACKUP_SET 16 /* LG_SHM_MAX_BACKUPS: the daemon's sets (linkguard_shm.h) */

/* One interface as the system reports it. */
struct lg_ifinfo {
    char name[IFNAMSIZ];
    uint32_t ip; /* first IPv4 address, network order; 0 = none */
    int up;
    int loopback;
    uint32_t mask; /* netmask of `ip`, network order; 0 = unknown */
};

struct lg_nic {
    char name[IFNAMSIZ];
    uint32_t ip;   /* network order */
    uint32_t mask; /* of ip's subnet, network order; 0 = unknown (for log lines only) */
};

struct lg_device {
    struct lg_nic nic[2]; /* [0] primary, [1] backup */
    int has_backup;
    /* The NICs that may carry its backup paths, nearest first (the daemon's backup set; a
     * pair's is its backup alone): set[0] is nic[1]. Only nic[1] carries them yet. */
    int nset;
    struct lg_nic set[LG_MAX_BACKUP_SET];
    /* properties (filled by lg_devices_fill_props) */
    char pci_path[4096]; /* empty: virtual NIC, reported as NULL */
    int speed_mbps;
    uint64_t guid;
};

struct lg_device_table {
    int count;
    const char *source; /* where the list came from, for the log */
    struct lg_device dev[LG_MAX_DEVS];
};

/* The member of d's backup set whose address is `ip`, or NULL. */
const struct lg_nic *lg_device_set_member(const struct lg_device *d, uint32_t ip);

/* The system's interfaces (getifaddrs). Returns the count or -1. */
int lg_ifaces_scan(struct lg_ifinfo *out, int max);

/* Devices from a LINKGUARD_PAIRS-style spec against the given interfaces (pure; tests feed
 * fake interface lists). Returns the device count, or -1 with a message naming the culprit
 * in err. `backup` = 0 drops every backup. */
int lg_devices_from_pairs(const char *spec, const struct lg_ifinfo *ifs, int nifs, int backup,
                          struct lg_device_table *t, char *err, size_t errlen);
/* Whether interface `name` passes an NCCL_SOCKET_IFNAME-style list (LINKGUARD_IFNAME):
 * comma-separated prefixes; '^' first: the list excludes; then '=' first: exact names. An
 * empty or NULL list passes everything. */
int lg_ifname_match(const char *spec, const char *name);
/* Every up, non-loopback IPv4 interface that passes `ifname` (lg_ifname_match), paired with
 * the next one (pure). */
int lg_devices_from_ifaces(const struct lg_ifinfo *ifs, int nifs, int backup, const char *ifname,
                           struct lg_device_table *t, char *err, size_t errlen);

/* Devices from the daemon's table (pure): one per NIC entry with an IPv4 address (the entry's,
 * else the interface's) that passes `ifname`, in table order, with the members of the entry's
 * backup set (or its backup_index, without a set) that pass too; the first is the backup. */
struct lg_shm_snapshot;
int lg_devices_from_shm(const struct lg_shm_snapshot *snap, const struct lg_ifinfo *ifs,
                        int nifs, int backup, const char *ifname, struct lg_device_table *t);

/* Builds the process's table from the first source that yields devices:
 *   the daemon's shared-memory table when a live daemon is there (lg_devices_from_shm),
 *   LINKGUARD_PAIRS, then every interface. A live daemon whose table lists NICs decides
 * alone: when none of them is usable, discovery fails rather than offering other NICs (a
 * daemon with an empty table counts as none). `single` (the standalone lgtcp plugin): one
 * device per interface of LGTCP_IFS (or every interface), no backups.
 * Returns the count, or -1 after a WARN naming the problem. */
int lg_devices_discover(struct lg_device_table *t, int single);
/* The process's table, once loaded (core.c publishes it; it stays put from then on): device
 * `dev` of it, or NULL (no table yet, or no such device). */
void lg_devices_publish(const struct lg_device_table *t);
const struct lg_device *lg_device_get(int dev);

/* pciPath, speed and guid from sysfs (root from LINKGUARD_SYSFS_ROOT). */
void lg_devices_fill_props(struct lg_device_table *t, const char *sysfs_root);

#endif
