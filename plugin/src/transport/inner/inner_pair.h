/* Wrap mode: which inner devices make up each linkguard device (pure functions, tests in
 * tests/test_inner_props.c; only lg_nic_pci_real reads sysfs).
 *
 * An inner device is matched to a NIC (a netdev the daemon or LINKGUARD_PAIRS names) by, in
 * order: its name equals the netdev (TCP-like plugins); its name equals the NIC's RDMA
 * device (verbs plugins name devices "mlx5_0"), the port too when both are known; its
 * pciPath resolves to the same PCI function as /sys/class/net/<netdev>/device. Each member
 * keeps both: the inner device carries data, the NIC's address carries linkguard's control
 * sockets. */
#ifndef LG_INNER_PAIR_H
#define LG_INNER_PAIR_H

#include <stddef.h>

#include "daemon/devices.h"

/* An inner device as pairing sees it. */
struct lg_inner_devid {
    const char *name;     /* NULL: a duplicate of a lower index, never matched */
    const char *pci_real; /* resolved pciPath, or NULL */
    int port;             /* 0: unknown */
    int speed;
};

/* The lowest index below i that device i cannot be told apart from (the same name, no PCI
 * path, the same port and speed), or -1. aws-ofi-nccl over tcp;ofi_rxm lists each NIC once
 * per libfabric entry like that; the lowest index then stands for all of them. */
int lg_inner_dev_duplicate_of(const struct lg_inner_devid *devs, int i);

/* What a user can do about a name that several distinguishable inner devices share. */
#define LG_INNER_SHARED_NAME_ERR                                                           \
    "'%s' names several inner devices that differ in port, speed or PCI path (ports of one " \
    "NIC?); name their netdevs instead, which are matched by RDMA device and port or by PCI " \
    "path"

/* A NIC as the host knows it. */
struct lg_nic_id {
    const char *netdev;
    const char *rdma_dev; /* NULL: none known */
    int rdma_port;        /* 0: unknown */
    const char *pci_real; /* realpath of /sys/class/net/<netdev>/device, or NULL (virtual) */
};

#define LG_MATCH_NONE (-1)
#define LG_MATCH_AMBIGUOUS (-2)

/* The inner device of a NIC: its index, LG_MATCH_NONE or LG_MATCH_AMBIGUOUS. */
int lg_inner_dev_match(const struct lg_inner_devid *devs, int ndev, const struct lg_nic_id *nic);
/* The NIC of an inner device (same rules, the other way round), or LG_MATCH_NONE/AMBIGUOUS. */
int lg_inner_nic_match(const struct lg_nic_id *nics, int nnic, const struct lg_inner_devid *dev);

struct lg_inner_member {
    int dev; /* inner device index */
    int nic; /* index in the NIC list, or LG_MATCH_NONE when no NIC matches */
};

struct lg_inner_pair {
    struct lg_inner_member m[2]; /* [0] primary, [1] backup */
    int has_backup;
};

/* LINKGUARD_PAIRS in wrap mode: "a:b,c:d" where each name is an inner device name or a
 * netdev. Returns the pair count, or -1 with the culprit in err. */
int lg_inner_pairs_parse(const char *spec, const struct lg_inner_devid *devs, int ndev,
                         const struct lg_nic_id *nics, int nnic, struct lg_inner_pair *out,
                         int max, char *err, size_t errlen);
/* The NIC pairs linkguard found (daemon table, LINKGUARD_PAIRS of netdevs, interfaces) onto
 * inner devices; `nics` describes at least every NIC the table names. */
int lg_inner_pairs_from_table(const struct lg_device_table *t, const struct lg_inner_devid *devs,
                              int ndev, const struct lg_nic_id *nics, int nnic,
                              struct lg_inner_pair *out, int max, char *err, size_t errlen);

/* Wrap mode's spread (proto/spread.h): the inner device of each member k of a backup set of
 * n, from its NIC ids[k], into out[k]: LG_MATCH_NONE or LG_MATCH_AMBIGUOUS when the inner
 * plugin does not list it once, LG_MATCH_CLASH when that inner device already carries the
 * device's primary (`primary`) or an earlier member. Member 0 is the pair's backup, matched
 * by lg_inner_pairs_from_table: out[0] = first. Returns how many members have one of their own. */
#define LG_MATCH_CLASH (-3)
int lg_inner_set_map(const struct lg_inner_devid *devs, int ndev, const struct lg_nic_id *ids,
                     int n, int primary, int first, int *out);

/* The RDMA device behind a netdev (<sysfs_root>/class/net/<ifname>/device/infiniband/<dev>)
 * and its port (dev_port + 1; 0 if unknown); -1 if it has none. */
int lg_nic_rdma_id(const char *sysfs_root, const char *ifname, char *dev, size_t len, int *port);
/* realpath of <sysfs_root>/class/net/<ifname>/device into out; -1 if there is none. */
int lg_nic_pci_real(const char *sysfs_root, const char *ifname, char *out, size_t len);

#endif
