/* Wrap mode's pure parts: older property layouts in the v12 form, the intersection of a
 * primary and a backup inner device, device names, matching inner devices to NICs (name,
 * RDMA device and port, PCI path through a fake sysfs tree) and LINKGUARD_PAIRS parsing. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lg_test.h"
#include "transport/inner/inner_pair.h"
#include "transport/inner/inner_props.h"

static ncclNetProperties_v12_t dev_props(const char *name, int ptr, int recvs, size_t p2p)
{
    ncclNetProperties_v12_t p;
    memset(&p, 0, sizeof(p));
    p.name = (char *)name;
    p.pciPath = (char *)"/sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0";
    p.guid = 0x1234;
    p.ptrSupport = ptr;
    p.regIsGlobal = 1;
    p.speed = 400000;
    p.port = 1;
    p.latency = 1.5f;
    p.maxComms = 1000;
    p.maxRecvs = recvs;
    p.maxP2pBytes = p2p;
    p.maxCollBytes = p2p;
    p.maxMultiRequestSize = 4;
    p.railId = 3;
    p.planeId = NCCL_NET_ID_UNDEF;
    return p;
}

static void test_layouts(void)
{
    ncclNetProperties_v8_t v8 = {.name = "a", .ptrSupport = 3, .speed = 100, .maxComms = 9,
                                 .maxRecvs = 8, .regIsGlobal = 1};
    ncclNetProperties_v12_t p;
    lg_inner_props_from_v8(&v8, 5, &p);
    CHECK(!strcmp(p.name, "a") && p.ptrSupport == 3 && p.speed == 100 && p.regIsGlobal == 1);
    CHECK(p.maxComms == 9 && p.maxRecvs == 8 && p.forceFlush == 0);
    CHECK(p.maxP2pBytes == LG_INNER_V8_MAX_P2P_BYTES && p.maxCollBytes == LG_INNER_V8_MAX_COLL_BYTES);
    CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == 5 && p.maxMultiRequestSize == 1);
    CHECK(p.railId == NCCL_NET_ID_UNDEF && p.planeId == NCCL_NET_ID_UNDEF);

    ncclNetProperties_v9_t v9 = {.name = "b", .forceFlush = 1, .maxP2pBytes = 77,
                                 .vProps = {.ndevs = 9, .devs = {1, 2, 3, 4}}};
    lg_inner_props_from_v9(&v9, &p);
    CHECK(p.forceFlush == 1 && p.maxP2pBytes == 77 && p.vProps.ndevs == 4 && p.vProps.devs[3] == 4);
    CHECK(p.maxMultiRequestSize == 1 && p.railId == NCCL_NET_ID_UNDEF);

    ncclNetProperties_v11_t v11 = {.name = NULL, .maxMultiRequestSize = 6, .vProps = {.ndevs = -2}};
    lg_inner_props_from_v11(&v11, &p);
    CHECK(p.maxMultiRequestSize == 6 && p.vProps.ndevs == 0);
    lg_inner_props_sanitize(&p);
    CHECK(p.name && !strcmp(p.name, ""));
}

static void test_merge(void)
{
    char err[256];
    ncclNetProperties_v12_t a = dev_props("mlx5_0", NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 8,
                                          1ull << 36);
    ncclNetProperties_v12_t b = dev_props("mlx5_1", NCCL_PTR_HOST | NCCL_PTR_CUDA, 4, 1ull << 30);
    ncclNetProperties_v12_t o;
    b.forceFlush = 1;
    b.regIsGlobal = 0;
    b.maxComms = 50;
    b.speed = 1;
    b.pciPath = (char *)"/elsewhere";
    b.maxMultiRequestSize = 1;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 2, "mlx5_0+mlx5_1", &o, err, sizeof(err)), 0);
    CHECK(!strcmp(o.name, "mlx5_0+mlx5_1"));
    CHECK_EQ(o.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_CUDA); /* GDR only if both have it */
    CHECK(o.regIsGlobal == 0 && o.forceFlush == 1);
    CHECK(o.maxRecvs == 4 && o.maxComms == 50 && o.maxP2pBytes == (1ull << 30));
    CHECK(o.maxMultiRequestSize == 1);
    CHECK(o.speed == 400000 && o.guid == 0x1234 && o.port == 1 && o.latency == 1.5f);
    CHECK(!strcmp(o.pciPath, a.pciPath) && o.railId == 3);
    CHECK(o.vProps.ndevs == 1 && o.vProps.devs[0] == 2);
    CHECK(o.netDeviceType == NCCL_NET_DEVICE_HOST);

    /* A host-only backup (e.g. TCP) takes GDR away. */
    b.ptrSupport = NCCL_PTR_HOST;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), 0);
    CHECK_EQ(o.ptrSupport, NCCL_PTR_HOST);
    /* No backup: the primary's own. */
    CHECK_EQ(lg_inner_props_merge(&a, NULL, 0, "x", &o, err, sizeof(err)), 0);
    CHECK(o.ptrSupport == a.ptrSupport && o.maxRecvs == 8);
    /* maxCollBytes 0 (no collNet) does not win the minimum. */
    b.maxCollBytes = 0;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), 0);
    CHECK_EQ(o.maxCollBytes, a.maxCollBytes);

    /* Refusals name the member and the reason. */
    b.netDeviceType = NCCL_NET_DEVICE_UNPACK;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), -1);
    CHECK(strstr(err, "backup") && strstr(err, "mlx5_1") && strstr(err, "device offload"));
    b.netDeviceType = NCCL_NET_DEVICE_HOST;
    a.maxP2pBytes = 0;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), -1);
    CHECK(strstr(err, "primary") && strstr(err, "maxP2pBytes"));
    a.maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES + 1;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), -1);
    a.maxP2pBytes = 1 << 20;
    a.ptrSupport = NCCL_PTR_CUDA;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), -1);
    CHECK(strstr(err, "no pointer type") != NULL);
    a.ptrSupport = NCCL_PTR_HOST;
    a.maxRecvs = 0;
    CHECK_EQ(lg_inner_props_merge(&a, &b, 0, "x", &o, err, sizeof(err)), -1);
}

static void test_names(void)
{
    char name[32], err[256];
    CHECK_EQ(lg_inner_vdev_name(name, sizeof(name), "mlx5_0", "mlx5_1"), 0);
    CHECK(!strcmp(name, "mlx5_0+mlx5_1"));
    CHECK_EQ(lg_inner_vdev_name(name, sizeof(name), "mlx5_0", NULL), 0);
    CHECK(!strcmp(name, "mlx5_0+none"));
    CHECK_EQ(lg_inner_vdev_name(name, 8, "mlx5_0", "mlx5_1"), -1);
    const char *inner[] = {"mlx5_0", "mlx5_1", NULL};
    const char *ok[] = {"mlx5_0+mlx5_1", "mlx5_1+mlx5_0"};
    CHECK_EQ(lg_inner_names_check(ok, 2, inner, 3, err, sizeof(err)), 0);
    const char *dup[] = {"a+b", "a+b"};
    CHECK_EQ(lg_inner_names_check(dup, 2, inner, 3, err, sizeof(err)), -1);
    CHECK(strstr(err, "both named 'a+b'") != NULL);
    const char *clash[] = {"mlx5_1"};
    CHECK_EQ(lg_inner_names_check(clash, 1, inner, 3, err, sizeof(err)), -1);
    CHECK(strstr(err, "inner device") != NULL);
}

/* Two dual-port HCAs (mlx5_0 ports 1,2 share a PCI function; mlx5_1 port 1) and an lgtcp-like
 * device named after its netdev. */
static const struct lg_inner_devid devs[] = {
    {"mlx5_0", "/p/0000:3b:00.0", 1, 0},
    {"mlx5_0", "/p/0000:3b:00.0", 2, 0},
    {"mlx5_1", "/p/0000:5e:00.0", 1, 0},
    {"eth9", NULL, 0, 0},
};
static const struct lg_nic_id nics[] = {
    {"rail0", "mlx5_0", 1, "/p/0000:3b:00.0"},
    {"rail1", NULL, 0, "/p/0000:5e:00.0"},
    {"eth9", NULL, 0, NULL},
    {"rail2", NULL, 0, "/p/0000:3b:00.0"}, /* port unknown: both ports of mlx5_0 match */
    {"virt0", NULL, 0, NULL},
};
#define NDEV (int)(sizeof(devs) / sizeof(devs[0]))
#define NNIC (int)(sizeof(nics) / sizeof(nics[0]))

static void test_match(void)
{
    CHECK_EQ(lg_inner_dev_match(devs, NDEV, &nics[0]), 0); /* RDMA device + port */
    CHECK_EQ(lg_inner_dev_match(devs, NDEV, &nics[1]), 2); /* PCI path */
    CHECK_EQ(lg_inner_dev_match(devs, NDEV, &nics[2]), 3); /* name == netdev */
    CHECK_EQ(lg_inner_dev_match(devs, NDEV, &nics[3]), LG_MATCH_AMBIGUOUS);
    CHECK_EQ(lg_inner_dev_match(devs, NDEV, &nics[4]), LG_MATCH_NONE);
    CHECK_EQ(lg_inner_nic_match(nics, NNIC, &devs[3]), 2);
    CHECK_EQ(lg_inner_nic_match(nics, NNIC, &devs[0]), 0); /* rdma beats the PCI tie */
    CHECK_EQ(lg_inner_nic_match(nics, NNIC, &devs[2]), 1);
    /* Port 2 of mlx5_0: rail0 is port 1, rail2's PCI path matches with an unknown port. */
    CHECK_EQ(lg_inner_nic_match(nics, NNIC, &devs[1]), 3);
}

static void test_pairs(void)
{
    struct lg_inner_pair pr[8];
    char err[256] = "";
    /* Netdevs, as the daemon's table or a LINKGUARD_PAIRS of NICs names them. */
    CHECK_EQ(lg_inner_pairs_parse("rail0:rail1, rail1 : rail0", devs, NDEV, nics, NNIC, pr, 8,
                                  err, sizeof(err)), 2);
    CHECK(pr[0].m[0].dev == 0 && pr[0].m[0].nic == 0 && pr[0].m[1].dev == 2 && pr[0].has_backup);
    CHECK(pr[1].m[0].dev == 2 && pr[1].m[1].dev == 0 && pr[1].m[1].nic == 0);
    /* Inner device names directly; their NICs are found the other way round. */
    CHECK_EQ(lg_inner_pairs_parse("mlx5_1:eth9,eth9", devs, NDEV, nics, NNIC, pr, 8, err,
                                  sizeof(err)), 2);
    CHECK(pr[0].m[0].dev == 2 && pr[0].m[0].nic == 1 && pr[0].m[1].dev == 3 && pr[0].m[1].nic == 2);
    CHECK(pr[1].m[0].dev == 3 && !pr[1].has_backup);
    CHECK_EQ(lg_inner_pairs_parse("", devs, NDEV, nics, NNIC, pr, 8, err, sizeof(err)), 0);

    static const struct {
        const char *spec, *want;
    } bad[] = {
        {"mlx5_0:rail1", "several inner devices"},
        {"rail2:rail1", "more than one inner device"},
        {"virt0:rail1", "matches no inner device"},
        {"nope:rail1", "'nope' is neither"},
        {"rail1:mlx5_1", "same inner device"},
        {"rail1:rail0,mlx5_1:eth9", "primary of two devices"},
        {"rail0:,rail1", "entry 1"},
        {"rail0:rail1,,rail1", "entry 2"},
        {"a,b,c", "neither"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        CHECK_EQ(lg_inner_pairs_parse(bad[i].spec, devs, NDEV, nics, NNIC, pr, 8, err,
                                      sizeof(err)), -1);
        CHECK(strstr(err, bad[i].want) != NULL);
        if (!strstr(err, bad[i].want))
            fprintf(stderr, "  spec '%s': %s\n", bad[i].spec, err);
    }
    CHECK_EQ(lg_inner_pairs_parse("rail0,rail1,eth9", devs, NDEV, nics, NNIC, pr, 2, err,
                                  sizeof(err)), -1);
    CHECK(strstr(err, "more than 2") != NULL);

    struct lg_device_table t;
    memset(&t, 0, sizeof(t));
    t.count = 2;
    strcpy(t.dev[0].nic[0].name, "rail1");
    strcpy(t.dev[0].nic[1].name, "rail0");
    t.dev[0].has_backup = 1;
    strcpy(t.dev[1].nic[0].name, "eth9");
    strcpy(t.dev[1].nic[1].name, "rail1"); /* has_backup 0: LINKGUARD_BACKUP=0 */
    CHECK_EQ(lg_inner_pairs_from_table(&t, devs, NDEV, nics, NNIC, pr, 8, err, sizeof(err)), 2);
    CHECK(pr[0].m[0].dev == 2 && pr[0].m[1].dev == 0 && pr[1].m[0].dev == 3 && !pr[1].has_backup);
    strcpy(t.dev[1].nic[0].name, "virt0");
    CHECK_EQ(lg_inner_pairs_from_table(&t, devs, NDEV, nics, NNIC, pr, 8, err, sizeof(err)), -1);
    CHECK(strstr(err, "virt0") != NULL);
}

/* Wrap mode's spread: each member of a backup set on its own inner device; those the inner
 * plugin does not list once, or whose inner device carries the primary or an earlier member,
 * have none (and leave the set). */
static void test_set_map(void)
{
    /* dev 0 = rail0 (inner 0) backup rail1 (inner 2); the set rail1, eth9, rail2 (ambiguous:
     * both ports of mlx5_0), virt0 (not listed), a second rail1, eth9 again. */
    const struct lg_nic_id set[] = {nics[1], nics[2], nics[3], nics[4], nics[1], nics[2]};
    int out[6];
    CHECK_EQ(lg_inner_set_map(devs, NDEV, set, 6, 0, 2, out), 2);
    CHECK(out[0] == 2 && out[1] == 3);
    CHECK(out[2] == LG_MATCH_AMBIGUOUS && out[3] == LG_MATCH_NONE);
    CHECK(out[4] == LG_MATCH_CLASH && out[5] == LG_MATCH_CLASH);
    /* A member on the primary's inner device (eth9 primary, inner 3). */
    CHECK_EQ(lg_inner_set_map(devs, NDEV, set, 2, 3, 2, out), 1);
    CHECK(out[0] == 2 && out[1] == LG_MATCH_CLASH);
}

/* aws-ofi-nccl over tcp;ofi_rxm: each NIC listed 4 times, identical (same name, no PCI path,
 * same port and speed). The lowest index stands for each; devices that differ stay apart. */
static void test_duplicates(void)
{
    struct lg_inner_devid d[] = {
        {"rail0", NULL, 0, 100000}, {"rail0", NULL, 0, 100000}, {"rail1", NULL, 0, 100000},
        {"rail0", NULL, 0, 100000}, {"rail1", NULL, 0, 100000}, {"rail0", NULL, 0, 100000},
        {"rail1", NULL, 0, 25000},  {"mlx5_0", "/p/0000:3b:00.0", 1, 0},
        {"mlx5_0", "/p/0000:3b:00.0", 1, 0},
    };
    int n = (int)(sizeof(d) / sizeof(d[0]));
    static const int want[] = {-1, 0, -1, 0, 2, 0, -1, -1, -1};
    for (int i = 0; i < n; i++)
        CHECK_EQ(lg_inner_dev_duplicate_of(d, i), want[i]);
    for (int i = n - 1; i > 0; i--) /* as inner_dev.c collapses them */
        if (lg_inner_dev_duplicate_of(d, i) >= 0)
            d[i].name = NULL;
    const struct lg_nic_id rails[] = {{"rail0", NULL, 0, NULL}, {"rail1", NULL, 0, NULL}};
    struct lg_inner_pair pr[2];
    char err[256] = "";
    /* rail1 is still listed twice, once at another speed: that one cannot be guessed. */
    CHECK_EQ(lg_inner_pairs_parse("rail0:rail1", d, n, rails, 2, pr, 2, err, sizeof(err)), -1);
    CHECK(strstr(err, "list that NIC once") != NULL);
    d[6].name = "rail9";
    CHECK_EQ(lg_inner_pairs_parse("rail0:rail1,rail1:rail0", d, n, rails, 2, pr, 2, err,
                                  sizeof(err)), 2);
    CHECK(pr[0].m[0].dev == 0 && pr[0].m[1].dev == 2 && pr[1].m[0].dev == 2 &&
          pr[1].m[1].dev == 0);
}

/* The NIC's sysfs device link and an inner pciPath spelled differently resolve alike. */
static void test_sysfs(void)
{
    char root[] = "/tmp/lg_inner_sysfs_XXXXXX", path[PATH_MAX], real[PATH_MAX], other[PATH_MAX];
    CHECK(mkdtemp(root) != NULL);
    snprintf(path, sizeof(path), "%s/devices/pci0000:00/0000:3b:00.0", root);
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s %s/class/net/rail0 && ln -s ../../../devices/"
             "pci0000:00/0000:3b:00.0 %s/class/net/rail0/device", path, root, root);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(lg_nic_pci_real(root, "rail0", real, sizeof(real)), 0);
    snprintf(other, sizeof(other), "%s/devices/pci0000:00/../pci0000:00/0000:3b:00.0", root);
    char *inner_real = realpath(other, NULL);
    CHECK(inner_real && !strcmp(inner_real, real));
    struct lg_inner_devid d = {"mlx5_0", inner_real, 1, 0};
    struct lg_nic_id n = {"rail0", NULL, 0, real};
    CHECK_EQ(lg_inner_dev_match(&d, 1, &n), 0);
    CHECK_EQ(lg_nic_pci_real(root, "veth0", real, sizeof(real)), -1); /* virtual: none */
    /* Its RDMA device and port, as the kernel lays them out (port 2 of a dual-port HCA). */
    char rdma[64];
    int port = -1;
    CHECK_EQ(lg_nic_rdma_id(root, "rail0", rdma, sizeof(rdma), &port), -1);
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/infiniband/mlx4_0 && echo 1 > "
             "%s/class/net/rail0/dev_port", path, root);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(lg_nic_rdma_id(root, "rail0", rdma, sizeof(rdma), &port), 0);
    CHECK(!strcmp(rdma, "mlx4_0") && port == 2);
    struct lg_inner_devid ports[2] = {{"mlx4_0", inner_real, 1, 0}, {"mlx4_0", inner_real, 2, 0}};
    struct lg_nic_id n2 = {"rail0", rdma, port, real};
    CHECK_EQ(lg_inner_dev_match(ports, 2, &n2), 1); /* the RDMA name and port decide */
    free(inner_real);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    CHECK_EQ(system(cmd), 0);
}

int main(void)
{
    test_layouts();
    test_merge();
    test_names();
    test_match();
    test_pairs();
    test_set_map();
    test_duplicates();
    test_sysfs();
    LG_TEST_DONE();
}
