/* Writer side of the shared-memory control channel (contract in include/linkguard_shm.h).
 * Used by linkguardd through ctypes so that the publish step has C11 release ordering on every
 * architecture. Single writer: the caller serialises update() against update() and push_event()
 * against push_event(); heartbeat() touches only its own word and may run concurrently. */
#include "linkguard_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct lg_shm_writer {
    char path[4096];
    uint64_t dev, ino; /* identity of our file, so close() never unlinks a successor's */
    uint8_t *base;
    size_t size;
    struct lg_shm_header *hdr;
    struct lg_shm_nic *nics;
    struct lg_shm_event *ring;
    uint32_t nic_capacity; /* private copies: never re-read from the shared mapping */
    uint32_t ring_mask;
};

static uint64_t lg_clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void lg_u64_store(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

/* Relaxed word-by-word stores, paired with the reader's relaxed loads inside the seqlock; src is
 * NULL for zeroes. */
static void lg_words_store(void *dst, const void *src, size_t bytes)
{
    const uint8_t *s = src;
    uint64_t *d = dst;
    for (size_t i = 0; i < bytes / 8; i++) {
        uint64_t v = 0;
        if (s)
            memcpy(&v, s + 8 * i, sizeof(v)); /* src may be unaligned (Python bytes) */
        lg_u64_store(&d[i], v);
    }
}

static size_t lg_align64(size_t v) { return (v + 63) & ~(size_t)63; }

/* Creates, sizes and maps a new file with a random name next to `path`. O_EXCL (inside
 * mkostemp) means a file or symlink planted at a predictable name in the world-writable
 * /dev/shm can neither redirect nor truncate anything when the daemon runs as root. */
static void *lg_file_create(const char *path, char *tmp, size_t tmp_len, size_t total,
                            struct stat *st, int *err)
{
    if (snprintf(tmp, tmp_len, "%s.XXXXXX", path) >= (int)tmp_len) {
        *err = ENAMETOOLONG;
        return NULL;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    void *map = MAP_FAILED;
    int rc;
    if (fchmod(fd, 0644) != 0 || fstat(fd, st) != 0 || /* umask must not hide it from NCCL */
        ftruncate(fd, (off_t)total) != 0) {
        *err = errno;
    } else if ((rc = posix_fallocate(fd, 0, (off_t)total)) != 0) {
        *err = rc; /* reserve tmpfs pages now: a full /dev/shm is ENOSPC here, not SIGBUS later */
    } else if ((map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
               MAP_FAILED) {
        *err = errno;
    }
    close(fd);
    if (map == MAP_FAILED) {
        unlink(tmp);
        return NULL;
    }
    return map;
}

struct lg_shm_writer *lg_shm_writer_create(const char *path, uint32_t nic_capacity,
                                           uint32_t ring_slots, uint64_t first_seq, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    if (!path || !*path || nic_capacity == 0 || nic_capacity > LG_SHM_MAX_NICS ||
        ring_slots == 0 || (ring_slots & (ring_slots - 1)) || ring_slots > LG_SHM_MAX_RING_SLOTS ||
        first_seq == 0) {
        *err = EINVAL;
        return NULL;
    }
    if (strlen(path) >= sizeof(((struct lg_shm_writer *)0)->path)) {
        *err = ENAMETOOLONG;
        return NULL;
    }
    size_t table_off = lg_align64(LG_SHM_HEADER_SIZE);
    size_t ring_off = lg_align64(table_off + (size_t)nic_capacity * LG_SHM_NIC_SIZE);
    size_t total = ring_off + (size_t)ring_slots * LG_SHM_EVENT_SIZE;

    char tmp[4096 + 8];
    struct stat st;
    void *map = lg_file_create(path, tmp, sizeof(tmp), total, &st, err);
    if (!map)
        return NULL;
    struct lg_shm_writer *w = calloc(1, sizeof(*w));
    if (!w) {
        *err = ENOMEM;
        munmap(map, total);
        unlink(tmp);
        return NULL;
    }
    snprintf(w->path, sizeof(w->path), "%s", path);
    w->dev = (uint64_t)st.st_dev;
    w->ino = (uint64_t)st.st_ino;
    w->base = map;
    w->size = total;
    w->hdr = map;
    w->nics = (struct lg_shm_nic *)(w->base + table_off);
    w->ring = (struct lg_shm_event *)(w->base + ring_off);
    w->nic_capacity = nic_capacity;
    w->ring_mask = ring_slots - 1;

    /* Plain stores: nobody can map the file before the rename below, and rename(2)/open(2) order
     * these stores before any reader's loads (the kernel's locks are the barrier). */
    struct lg_shm_header *h = w->hdr;
    h->magic = LG_SHM_MAGIC;
    h->version = LG_SHM_VERSION;
    h->compat_version = LG_SHM_COMPAT_VERSION;
    h->header_size = LG_SHM_HEADER_SIZE;
    h->nic_size = LG_SHM_NIC_SIZE;
    h->nic_capacity = nic_capacity;
    h->event_size = LG_SHM_EVENT_SIZE;
    h->ring_slots = ring_slots;
    h->nic_table_offset = table_off;
    h->ring_offset = ring_off;
    h->total_size = total;
    h->daemon_pid = (uint32_t)getpid();
    h->daemon_start_ns = lg_clock_ns(CLOCK_REALTIME);
    h->daemon_start_monotonic_ns = lg_clock_ns(CLOCK_MONOTONIC);
    h->ring_head = first_seq - 1;
    h->heartbeat_ns = lg_clock_ns(CLOCK_MONOTONIC);
    /* Publish the file only once complete: readers either see no file or a valid one. */
    if (rename(tmp, path) != 0) {
        *err = errno;
        unlink(tmp);
        munmap(map, total);
        free(w);
        return NULL;
    }
    return w;
}

uint64_t lg_shm_writer_update(struct lg_shm_writer *w, const void *entries, uint32_t count)
{
    if (!w || count > w->nic_capacity || (count && !entries))
        return 0; /* generations returned are >= 2, so 0 says "nothing written" */
    struct lg_shm_header *h = w->hdr;
    uint64_t g = __atomic_load_n(&h->generation, __ATOMIC_RELAXED);
    uint32_t old_count = __atomic_load_n(&h->nic_count, __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, g + 1, __ATOMIC_RELAXED);
    /* Orders the odd generation before every entry store below (pairs with the reader's
     * acquire fence before its second generation load). */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    lg_words_store(w->nics, entries, (size_t)count * LG_SHM_NIC_SIZE);
    if (old_count > count && old_count <= w->nic_capacity) /* dropped entries read as zeroes */
        lg_words_store(&w->nics[count], NULL, (size_t)(old_count - count) * LG_SHM_NIC_SIZE);
    __atomic_store_n(&h->nic_count, count, __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, g + 2, __ATOMIC_RELEASE);
    return g + 2;
}

uint64_t lg_shm_writer_push_event(struct lg_shm_writer *w, const void *event)
{
    if (!w || !event)
        return 0;
    struct lg_shm_header *h = w->hdr;
    uint64_t s = __atomic_load_n(&h->ring_head, __ATOMIC_RELAXED) + 1;
    struct lg_shm_event *slot = &w->ring[s & w->ring_mask];
    __atomic_store_n(&slot->seq, 0, __ATOMIC_RELAXED);
    /* Orders "slot being rewritten" before the record's stores (pairs with the reader's fence
     * before its seq re-check). */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    lg_words_store((uint8_t *)slot + 8, (const uint8_t *)event + 8, LG_SHM_EVENT_SIZE - 8);
    __atomic_store_n(&slot->seq, s, __ATOMIC_RELEASE);
    /* seq before head: a reader that sees head >= s finds s (or a later lap) in the slot. */
    __atomic_store_n(&h->ring_head, s, __ATOMIC_RELEASE);
    return s;
}

void lg_shm_writer_heartbeat(struct lg_shm_writer *w, uint64_t now_ns)
{
    if (!w)
        return;
    if (now_ns == 0)
        now_ns = lg_clock_ns(CLOCK_MONOTONIC);
    __atomic_store_n(&w->hdr->heartbeat_ns, now_ns, __ATOMIC_RELEASE);
}

void lg_shm_writer_close(struct lg_shm_writer *w, int unlink_file)
{
    if (!w)
        return;
    struct stat st;
    /* Only remove the path if it is still ours (a newer daemon may have replaced it). A
     * successor renaming in between stat and unlink is not excluded; the window is a syscall. */
    if (unlink_file && stat(w->path, &st) == 0 && (uint64_t)st.st_dev == w->dev &&
        (uint64_t)st.st_ino == w->ino)
        unlink(w->path);
    munmap(w->base, w->size);
    free(w);
}
