/* C unit tests of the control channel (include/linkguard_shm.h): the writer and the reader
 * primitive by primitive, bad files, and a writer thread racing a reader loop. Prints one TAP-ish
 * line per test and exits non-zero on any failure. */
#include "linkguard_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int lg_failed; /* failures in the current test */
static char lg_dir[256];

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            lg_failed++;                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
        }                                                                            \
    } while (0)
#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b); \
        if (va_ != vb_) {                                                            \
            lg_failed++;                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s == %s (%llu != %llu)\n", __FILE__, __LINE__, \
                    #a, #b, va_, vb_);                                               \
        }                                                                            \
    } while (0)

static uint64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t lg_rand_state = 0x2545F4914F6CDD1Dull;
static uint64_t lg_rand(void) /* xorshift64: reproducible garbage */
{
    lg_rand_state ^= lg_rand_state << 13;
    lg_rand_state ^= lg_rand_state >> 7;
    lg_rand_state ^= lg_rand_state << 17;
    return lg_rand_state;
}

static const char *lg_path(const char *name)
{
    static char buf[4][512];
    static int i;
    char *p = buf[i++ & 3];
    snprintf(p, sizeof(buf[0]), "%s/%s", lg_dir, name);
    return p;
}

static void lg_file_write(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len);
    close(fd);
}

/* Patches bytes of a file; a live mapping of it sees them (tests only: the daemon never does). */
static void lg_file_patch(const char *path, size_t off, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, data, len, (off_t)off) == (ssize_t)len);
    close(fd);
}

static void lg_patch_u32(const char *path, size_t off, uint32_t v)
{
    lg_file_patch(path, off, &v, 4);
}

static void lg_patch_u64(const char *path, size_t off, uint64_t v)
{
    lg_file_patch(path, off, &v, 8);
}

static struct lg_shm_writer *lg_writer(const char *path, uint32_t cap, uint32_t slots,
                                       uint64_t first)
{
    int err = -1;
    struct lg_shm_writer *w = lg_shm_writer_create(path, cap, slots, first, &err);
    CHECK(w != NULL);
    CHECK_EQ(err, 0);
    return w;
}

static struct lg_shm_nic lg_nic(const char *name, uint32_t state, int32_t backup)
{
    struct lg_shm_nic n;
    memset(&n, 0, sizeof(n));
    snprintf(n.name, sizeof(n.name), "%s", name);
    n.state = state;
    n.reason = LG_REASON_STARTUP;
    n.epoch = 1;
    n.backup_index = backup; /* and, as the daemon writes it, the set of that one */
    n.n_backups = backup >= 0;
    n.backup_set[0] = backup >= 0 ? (uint8_t)backup : 0;
    n.n_ipv4 = 1;
    n.ipv4[0] = 0x010012c6; /* 198.18.0.1 in network byte order */
    snprintf(n.pci_path, sizeof(n.pci_path), "/sys/devices/pci0000:00/0000:00:02.0");
    return n;
}

static struct lg_shm_event lg_event(uint64_t tag)
{
    struct lg_shm_event e;
    memset(&e, 0, sizeof(e));
    e.seq = 12345; /* ignored by the writer */
    e.time_ns = tag * 7;
    e.epoch = ~tag;
    e.fact_ns = tag ^ 0x5555;
    e.nic_index = (uint32_t)(tag % 3);
    e.old_state = LG_NIC_UP;
    e.new_state = LG_NIC_DOWN;
    e.reason = LG_REASON_CARRIER_LOST;
    snprintf(e.name, sizeof(e.name), "rail%u", (unsigned)(tag % 3));
    return e;
}

/* The payload lg_event(seq) wrote, as the reader returns it. */
static int lg_event_ok(const struct lg_shm_event *e)
{
    struct lg_shm_event want = lg_event(e->seq);
    want.seq = e->seq;
    return memcmp(&want, e, sizeof(want)) == 0;
}

static void test_roundtrip(void)
{
    const char *p = lg_path("roundtrip");
    struct lg_shm_writer *w = lg_writer(p, 4, 8, 1);
    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(r.hdr->version, LG_SHM_VERSION);
    CHECK_EQ(r.hdr->daemon_pid, getpid());
    CHECK_EQ(r.nic_capacity, 4);
    CHECK_EQ(lg_shm_ring_head(&r), 0);
    uint64_t seen = 0;
    CHECK_EQ(lg_shm_changed(&r, &seen), 0); /* generation 0: nothing published yet */
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nic_count, 0);

    struct lg_shm_nic nics[3] = {lg_nic("rail0", LG_NIC_UP, 1), lg_nic("rail1", LG_NIC_DOWN, 0),
                                 lg_nic("rail2", LG_NIC_DRAINED, LG_NO_BACKUP)};
    CHECK_EQ(lg_shm_writer_update(w, nics, 3), 2);
    CHECK_EQ(lg_shm_changed(&r, &seen), 1);
    CHECK_EQ(seen, 2);
    CHECK_EQ(lg_shm_changed(&r, &seen), 0);
    CHECK_EQ(lg_shm_generation(&r), 2);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.generation, 2);
    CHECK_EQ(s.nic_count, 3);
    CHECK(memcmp(s.nics, nics, sizeof(nics)) == 0); /* valid entries pass sanitizing unchanged */

    CHECK_EQ(lg_shm_writer_update(w, nics, 5), 0); /* over capacity: refused, nothing written */
    CHECK_EQ(lg_shm_generation(&r), 2);
    CHECK_EQ(lg_shm_writer_update(w, nics, 1), 4); /* shrinking zeroes the dropped entries */
    CHECK_EQ(r.nics[1].name[0], 0);
    CHECK_EQ(r.nics[2].state, 0);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nic_count, 1);
    CHECK_EQ(lg_shm_alive(&r, lg_now_ns(), 1000000000ull), LG_SHM_OK);
    lg_shm_reader_close(&r);
    CHECK(r.base == NULL);
    lg_shm_writer_close(w, 1);
    CHECK(access(p, F_OK) != 0);
}

static void test_ring_empty_and_full(void)
{
    const char *p = lg_path("ring-full");
    struct lg_shm_writer *w = lg_writer(p, 1, 8, 1);
    struct lg_shm_reader r;
    struct lg_shm_event ev[16];
    int lapped = -1;
    uint64_t cursor = 0;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 16, &lapped), 0);
    CHECK_EQ(lapped, 0);
    CHECK_EQ(cursor, 0);
    for (uint64_t i = 1; i <= 8; i++) {
        struct lg_shm_event e = lg_event(i);
        CHECK_EQ(lg_shm_writer_push_event(w, &e), i);
    }
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 16, &lapped), 8); /* exactly a full ring */
    CHECK_EQ(lapped, 0);
    CHECK_EQ(cursor, 8);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(ev[i].seq, (uint64_t)i + 1);
        CHECK(lg_event_ok(&ev[i]));
    }
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

/* Pushes `total` events from first_seq, reading every `every` pushes: nothing lost, in order. */
static void lg_ring_walk(const char *name, uint64_t first_seq, int total, int every)
{
    const char *p = lg_path(name);
    struct lg_shm_writer *w = lg_writer(p, 1, 8, first_seq);
    struct lg_shm_reader r;
    struct lg_shm_event ev[8];
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    uint64_t cursor = lg_shm_ring_head(&r), expect = first_seq;
    CHECK_EQ(cursor, first_seq - 1);
    int lapped = 0, got = 0;
    for (int i = 0; i < total; i++) {
        struct lg_shm_event e = lg_event(first_seq + (uint64_t)i);
        CHECK_EQ(lg_shm_writer_push_event(w, &e), first_seq + (uint64_t)i);
        if ((i + 1) % every && i + 1 < total)
            continue;
        int n = lg_shm_events_read(&r, &cursor, ev, 8, &lapped);
        CHECK_EQ(lapped, 0);
        for (int k = 0; k < n; k++, got++) {
            CHECK_EQ(ev[k].seq, expect++);
            CHECK(lg_event_ok(&ev[k]));
        }
    }
    CHECK_EQ(got, total);
    CHECK_EQ(cursor, first_seq + (uint64_t)total - 1);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

static void test_ring_wraps_past_slots(void) { lg_ring_walk("ring-wrap", 1, 100, 5); }

static void test_ring_wraps_past_2_32(void)
{
    lg_ring_walk("ring-2-32", (1ull << 32) - 13, 40, 3); /* crosses 2^32 mid-ring */
    lg_ring_walk("ring-2-32-b", (1ull << 32) - 1, 17, 8); /* 2^32 itself at a slot boundary */
}

static void test_ring_lap(void)
{
    const char *p = lg_path("ring-lap");
    struct lg_shm_writer *w = lg_writer(p, 1, 8, 1);
    struct lg_shm_reader r;
    struct lg_shm_event ev[64];
    int lapped = 0;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    uint64_t cursor = lg_shm_ring_head(&r);
    for (uint64_t i = 1; i <= 20; i++) {
        struct lg_shm_event e = lg_event(i);
        lg_shm_writer_push_event(w, &e);
    }
    /* 20 pushed into 8 slots: seqs 1..12 are lost, 13..20 remain. */
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 3, &lapped), 3);
    CHECK_EQ(lapped, 1);
    CHECK_EQ(ev[0].seq, 13);
    CHECK_EQ(ev[2].seq, 15);
    CHECK_EQ(cursor, 15);
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 64, &lapped), 5); /* the rest, no new lap */
    CHECK_EQ(lapped, 0);
    CHECK_EQ(ev[4].seq, 20);
    CHECK(lg_event_ok(&ev[4]));
    /* A cursor from another daemon incarnation (ahead of head) also reads as lapped. */
    cursor = 1000;
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 64, &lapped), 0);
    CHECK_EQ(lapped, 1);
    CHECK_EQ(cursor, 20);
    /* A slot being rewritten (seq 0) or holding a newer lap reads as lapped, never as data. */
    uint64_t ring_off = r.hdr->ring_offset;
    lg_patch_u64(p, ring_off + (13 & 7) * LG_SHM_EVENT_SIZE, 0); /* slot of seq 13 */
    cursor = 12;
    CHECK_EQ(lg_shm_events_read(&r, &cursor, ev, 64, &lapped), 7);
    CHECK_EQ(lapped, 1);
    CHECK_EQ(ev[0].seq, 14);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

/* A fresh valid file at `name` (writer closed, file kept) for a test to corrupt. */
static const char *lg_valid_file(const char *name)
{
    const char *p = lg_path(name);
    struct lg_shm_writer *w = lg_writer(p, 4, 8, 1);
    struct lg_shm_nic n = lg_nic("rail0", LG_NIC_UP, LG_NO_BACKUP);
    lg_shm_writer_update(w, &n, 1);
    lg_shm_writer_close(w, 0);
    return p;
}

/* The reader's verdict on `path`; what it accepts is also read (a bad bound would crash). */
static int lg_open_status(const char *path)
{
    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    struct lg_shm_event ev[8];
    int status = lg_shm_reader_open(&r, path), lapped;
    uint64_t cursor = 0;
    if (status != LG_SHM_OK)
        CHECK(r.base == NULL);
    else
        CHECK(lg_shm_snapshot_read(&r, &s) >= 0 &&
              lg_shm_events_read(&r, &cursor, ev, 8, &lapped) >= 0);
    lg_shm_reader_close(&r);
    return status;
}

#define LG_OFF(field) offsetof(struct lg_shm_header, field)

/* One header word patched on a valid file, and the status the reader must give. */
struct lg_patch_case {
    const char *what;
    size_t off;
    int width; /* 4 or 8 */
    uint64_t value;
    int status;
};

static void test_bad_files(void)
{
    CHECK_EQ(lg_open_status(lg_path("missing")), LG_SHM_ENOENT);
    lg_file_write(lg_path("empty"), "", 0);
    CHECK_EQ(lg_open_status(lg_path("empty")), LG_SHM_ESHORT);
    lg_file_write(lg_path("short"), "LGSH", 4);
    CHECK_EQ(lg_open_status(lg_path("short")), LG_SHM_ESHORT);
    static uint8_t junk[65536];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)lg_rand();
    lg_file_write(lg_path("random"), junk, sizeof(junk));
    CHECK_EQ(lg_open_status(lg_path("random")), LG_SHM_EMAGIC);
    CHECK_EQ(lg_open_status(lg_dir), LG_SHM_ESYS); /* a directory */
    CHECK(mkfifo(lg_path("fifo"), 0644) == 0);
    CHECK_EQ(lg_open_status(lg_path("fifo")), LG_SHM_ESYS); /* and no hang in open(2) */

    const char *p = lg_valid_file("truncated");
    CHECK(truncate(p, LG_SHM_HEADER_SIZE + 100) == 0);
    CHECK_EQ(lg_open_status(p), LG_SHM_ESHORT);

    static const struct lg_patch_case cases[] = {
        {"wrong magic", LG_OFF(magic), 4, 0x4853474d, LG_SHM_EMAGIC},
        {"compat_version above", LG_OFF(compat_version), 4, LG_SHM_VERSION + 1, LG_SHM_EVERSION},
        {"version 1 (a pair-only writer)", LG_OFF(version), 4, 1, LG_SHM_OK},
        {"compat_version 0", LG_OFF(compat_version), 4, 0, LG_SHM_EVERSION},
        {"version below compat", LG_OFF(version), 4, 0, LG_SHM_ELAYOUT},
        {"header_size 100", LG_OFF(header_size), 4, 100, LG_SHM_ELAYOUT},
        {"nic_size 256", LG_OFF(nic_size), 4, 256, LG_SHM_ELAYOUT},
        {"event_size 128", LG_OFF(event_size), 4, 128, LG_SHM_ELAYOUT},
        {"nic_capacity 65", LG_OFF(nic_capacity), 4, 65, LG_SHM_ELAYOUT},
        {"ring_slots 6", LG_OFF(ring_slots), 4, 6, LG_SHM_ELAYOUT},
        {"ring_slots 0", LG_OFF(ring_slots), 4, 0, LG_SHM_ELAYOUT},
        {"ring_slots 2^17", LG_OFF(ring_slots), 4, 1u << 17, LG_SHM_ELAYOUT},
        {"table offset wraps", LG_OFF(nic_table_offset), 8, (uint64_t)-128, LG_SHM_ELAYOUT},
        {"ring offset wraps", LG_OFF(ring_offset), 8, (uint64_t)-512, LG_SHM_ELAYOUT},
        {"table offset unaligned", LG_OFF(nic_table_offset), 8, 264, LG_SHM_ELAYOUT},
        {"ring over the header", LG_OFF(ring_offset), 8, 0, LG_SHM_ELAYOUT},
        {"ring over the table", LG_OFF(ring_offset), 8, 256 + 512, LG_SHM_ELAYOUT},
        {"table past total_size", LG_OFF(nic_table_offset), 8, 1u << 20, LG_SHM_ELAYOUT},
        {"total_size past the file", LG_OFF(total_size), 8, 1u << 30, LG_SHM_ESHORT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct lg_patch_case *c = &cases[i];
        p = lg_valid_file("patched");
        if (c->width == 4)
            lg_patch_u32(p, c->off, (uint32_t)c->value);
        else
            lg_patch_u64(p, c->off, c->value);
        int status = lg_open_status(p);
        if (status != c->status)
            fprintf(stderr, "  case '%s': status %d, want %d\n", c->what, status, c->status);
        CHECK_EQ(status, c->status);
    }
}

/* Random header words on an otherwise valid file: the reader rejects or copes, never crashes;
 * whatever it accepts yields sanitized entries and in-range events. */
static void test_garbage_headers(void)
{
    const char *p = lg_valid_file("fuzz");
    uint8_t good[LG_SHM_HEADER_SIZE];
    int fd = open(p, O_RDWR);
    CHECK(fd >= 0 && pread(fd, good, sizeof(good), 0) == (ssize_t)sizeof(good));
    static struct lg_shm_snapshot s;
    struct lg_shm_event ev[32];
    int opened = 0;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t h[LG_SHM_HEADER_SIZE];
        memcpy(h, good, sizeof(h));
        for (int k = 1 + (int)(lg_rand() % 3); k > 0; k--) { /* 1-3 words, small or huge */
            size_t word = lg_rand() % 24; /* the first 96 bytes hold every field we use */
            uint64_t v = lg_rand();
            v = (v & 1) ? v >> (lg_rand() % 64) : v % 1100;
            memcpy(h + 4 * word, &v, 4);
        }
        CHECK(pwrite(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h));
        struct lg_shm_reader r;
        if (lg_shm_reader_open(&r, p) != LG_SHM_OK)
            continue;
        opened++;
        if (lg_shm_snapshot_read(&r, &s) == LG_SHM_OK) {
            CHECK(s.nic_count <= r.nic_capacity);
            for (uint32_t i = 0; i < s.nic_count; i++)
                CHECK(s.nics[i].state < LG_NIC_STATE_COUNT && s.nics[i].name[15] == 0);
        }
        uint64_t cursor = lg_rand() % 2000;
        int lapped;
        int n = lg_shm_events_read(&r, &cursor, ev, 32, &lapped);
        CHECK(n >= 0 && n <= 32);
        lg_shm_alive(&r, lg_now_ns(), 1);
        lg_shm_reader_close(&r);
    }
    CHECK(opened > 100); /* the fuzzing reached the code behind a valid header */
    close(fd);
}

static void test_sanitize(void)
{
    const char *p = lg_path("sanitize");
    struct lg_shm_writer *w = lg_writer(p, 4, 8, 1);
    struct lg_shm_nic n[2] = {lg_nic("rail0", 99, 7), lg_nic("rail1", LG_NIC_UP, 0)};
    memset(n[0].name, 'A', sizeof(n[0].name));
    memset(n[0].pci_path, 'B', sizeof(n[0].pci_path));
    n[0].reason = 999;
    n[0].n_ipv4 = 1000;
    n[0].n_ipv6 = 5;
    lg_shm_writer_update(w, n, 2);
    struct lg_shm_event e = lg_event(1);
    e.old_state = 77;
    e.reason = 1u << 31;
    memset(e.name, 'C', sizeof(e.name));
    lg_shm_writer_push_event(w, &e);

    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nics[0].state, LG_NIC_UNKNOWN);
    CHECK_EQ(s.nics[0].reason, LG_REASON_NONE);
    CHECK_EQ(s.nics[0].backup_index, LG_NO_BACKUP);
    CHECK_EQ(strlen(s.nics[0].name), LG_NAME_LEN - 1);
    CHECK_EQ(strlen(s.nics[0].pci_path), LG_PCI_PATH_LEN - 1);
    CHECK_EQ(s.nics[0].n_ipv4, LG_MAX_IPV4);
    CHECK_EQ(s.nics[0].n_ipv6, LG_MAX_IPV6);
    CHECK_EQ(s.nics[1].backup_index, 0);
    struct lg_shm_event out;
    uint64_t cursor = 0;
    int lapped;
    CHECK_EQ(lg_shm_events_read(&r, &cursor, &out, 1, &lapped), 1);
    CHECK_EQ(out.old_state, LG_NIC_UNKNOWN);
    CHECK_EQ(out.new_state, LG_NIC_DOWN);
    CHECK_EQ(out.reason, LG_REASON_NONE);
    CHECK_EQ(strlen(out.name), LG_NAME_LEN - 1);

    /* nic_count beyond the capacity is garbage: ELAYOUT, not an overrun. */
    lg_patch_u32(p, LG_OFF(nic_count), 1000);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_ELAYOUT);
    /* A writer that died mid-update leaves generation odd: EBUSY, bounded. */
    lg_patch_u32(p, LG_OFF(nic_count), 2);
    lg_patch_u64(p, LG_OFF(generation), 7);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_EBUSY);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

/* Version 2's backup sets ride in version 1's reserved bytes: the writer stores them with the
 * entry, the reader returns them, and every byte a version 1 reader knows is the same as in an
 * entry without a set; the file still says compat_version 1. */
static void test_backup_set_is_a_minor_step(void)
{
    const char *p = lg_path("backup-set");
    struct lg_shm_writer *w = lg_writer(p, 4, 8, 1);
    struct lg_shm_nic n[4] = {lg_nic("rail0", LG_NIC_UP, 2), lg_nic("rail1", LG_NIC_UP, 0),
                              lg_nic("rail2", LG_NIC_UP, 3), lg_nic("rail3", LG_NIC_UP, 2)};
    n[1].n_backups = 0; /* a writer that gives only backup_index */
    n[1].backup_set[0] = 0;
    struct lg_shm_nic pair_only = n[0];
    static const uint8_t set0[] = {2, 1, 3};
    n[0].n_backups = sizeof(set0);
    memcpy(n[0].backup_set, set0, sizeof(set0));
    lg_shm_writer_update(w, n, 4);

    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(r.hdr->version, 2);
    CHECK_EQ(r.hdr->compat_version, 1);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nics[0].n_backups, 3);
    CHECK(memcmp(s.nics[0].backup_set, set0, sizeof(set0)) == 0);
    CHECK_EQ(s.nics[0].backup_index, s.nics[0].backup_set[0]);
    CHECK(memcmp(&s.nics[0], &pair_only, offsetof(struct lg_shm_nic, n_backups)) == 0);
    /* No set written: the reader takes the v1 backup_index as a set of one. */
    CHECK_EQ(s.nics[1].n_backups, 1);
    CHECK_EQ(s.nics[1].backup_set[0], 0);
    CHECK_EQ(s.nics[1].backup_index, 0);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

/* A set as a faulty or hostile writer may leave it: too many members, members past the table,
 * the NIC itself, repeats. The reader keeps the valid members in their order, and
 * backup_index follows the set. */
static void test_backup_set_sanitized(void)
{
    const char *p = lg_path("backup-set-bad");
    struct lg_shm_writer *w = lg_writer(p, 4, 8, 1);
    struct lg_shm_nic n[3] = {lg_nic("rail0", LG_NIC_UP, 1), lg_nic("rail1", LG_NIC_UP, 0),
                              lg_nic("rail2", LG_NIC_UP, LG_NO_BACKUP)};
    static const uint8_t bad[] = {0, 7, 2, 2, 1, 200, 1};
    n[0].n_backups = sizeof(bad);
    memcpy(n[0].backup_set, bad, sizeof(bad));
    n[1].n_backups = 1000; /* clamped: then 16 zeros, index 0 once */
    lg_shm_writer_update(w, n, 3);

    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nics[0].n_backups, 2);
    CHECK_EQ(s.nics[0].backup_set[0], 2);
    CHECK_EQ(s.nics[0].backup_set[1], 1);
    CHECK_EQ(s.nics[0].backup_set[2], 0);
    CHECK_EQ(s.nics[0].backup_index, 2);
    CHECK_EQ(s.nics[1].n_backups, 1);
    CHECK_EQ(s.nics[1].backup_set[0], 0);
    CHECK_EQ(s.nics[1].backup_index, 0);
    CHECK_EQ(s.nics[2].n_backups, 0);
    CHECK_EQ(s.nics[2].backup_index, LG_NO_BACKUP);
    /* A version 1 file of the same entries: backup_index alone, as a set of one. */
    lg_patch_u32(p, LG_OFF(version), 1);
    CHECK_EQ(lg_shm_snapshot_read(&r, &s), LG_SHM_OK);
    CHECK_EQ(s.nics[0].n_backups, 1);
    CHECK_EQ(s.nics[0].backup_set[0], 1);
    CHECK_EQ(s.nics[0].backup_index, 1);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

static void test_heartbeat(void)
{
    const char *p = lg_path("heartbeat");
    struct lg_shm_writer *w = lg_writer(p, 1, 8, 1);
    struct lg_shm_reader r;
    const uint64_t t = 500000000ull, hb = 10000000000ull;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_alive(&r, lg_now_ns(), t), LG_SHM_OK); /* create() beats once */
    lg_shm_writer_heartbeat(w, hb);
    CHECK_EQ(lg_shm_alive(&r, hb + t, t), LG_SHM_OK);
    CHECK_EQ(lg_shm_alive(&r, hb + t + 1, t), LG_SHM_ESTALE);
    CHECK_EQ(lg_shm_alive(&r, hb - t, t), LG_SHM_OK);          /* beat just after our clock read */
    CHECK_EQ(lg_shm_alive(&r, hb - t - 1, t), LG_SHM_ESTALE);  /* another clock domain */
    lg_shm_writer_heartbeat(w, 0);                               /* 0: the writer reads the clock */
    CHECK_EQ(lg_shm_alive(&r, lg_now_ns(), t), LG_SHM_OK);
    lg_patch_u64(p, LG_OFF(heartbeat_ns), 0);
    CHECK_EQ(lg_shm_alive(&r, lg_now_ns(), t), LG_SHM_ESTALE);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(w, 1);
}

static int lg_dir_entries(void)
{
    DIR *d = opendir(lg_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_replaced_and_mode(void)
{
    const char *p = lg_path("replaced");
    mode_t old_umask = umask(077); /* the file must still be readable by NCCL processes */
    int entries = lg_dir_entries();
    struct lg_shm_writer *a = lg_writer(p, 2, 8, 1);
    umask(old_umask);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0644);
    CHECK_EQ(lg_dir_entries(), entries + 1); /* no temporary file left behind */
    struct lg_shm_reader r, r2;
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_replaced(&r, p), 0);

    struct lg_shm_writer *b = lg_writer(p, 2, 8, 1); /* a restarted daemon */
    struct lg_shm_nic nb = lg_nic("from-b", LG_NIC_UP, LG_NO_BACKUP);
    lg_shm_writer_update(b, &nb, 1);
    CHECK_EQ(lg_shm_replaced(&r, p), 1);
    lg_shm_writer_close(a, 1); /* must not unlink b's file */
    CHECK(access(p, F_OK) == 0);
    CHECK_EQ(lg_shm_reader_open(&r2, p), LG_SHM_OK);
    CHECK_EQ(lg_shm_replaced(&r2, p), 0);
    CHECK_EQ(strcmp(r2.nics[0].name, "from-b"), 0);
    lg_shm_writer_close(b, 1);
    CHECK(access(p, F_OK) != 0);
    CHECK_EQ(lg_shm_replaced(&r2, p), 1); /* gone counts as replaced */
    lg_shm_reader_close(&r);
    lg_shm_reader_close(&r2);
}

static void test_create_errors(void)
{
    static const struct { uint32_t cap, slots; uint64_t first; } bad[] = {
        {0, 8, 1}, {LG_SHM_MAX_NICS + 1, 8, 1}, {1, 0, 1}, {1, 6, 1},
        {1, LG_SHM_MAX_RING_SLOTS * 2, 1}, {1, 8, 0},
    };
    int err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err = 0;
        CHECK(lg_shm_writer_create(lg_path("bad"), bad[i].cap, bad[i].slots, bad[i].first, &err) ==
              NULL);
        CHECK_EQ(err, EINVAL);
    }
    CHECK(lg_shm_writer_create(lg_path("no/such/dir"), 1, 8, 1, &err) == NULL);
    CHECK_EQ(err, ENOENT);
    CHECK(access(lg_path("bad"), F_OK) != 0);
}

/* ---- writer thread vs reader loop ------------------------------------------------------- */

#define LG_RACE_NICS 16
#define LG_RACE_SLOTS 16

struct lg_race {
    struct lg_shm_writer *w;
    int stop;
    uint64_t updates, events;
};

/* Every byte of entry i of publish c derives from c: any mix of two publishes is visible. */
static void lg_race_entry(struct lg_shm_nic *n, uint64_t c, uint32_t i)
{
    for (size_t k = 0; k < sizeof(*n) / 8; k++) {
        uint64_t v = c * 0x9E3779B97F4A7C15ull + k;
        memcpy((uint8_t *)n + 8 * k, &v, 8); /* memcpy: no type-punned stores */
    }
    memset(n->name, 0, sizeof(n->name)); /* then the fields the reader sanitizes */
    snprintf(n->name, sizeof(n->name), "race%u", i % 100u);
    n->state = (uint32_t)(c % LG_NIC_STATE_COUNT);
    n->reason = (uint32_t)(c % LG_REASON_COUNT);
    n->epoch = c;
    n->backup_index = LG_NO_BACKUP;
    n->n_backups = 0;
    memset(n->backup_set, 0, sizeof(n->backup_set));
    n->n_ipv4 = n->n_ipv6 = 0;
    n->rdma_dev[LG_RDMA_NAME_LEN - 1] = n->pci_path[LG_PCI_PATH_LEN - 1] = 0;
}

static void *lg_race_writer(void *arg)
{
    struct lg_race *race = arg;
    static struct lg_shm_nic nics[LG_RACE_NICS];
    for (uint64_t c = 1; !__atomic_load_n(&race->stop, __ATOMIC_RELAXED); c++) {
        for (uint32_t i = 0; i < LG_RACE_NICS; i++)
            lg_race_entry(&nics[i], c, i);
        lg_shm_writer_update(race->w, nics, LG_RACE_NICS);
        struct lg_shm_event e = lg_event(c);
        lg_shm_writer_push_event(race->w, &e); /* first_seq 1: event c has seq c */
        race->updates = race->events = c;
    }
    return NULL;
}

static void test_race_writer_thread(void)
{
    const char *p = lg_path("race");
    struct lg_race race = {.w = lg_writer(p, LG_RACE_NICS, LG_RACE_SLOTS, 1)};
    struct lg_shm_reader r;
    static struct lg_shm_snapshot s;
    static struct lg_shm_nic want;
    struct lg_shm_event ev[LG_RACE_SLOTS];
    CHECK_EQ(lg_shm_reader_open(&r, p), LG_SHM_OK);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, lg_race_writer, &race) == 0);
    uint64_t snaps = 0, torn = 0, gens = 0, last_gen = 0, events = 0, torn_events = 0, laps = 0;
    uint64_t cursor = 0, last_seq = 0, start = lg_now_ns();
    /* At least 1 s, and on a loaded machine until the writer really raced us (bounded). */
    for (uint64_t i = 0;; i++) {
        if (!(i & 255)) {
            /* Where the two threads share one CPU (a busy machine), each would run a whole
             * time slice alone and the reader would see a new generation only per slice
             * (39 in 10 s once, under nice 19 beside two busy loops): let the writer in. */
            sched_yield();
            uint64_t now = lg_now_ns();
            if (now > start + 30000000000ull || /* (inside main's alarm of 60 s) */
                (now > start + 1000000000ull && gens > 50 && events > 100))
                break;
        }
        if (lg_shm_snapshot_read(&r, &s) == LG_SHM_OK && s.nic_count) {
            snaps++;
            gens += s.generation != last_gen;
            last_gen = s.generation;
            for (uint32_t k = 0; k < s.nic_count; k++) {
                lg_race_entry(&want, s.nics[0].epoch, k);
                torn += memcmp(&want, &s.nics[k], sizeof(want)) != 0;
            }
        }
        int lapped;
        int n = lg_shm_events_read(&r, &cursor, ev, LG_RACE_SLOTS, &lapped);
        laps += lapped;
        for (int k = 0; k < n; k++, events++) {
            torn_events += !lg_event_ok(&ev[k]) || ev[k].seq <= last_seq;
            last_seq = ev[k].seq;
        }
    }
    __atomic_store_n(&race.stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    fprintf(stderr, "  race: %llu updates, %llu snapshots, %llu generations seen, %llu torn; "
            "%llu events read, %llu laps, %llu torn\n",
            (unsigned long long)race.updates, (unsigned long long)snaps,
            (unsigned long long)gens, (unsigned long long)torn, (unsigned long long)events,
            (unsigned long long)laps, (unsigned long long)torn_events);
    CHECK_EQ(torn, 0);
    CHECK_EQ(torn_events, 0);
    CHECK(gens > 50);   /* the writer really raced the reader (TSan at nice 19 beside busy
                         * loops: 92 in 30 s once; a quiet machine sees 50 within 1 s) */
    CHECK(events > 100);
    lg_shm_reader_close(&r);
    lg_shm_writer_close(race.w, 1);
}

static const struct {
    const char *name;
    void (*fn)(void);
} lg_tests[] = {
    {"roundtrip", test_roundtrip},
    {"ring_empty_and_full", test_ring_empty_and_full},
    {"ring_wraps_past_slots", test_ring_wraps_past_slots},
    {"ring_wraps_past_2_32", test_ring_wraps_past_2_32},
    {"ring_lap", test_ring_lap},
    {"bad_files", test_bad_files},
    {"garbage_headers", test_garbage_headers},
    {"sanitize", test_sanitize},
    {"heartbeat", test_heartbeat},
    {"replaced_and_mode", test_replaced_and_mode},
    {"create_errors", test_create_errors},
    {"race_writer_thread", test_race_writer_thread},
    {"backup_set_is_a_minor_step", test_backup_set_is_a_minor_step},
    {"backup_set_sanitized", test_backup_set_sanitized},
};

int main(void)
{
    alarm(60); /* a reader that loops or blocks (e.g. open(2) on a FIFO) fails, not hangs */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(lg_dir, sizeof(lg_dir), "%s/lgtest-XXXXXX", base);
    if (!mkdtemp(lg_dir)) {
        perror("mkdtemp");
        return 1;
    }
    int failed_tests = 0, n = (int)(sizeof(lg_tests) / sizeof(lg_tests[0]));
    printf("1..%d\n", n);
    for (int i = 0; i < n; i++) {
        lg_failed = 0;
        lg_tests[i].fn();
        printf("%sok %d - shm %s\n", lg_failed ? "not " : "", i + 1, lg_tests[i].name);
        failed_tests += lg_failed != 0;
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", lg_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", lg_dir);
    return failed_tests ? 1 : 0;
}
