/* Reader side of the shared-memory control channel (contract in include/linkguard_shm.h).
 * Maps the file read-only, validates everything it uses, and never trusts the contents:
 * garbage yields an error status, never a crash or an out-of-range access. */
#include "linkguard_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A writer's update is a few hundred stores; with a pause per retry this bound is tens of us,
 * far longer than any update that is not preempted. A preempted or dead writer gives EBUSY and
 * the caller keeps its previous snapshot (try-operations never block). */
#define LG_SNAPSHOT_RETRIES 1000

/* Spin-wait hint: lets the sibling hyperthread (maybe the writer) run, and saves power. */
static inline void lg_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static uint64_t lg_u64_load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

/* Relaxed word-by-word copy out of the mapping: racing with the writer is expected and caught by
 * the seqlock or the slot's seq. Each word goes through memcpy into `dst` so that the copy is
 * never a type-punned store the compiler may reorder against later field reads. */
static void lg_words_copy(void *dst, const void *src, size_t bytes)
{
    const uint64_t *s = src;
    uint8_t *d = dst;
    for (size_t i = 0; i < bytes / 8; i++) {
        uint64_t v = lg_u64_load(&s[i]);
        memcpy(d + 8 * i, &v, sizeof(v));
    }
}

static int lg_is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* True when [off, off + len) lies inside [lo, hi), without overflowing on garbage offsets. */
static int lg_range_inside(uint64_t off, uint64_t len, uint64_t lo, uint64_t hi)
{
    return off >= lo && off <= hi && len <= hi - off;
}

/* Validates a private copy of the header, so that every value used later is the value checked
 * here even if the file changes under us. */
static int lg_header_validate(const struct lg_shm_header *h, size_t file_size)
{
    if (h->magic != LG_SHM_MAGIC)
        return LG_SHM_EMAGIC;
    if (h->compat_version > LG_SHM_VERSION || h->compat_version == 0)
        return LG_SHM_EVERSION;
    if (h->version < h->compat_version)
        return LG_SHM_ELAYOUT;
    /* The header may grow (readers ignore its tail), but v1 readers index the table and the
     * ring with the v1 entry sizes: a writer that grows an entry must raise compat_version. */
    if (h->header_size < LG_SHM_HEADER_SIZE || h->nic_size != LG_SHM_NIC_SIZE ||
        h->event_size != LG_SHM_EVENT_SIZE)
        return LG_SHM_ELAYOUT;
    if (h->nic_capacity > LG_SHM_MAX_NICS || !lg_is_pow2(h->ring_slots) ||
        h->ring_slots > LG_SHM_MAX_RING_SLOTS)
        return LG_SHM_ELAYOUT;
    uint64_t table_len = (uint64_t)h->nic_capacity * h->nic_size;
    uint64_t ring_len = (uint64_t)h->ring_slots * h->event_size;
    /* Both regions after the header, inside total_size, 64-byte aligned, not overlapping. */
    if (h->nic_table_offset % 64 || h->ring_offset % 64 ||
        !lg_range_inside(h->nic_table_offset, table_len, h->header_size, h->total_size) ||
        !lg_range_inside(h->ring_offset, ring_len, h->header_size, h->total_size))
        return LG_SHM_ELAYOUT;
    if (h->ring_offset < h->nic_table_offset + table_len &&
        h->nic_table_offset < h->ring_offset + ring_len)
        return LG_SHM_ELAYOUT;
    if (h->total_size > file_size)
        return LG_SHM_ESHORT;
    return LG_SHM_OK;
}

const char *lg_shm_path_resolve(const char *path)
{
    if (!path)
        path = getenv(LG_SHM_PATH_ENV);
    if (!path || !*path)
        path = LG_SHM_DEFAULT_PATH;
    return path;
}

/* LINKGUARD_SHM_OWNER as a uid: a number, or a user name looked up; -1 when unset or unknown. */
static int64_t lg_shm_owner_env(void)
{
    const char *s = getenv(LG_SHM_OWNER_ENV);
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!errno && !*end && *s != '-' && v <= UINT32_MAX)
        return (int64_t)v;
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) == 0 && res)
        return (int64_t)pw.pw_uid;
    return -1;
}

int lg_shm_owner_check(uint32_t uid, uint32_t mode)
{
    if (mode & (S_IWGRP | S_IWOTH))
        return LG_SHM_EUNTRUSTED;
    int64_t owner = lg_shm_owner_env();
    if (uid == 0 || uid == (uint32_t)geteuid() || (owner >= 0 && uid == (uint64_t)owner))
        return LG_SHM_OK;
    return LG_SHM_EUNTRUSTED;
}

int lg_shm_reader_open(struct lg_shm_reader *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    path = lg_shm_path_resolve(path);
    /* O_NONBLOCK: a FIFO planted at the path must not block the reader in open(2). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? LG_SHM_ENOENT : LG_SHM_ESYS;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return LG_SHM_ESYS;
    }
    if (lg_shm_owner_check(st.st_uid, st.st_mode) != LG_SHM_OK) {
        close(fd);
        return LG_SHM_EUNTRUSTED;
    }
    if (st.st_size < (off_t)LG_SHM_HEADER_SIZE) {
        close(fd);
        return LG_SHM_ESHORT;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return LG_SHM_ESYS;
    struct lg_shm_header h;
    memcpy(&h, map, sizeof(h));
    int status = lg_header_validate(&h, size);
    if (status != LG_SHM_OK) {
        munmap(map, size);
        return status;
    }
    r->base = map;
    r->size = size;
    r->hdr = map;
    r->nics = (const struct lg_shm_nic *)(r->base + h.nic_table_offset);
    r->ring = (const struct lg_shm_event *)(r->base + h.ring_offset);
    r->nic_capacity = h.nic_capacity;
    r->ring_mask = h.ring_slots - 1;
    r->dev = (uint64_t)st.st_dev;
    r->ino = (uint64_t)st.st_ino;
    return LG_SHM_OK;
}

void lg_shm_reader_close(struct lg_shm_reader *r)
{
    if (r->base)
        munmap((void *)r->base, r->size);
    memset(r, 0, sizeof(*r));
}

const char *lg_shm_strerror(int status)
{
    switch (status) {
    case LG_SHM_OK: return "ok";
    case LG_SHM_ENOENT: return "no control file (daemon not running)";
    case LG_SHM_ESHORT: return "control file shorter than its layout";
    case LG_SHM_EMAGIC: return "control file has a wrong magic";
    case LG_SHM_EVERSION: return "control file needs a newer reader";
    case LG_SHM_ELAYOUT: return "control file layout is inconsistent";
    case LG_SHM_EBUSY: return "no stable snapshot (writer stuck mid-update)";
    case LG_SHM_ESYS: return "cannot open or map the control file";
    case LG_SHM_ESTALE: return "daemon heartbeat is stale";
    case LG_SHM_EUNTRUSTED: return "control file is not the daemon's (owner or mode untrusted)";
    default: return "unknown status";
    }
}

/* Entry `self`'s backup set by the rules of "Backup sets" (linkguard_shm.h): at most
 * LG_SHM_MAX_BACKUPS members, each in the table, not the NIC itself, no repeat, the daemon's
 * order kept; with no set (a version 1 file, or a writer that gave only backup_index) the
 * backup_index is a set of one. backup_index ends as the first member: both views agree. */
static void backup_set_sanitize(struct lg_shm_nic *n, uint32_t count, uint32_t self,
                                uint32_t file_version)
{
    uint8_t in[LG_SHM_MAX_BACKUPS];
    uint32_t nin = 0;
    if (file_version >= 2 && n->n_backups > 0) {
        nin = n->n_backups < LG_SHM_MAX_BACKUPS ? n->n_backups : LG_SHM_MAX_BACKUPS;
        memcpy(in, n->backup_set, nin);
    } else if (n->backup_index >= 0) { /* in range: checked above */
        in[nin++] = (uint8_t)n->backup_index;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < nin; i++) {
        int repeat = in[i] >= count || in[i] == self;
        for (uint32_t j = 0; j < kept && !repeat; j++)
            repeat = n->backup_set[j] == in[i];
        if (!repeat)
            n->backup_set[kept++] = in[i];
    }
    memset(n->backup_set + kept, 0, sizeof(n->backup_set) - kept);
    n->n_backups = kept;
    n->backup_index = kept ? n->backup_set[0] : LG_NO_BACKUP;
}

/* Forces the copied entry into a shape every consumer can trust. */
static void lg_nic_sanitize(struct lg_shm_nic *n, uint32_t count, uint32_t self,
                            uint32_t file_version)
{
    n->name[LG_NAME_LEN - 1] = '\0';
    n->rdma_dev[LG_RDMA_NAME_LEN - 1] = '\0';
    n->pci_path[LG_PCI_PATH_LEN - 1] = '\0';
    if (n->state >= LG_NIC_STATE_COUNT)
        n->state = LG_NIC_UNKNOWN;
    if (n->reason >= LG_REASON_COUNT)
        n->reason = LG_REASON_NONE;
    if (n->backup_index < 0 || (uint32_t)n->backup_index >= count)
        n->backup_index = LG_NO_BACKUP;
    backup_set_sanitize(n, count, self, file_version);
    if (n->n_ipv4 > LG_MAX_IPV4)
        n->n_ipv4 = LG_MAX_IPV4;
    if (n->n_ipv6 > LG_MAX_IPV6)
        n->n_ipv6 = LG_MAX_IPV6;
}

static void lg_event_sanitize(struct lg_shm_event *e)
{
    e->name[LG_NAME_LEN - 1] = '\0';
    if (e->old_state >= LG_NIC_STATE_COUNT)
        e->old_state = LG_NIC_UNKNOWN;
    if (e->new_state >= LG_NIC_STATE_COUNT)
        e->new_state = LG_NIC_UNKNOWN;
    if (e->reason >= LG_REASON_COUNT)
        e->reason = LG_REASON_NONE;
}

uint64_t lg_shm_generation(const struct lg_shm_reader *r)
{
    return __atomic_load_n(&r->hdr->generation, __ATOMIC_ACQUIRE);
}

int lg_shm_snapshot_read(const struct lg_shm_reader *r, struct lg_shm_snapshot *out)
{
    const struct lg_shm_header *h = r->hdr;
    for (int attempt = 0; attempt < LG_SNAPSHOT_RETRIES; attempt++) {
        if (attempt)
            lg_cpu_relax();
        /* Acquire pairs with the writer's release of an even generation: the entries we copy
         * are at least as new as g1. */
        uint64_t g1 = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
        if (g1 & 1)
            continue;
        uint32_t count = __atomic_load_n(&h->nic_count, __ATOMIC_RELAXED);
        if (count <= r->nic_capacity)
            lg_words_copy(out->nics, r->nics, (size_t)count * sizeof(struct lg_shm_nic));
        /* If any word above came from an update that began after g1, this fence synchronises
         * with the writer's release fence after its odd store, so g2 below sees g1 + 1 or
         * later: a torn copy is never accepted. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t g2 = __atomic_load_n(&h->generation, __ATOMIC_RELAXED);
        if (g1 != g2)
            continue;
        if (count > r->nic_capacity) /* judged only now: an unstable count may be torn */
            return LG_SHM_ELAYOUT;
        out->generation = g1;
        out->nic_count = count;
        uint32_t version = __atomic_load_n(&h->version, __ATOMIC_RELAXED);
        for (uint32_t i = 0; i < count; i++)
            lg_nic_sanitize(&out->nics[i], count, i, version);
        return LG_SHM_OK;
    }
    return LG_SHM_EBUSY;
}

uint64_t lg_shm_ring_head(const struct lg_shm_reader *r)
{
    return __atomic_load_n(&r->hdr->ring_head, __ATOMIC_ACQUIRE);
}

int lg_shm_events_read(const struct lg_shm_reader *r, uint64_t *cursor, struct lg_shm_event *out,
                       int max, int *lapped)
{
    uint64_t slots = (uint64_t)r->ring_mask + 1;
    uint64_t head = lg_shm_ring_head(r);
    *lapped = 0;
    if (*cursor > head) {
        /* A cursor from another daemon incarnation (or garbage): whatever the caller thinks it
         * has seen, it must re-read the table. */
        *lapped = 1;
        *cursor = head;
    }
    if (head - *cursor > slots) {
        *lapped = 1;
        *cursor = head - slots;
    }
    int n = 0;
    /* Bounded: every turn either copies a record or moves the cursor forward, except a torn
     * copy, which the next turn resolves by skipping; garbage cannot keep us here. */
    for (uint64_t turns = 0; n < max && *cursor < head && turns < 4 * slots + (uint64_t)max;
         turns++) {
        uint64_t s = *cursor + 1;
        const struct lg_shm_event *slot = &r->ring[s & r->ring_mask];
        /* Acquire pairs with the writer's release store of slot->seq = s. The writer stores
         * seq before ring_head, so a slot of s <= head can only hold s or a later lap. */
        if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != s) {
            *lapped = 1; /* overwritten by a newer lap while we were reading */
            uint64_t now_head = lg_shm_ring_head(r);
            uint64_t oldest = now_head > slots ? now_head - slots : 0;
            *cursor = oldest > s ? oldest : s; /* always forward */
            continue;
        }
        lg_words_copy(&out[n], slot, sizeof(*slot));
        /* Pairs with the writer's release fence after it zeroes seq for a rewrite: if we copied
         * any word of the rewrite, the re-load below sees 0 or the newer seq. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (lg_u64_load(&slot->seq) != s) {
            *lapped = 1;
            continue; /* the next turn sees the mismatch and skips ahead */
        }
        lg_event_sanitize(&out[n]);
        *cursor = s;
        n++;
    }
    return n;
}

int lg_shm_alive(const struct lg_shm_reader *r, uint64_t now_ns, uint64_t timeout_ns)
{
    uint64_t hb = __atomic_load_n(&r->hdr->heartbeat_ns, __ATOMIC_ACQUIRE);
    if (hb == 0)
        return LG_SHM_ESTALE;
    /* Slightly in the future is normal (the writer stored it after we read our clock); far in
     * the future means another clock domain (a time namespace) and would otherwise read as
     * "alive" forever after the daemon died. */
    uint64_t age = now_ns >= hb ? now_ns - hb : hb - now_ns;
    return age > timeout_ns ? LG_SHM_ESTALE : LG_SHM_OK;
}

int lg_shm_replaced(const struct lg_shm_reader *r, const char *path)
{
    struct stat st;
    if (stat(lg_shm_path_resolve(path), &st) != 0)
        return 1;
    return (uint64_t)st.st_dev != r->dev || (uint64_t)st.st_ino != r->ino;
}
