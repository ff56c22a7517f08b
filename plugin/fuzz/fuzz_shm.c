/* Fuzzes the reader of the daemon's control file (src/daemon/shm_reader.c) with arbitrary file
 * contents, and device discovery from the table it yields (lg_devices_from_shm).
 * Input: the whole file (written to a private temp file, then opened by path as the plugin
 * does); its last 8 bytes, when there are at least 8, also give an event cursor to start from.
 * Checks: a file that opens has a header inside the file; a snapshot holds at most
 * nic_capacity sanitized entries (NUL-terminated names, states and reasons in range, backup
 * index in the table or none, a backup set of distinct members of the table other than the NIC
 * itself whose first member is the backup index, address counts bounded); reading events returns at most what
 * was asked, sanitized, and moves the cursor forward unless it reports a lap; devices built
 * from the snapshot name NICs of the table. */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "linkguard_shm.h"
#include "daemon/devices.h"
#include "runtime/le.h"

static char path[] = "/tmp/lg-fuzz-shm-XXXXXX";
static int fd = -1;

static void remove_file(void)
{
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    fd = mkstemp(path);
    FUZZ_ASSERT(fd >= 0);
    atexit(remove_file);
    return 0;
}

static void check_nic(const struct lg_shm_nic *n, uint32_t count, uint32_t self)
{
    FUZZ_ASSERT(n->n_backups <= LG_SHM_MAX_BACKUPS);
    FUZZ_ASSERT(n->backup_index == (n->n_backups ? (int32_t)n->backup_set[0] : LG_NO_BACKUP));
    for (uint32_t i = 0; i < n->n_backups; i++) {
        FUZZ_ASSERT(n->backup_set[i] < count && n->backup_set[i] != self);
        for (uint32_t j = 0; j < i; j++)
            FUZZ_ASSERT(n->backup_set[j] != n->backup_set[i]);
    }
    FUZZ_ASSERT(memchr(n->name, 0, sizeof(n->name)) && memchr(n->rdma_dev, 0, sizeof(n->rdma_dev)));
    FUZZ_ASSERT(memchr(n->pci_path, 0, sizeof(n->pci_path)));
    FUZZ_ASSERT(n->state < LG_NIC_STATE_COUNT && n->reason < LG_REASON_COUNT);
    FUZZ_ASSERT(n->backup_index == LG_NO_BACKUP ||
                (n->backup_index >= 0 && (uint32_t)n->backup_index < count));
    FUZZ_ASSERT(n->n_ipv4 <= LG_MAX_IPV4 && n->n_ipv6 <= LG_MAX_IPV6);
}

static void check_devices(const struct lg_shm_snapshot *snap)
{
    static struct lg_device_table t;
    struct lg_ifinfo ifs[1] = {{.name = "eth0", .ip = 0x0100a8c0u, .up = 1}};
    int n = lg_devices_from_shm(snap, ifs, 1, 1, NULL, &t);
    FUZZ_ASSERT(n == t.count && n >= 0 && n <= LG_MAX_DEVS && (uint32_t)n <= snap->nic_count);
    for (int d = 0; d < n; d++)
        for (int k = 0; k < 1 + t.dev[d].has_backup; k++) {
            const struct lg_nic *nic = &t.dev[d].nic[k];
            FUZZ_ASSERT(nic->name[0] && strnlen(nic->name, IFNAMSIZ) < IFNAMSIZ && nic->ip);
        }
}

static void check_events(const struct lg_shm_reader *r, uint64_t cursor)
{
    struct lg_shm_event ev[8];
    for (int round = 0; round < 4; round++) {
        uint64_t before = cursor;
        int lapped = -1;
        int n = lg_shm_events_read(r, &cursor, ev, 8, &lapped);
        FUZZ_ASSERT(n >= 0 && n <= 8 && (lapped == 0 || lapped == 1));
        FUZZ_ASSERT(lapped || cursor >= before);
        for (int i = 0; i < n; i++) {
            FUZZ_ASSERT(memchr(ev[i].name, 0, sizeof(ev[i].name)));
            FUZZ_ASSERT(ev[i].old_state < LG_NIC_STATE_COUNT);
            FUZZ_ASSERT(ev[i].new_state < LG_NIC_STATE_COUNT && ev[i].reason < LG_REASON_COUNT);
        }
        if (n == 0)
            break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_ASSERT(ftruncate(fd, 0) == 0);
    FUZZ_ASSERT(pwrite(fd, data, size, 0) == (ssize_t)size);
    struct lg_shm_reader r;
    int st = lg_shm_reader_open(&r, path);
    FUZZ_ASSERT(lg_shm_strerror(st) != NULL);
    if (st != LG_SHM_OK) {
        FUZZ_ASSERT(r.base == NULL);
        return 0;
    }
    FUZZ_ASSERT(r.size == size && r.size >= LG_SHM_HEADER_SIZE);
    FUZZ_ASSERT(r.nic_capacity <= LG_SHM_MAX_NICS);
    FUZZ_ASSERT((const uint8_t *)r.nics >= r.base &&
                (const uint8_t *)(r.nics + r.nic_capacity) <= r.base + r.size);
    FUZZ_ASSERT((const uint8_t *)r.ring >= r.base &&
                (const uint8_t *)(r.ring + r.ring_mask + 1) <= r.base + r.size);
    static struct lg_shm_snapshot snap;
    st = lg_shm_snapshot_read(&r, &snap);
    FUZZ_ASSERT(st == LG_SHM_OK || st == LG_SHM_EBUSY || st == LG_SHM_ELAYOUT);
    if (st == LG_SHM_OK) {
        FUZZ_ASSERT(snap.nic_count <= r.nic_capacity);
        for (uint32_t i = 0; i < snap.nic_count; i++)
            check_nic(&snap.nics[i], snap.nic_count, i);
        check_devices(&snap);
    }
    check_events(&r, 0);
    check_events(&r, lg_shm_ring_head(&r));
    if (size >= 8)
        check_events(&r, lg_get64(data + size - 8));
    uint64_t seen = 0;
    (void)lg_shm_changed(&r, &seen);
    FUZZ_ASSERT(seen == lg_shm_generation(&r));
    st = lg_shm_alive(&r, 1000000000ull, 1000000000ull);
    FUZZ_ASSERT(st == LG_SHM_OK || st == LG_SHM_ESTALE);
    FUZZ_ASSERT(lg_shm_replaced(&r, path) == 0);
    lg_shm_reader_close(&r);
    FUZZ_ASSERT(r.base == NULL);
    return 0;
}
