/* linkguard shared-memory control channel, layout version 2 (readable by version 1 readers).
 *
 * This header is the one definition of the channel between linkguardd (the only writer) and
 * every NCCL process on the host (readers). The Python side (daemon/linkguardd/shm/layout.py)
 * mirrors it and tests/unit/test_shm_layout.py compares both with a compiled C program.
 *
 * File: LINKGUARD_SHM (default /run/linkguard/linkguard.shm, in the daemon's root-owned runtime
 * directory), created 0644 by the daemon as a temporary file (random name, O_EXCL) and renamed
 * into place once fully initialised, so a reader never maps a half-written header. A restarted
 * daemon creates a new file; readers notice the stale heartbeat of the old mapping and re-open.
 *
 * Trust: whoever writes the file chooses the plugin's devices and can hold NICs "unusable", so
 * a reader maps it only if its owner is root, the reader's own user, or LINKGUARD_SHM_OWNER (a
 * uid or user name: the daemon's user when it does not run as root), and neither group nor
 * others may write it; otherwise LG_SHM_EUNTRUSTED ("no daemon", with a WARN naming why). The
 * check is on the opened file itself (fstat), so a file swapped in after it changes nothing.
 *
 *   [header 256 B][NIC table: nic_capacity x 512 B][event ring: ring_slots x 64 B]
 *
 * All fields are fixed-width little-endian integers, no bitfields, no pointers. Offsets are
 * asserted below. Reserved bytes are zero and ignored by readers of this version.
 *
 * Concurrency contract
 * --------------------
 * Writer-owned words only; readers never write. The writer's words that change often
 * (heartbeat, generation, ring head) sit on their own cache line.
 *
 * NIC table (seqlock on `generation`):
 *   writer:  g = generation;                       (even)
 *            store_relaxed(generation, g + 1);     (odd: update in progress)
 *            fence(release);
 *            store the entries and nic_count with relaxed 64-bit stores;
 *            store_release(generation, g + 2);     (even again: a new generation)
 *   reader:  hot path: one acquire load of generation, compared with the last one seen.
 *            snapshot: do { g1 = load_acquire(generation); if (g1 odd) retry;
 *                           copy nic_count and the entries with relaxed 64-bit loads;
 *                           fence(acquire);
 *                           g2 = load_relaxed(generation); } while (g1 != g2);
 *            bounded retries; a writer that died mid-update leaves `generation` odd, which the
 *            reader reports as LG_SHM_EBUSY (and the heartbeat goes stale).
 *
 * Event ring (single producer, any number of readers, readers may lap):
 *   Sequence numbers are free-running u64 starting at 1; seq s lives in slot s & (ring_slots-1).
 *   ring_head = the newest published seq (0 = none yet).
 *   writer:  s = ring_head + 1; slot = &ring[s & mask];
 *            store_relaxed(slot->seq, 0); fence(release);       (slot being rewritten)
 *            store the record's other words (relaxed);
 *            store_release(slot->seq, s);                       (record complete)
 *            store_release(ring_head, s);
 *   reader:  head = load_acquire(ring_head); if (head - cursor > ring_slots) -> lapped;
 *            for s in cursor+1..head: r = load_acquire(slot->seq); if (r != s) -> lapped;
 *            copy the record (relaxed); fence(acquire); if (load_relaxed(slot->seq) != s) -> lapped.
 *   A lapped reader missed events: it re-reads the table with a snapshot and continues from head.
 *
 * Heartbeat: the writer stores CLOCK_MONOTONIC ns into heartbeat_ns at least every 100 ms
 * (store_release). A reader treats heartbeat older than its timeout (or further than the timeout
 * in the future: another clock domain) as "no daemon".
 *
 * Reader rules: a missing or short file, a wrong magic, compat_version above
 * LG_SHM_VERSION, a layout that does not fit the file, or a stale heartbeat all mean
 * "no daemon": the plugin keeps working on its own detection. Garbage never crashes a reader.
 * The header may grow (readers ignore bytes past the v1 header); a writer that changes the NIC
 * or event entry size must raise compat_version, since v1 readers index with the v1 sizes.
 * Readers validate a private copy of the header once, at open, and use only that copy.
 * (A writer that truncates a mapped file would SIGBUS readers: the daemon never does, it
 * replaces the file instead.)
 *
 * Versions
 * --------
 * `version` is the writer's layout; `compat_version` the oldest reader layout that reads the
 * file whole. A version that only gives meaning to reserved bytes (a minor step) raises
 * `version` and keeps `compat_version`, so older readers go on reading every field they know,
 * at the offsets they know, and ignore the new ones as reserved.
 *   1: header, NIC table, event ring as below, a NIC's backup as one index (backup_index).
 *   2 (compat 1): each NIC's backup set, n_backups and backup_set[] in the v1 entry's reserved
 *      bytes at 408 (see "Backup sets").
 * A reader of version >= 2 that maps a version 1 file (version < 2) finds n_backups 0 and takes
 * backup_index, when set, as a set of one.
 *
 * Backup sets (version 2)
 * -----------------------
 * A NIC's backup set is the NICs that may carry its connections' backup paths, as indices into
 * this table, nearest first under the daemon's locality policy (same PCI switch, then the same
 * NUMA node, then the rest; docs/failover.md, "Backup sets"). The daemon keeps
 * backup_index == backup_set[0] (LG_NO_BACKUP with n_backups 0), so a version 1 reader keeps
 * the pair it always had: the nearest member. n_backups <= LG_SHM_MAX_BACKUPS; the set never
 * holds the NIC itself nor an index twice. Indices are into the same snapshot's table: a
 * reader clamps n_backups to LG_SHM_MAX_BACKUPS and drops a member past nic_count (as it does
 * backup_index), the NIC itself, or a repeat. The set is part of the entry, under the same
 * seqlock. Members are listed whatever their state: which member is healthy is the member's
 * own entry. The daemon orders the set; a reader keeps that order (ties are already broken:
 * the operator's order for a listed set, round the rails from the NIC's next one for `all`).
 */
#ifndef LINKGUARD_SHM_H
#define LINKGUARD_SHM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LG_SHM_MAGIC 0x4853474cu /* "LGSH" in file byte order (little-endian) */
#define LG_SHM_VERSION 2u        /* layout version this header describes */
#define LG_SHM_COMPAT_VERSION 1u /* oldest reader version that can read version 2 */
#define LG_SHM_DEFAULT_PATH "/run/linkguard/linkguard.shm"
#define LG_SHM_PATH_ENV "LINKGUARD_SHM"
#define LG_SHM_OWNER_ENV "LINKGUARD_SHM_OWNER"

#define LG_SHM_HEADER_SIZE 256u
#define LG_SHM_NIC_SIZE 512u
#define LG_SHM_EVENT_SIZE 64u
#define LG_SHM_MAX_NICS 64u             /* readers reject a larger nic_capacity */
#define LG_SHM_MAX_RING_SLOTS (1u << 16) /* readers reject a larger ring (power of two) */

#define LG_NAME_LEN 16     /* IFNAMSIZ */
#define LG_RDMA_NAME_LEN 64 /* IB_DEVICE_NAME_MAX */
#define LG_PCI_PATH_LEN 192
#define LG_MAX_IPV4 4
#define LG_MAX_IPV6 4
#define LG_SHM_MAX_BACKUPS 16 /* members of one NIC's backup set (version 2) */

/* NIC states (daemon/linkguardd/states.py NicState mirrors these values). */
enum lg_nic_state {
    LG_NIC_UNKNOWN = 0,
    LG_NIC_UP = 1,         /* carrying traffic */
    LG_NIC_DEGRADED = 2,   /* still up but predicted to fail: move traffic off */
    LG_NIC_DOWN = 3,       /* dead */
    LG_NIC_DRAINED = 4,    /* operator asked to keep traffic off */
    LG_NIC_RECOVERING = 5, /* link back, in hold-down: not yet used for traffic */
    LG_NIC_STATE_COUNT
};

/* Transition reasons (daemon/linkguardd/states.py Reason mirrors these values). */
enum lg_reason {
    LG_REASON_NONE = 0,
    LG_REASON_STARTUP = 1,
    LG_REASON_CARRIER_LOST = 2,
    LG_REASON_OPER_DOWN = 3,
    LG_REASON_ADMIN_DOWN = 4,
    LG_REASON_ABSENT = 5,
    LG_REASON_IB_PORT_NOT_ACTIVE = 6,
    LG_REASON_VERBS_PORT_ERR = 7,
    LG_REASON_VERBS_DEVICE_FATAL = 8,
    LG_REASON_DOM_WARNING = 9,
    LG_REASON_DOM_ALARM = 10,
    LG_REASON_ERROR_RATE = 11,
    LG_REASON_LINK_RESTORED = 12,
    LG_REASON_HOLDDOWN_EXPIRED = 13,
    LG_REASON_OPERATOR_DRAIN = 14,
    LG_REASON_OPERATOR_UNDRAIN = 15,
    LG_REASON_CONDITION_CLEARED = 16,
    /* Events only, never a NIC's reason: a job's plugin reported the NIC gray (stalled, lossy,
     * slow), and no job reports it any more. The event's old and new state are the NIC's
     * current state: the daemon does not act on a job's word (docs/operators.md). */
    LG_REASON_PLUGIN_VERDICT = 17,
    LG_REASON_PLUGIN_VERDICT_CLEARED = 18,
    LG_REASON_COUNT
};

/* lg_shm_nic.flags */
#define LG_NIC_F_PRESENT (1u << 0) /* the netdev exists */
#define LG_NIC_F_CARRIER (1u << 1) /* last known carrier */
#define LG_NIC_F_ADMIN_UP (1u << 2)
#define LG_NIC_F_RDMA (1u << 3)    /* rdma_dev/rdma_port are valid */

#define LG_NO_BACKUP (-1)

/* Header: 256 bytes. Cache line 0 is written once at creation; line 1 holds the hot words. */
struct lg_shm_header {
    uint32_t magic;            /*   0: LG_SHM_MAGIC */
    uint32_t version;          /*   4: layout version of the writer */
    uint32_t compat_version;   /*   8: oldest reader version that can read this file */
    uint32_t header_size;      /*  12: sizeof(struct lg_shm_header) */
    uint32_t nic_size;         /*  16: sizeof(struct lg_shm_nic) */
    uint32_t nic_capacity;     /*  20: entries in the table */
    uint32_t event_size;       /*  24: sizeof(struct lg_shm_event) */
    uint32_t ring_slots;       /*  28: power of two */
    uint64_t nic_table_offset; /*  32: from the start of the file */
    uint64_t ring_offset;      /*  40 */
    uint64_t total_size;       /*  48: bytes the file must have */
    uint32_t daemon_pid;       /*  56 */
    uint32_t reserved0;        /*  60 */
    /* cache line 1: written on every change */
    uint64_t generation;       /*  64: seqlock; even = stable */
    uint64_t heartbeat_ns;     /*  72: CLOCK_MONOTONIC of the last heartbeat */
    uint64_t ring_head;        /*  80: newest published event seq (0 = none) */
    uint32_t nic_count;        /*  88: valid entries (protected by generation) */
    uint32_t reserved1;        /*  92 */
    uint64_t reserved2[4];     /*  96 */
    /* cache line 2: identity */
    uint64_t daemon_start_ns;  /* 128: CLOCK_REALTIME at daemon start */
    uint64_t daemon_start_monotonic_ns; /* 136: CLOCK_MONOTONIC at daemon start */
    uint8_t reserved3[112];    /* 144 */
};

/* One NIC: 512 bytes. Protected by the header's generation seqlock. */
struct lg_shm_nic {
    char name[LG_NAME_LEN];          /*   0: netdev, NUL-terminated */
    uint32_t state;                  /*  16: enum lg_nic_state */
    uint32_t reason;                 /*  20: enum lg_reason of the last change */
    uint64_t epoch;                  /*  24: +1 on every state change of this NIC */
    uint64_t last_change_ns;         /*  32: CLOCK_MONOTONIC of the last change */
    int32_t backup_index;            /*  40: index of the backup NIC, LG_NO_BACKUP if none */
    uint32_t flags;                  /*  44: LG_NIC_F_* */
    uint32_t ifindex;                /*  48 */
    uint32_t speed_mbps;             /*  52: 0 = unknown */
    uint32_t rdma_port;              /*  56 */
    uint32_t n_ipv4;                 /*  60 */
    uint32_t ipv4[LG_MAX_IPV4];      /*  64: network byte order */
    uint32_t n_ipv6;                 /*  80 */
    uint32_t reserved0;              /*  84 */
    uint8_t ipv6[LG_MAX_IPV6][16];   /*  88 */
    char rdma_dev[LG_RDMA_NAME_LEN]; /* 152: NUL-terminated, empty if none */
    char pci_path[LG_PCI_PATH_LEN];  /* 216: sysfs device path, NUL-terminated */
    /* version 2 (reserved, zero, in version 1): */
    uint32_t n_backups;              /* 408: valid entries of backup_set */
    uint8_t backup_set[LG_SHM_MAX_BACKUPS]; /* 412: NIC table indices, nearest first */
    uint8_t reserved1[84];           /* 428 */
};

/* One event record: 64 bytes. */
struct lg_shm_event {
    uint64_t seq;        /*  0: written last; slot valid when it equals the expected seq */
    uint64_t time_ns;    /*  8: CLOCK_MONOTONIC when the daemon decided */
    uint64_t epoch;      /* 16: the NIC's epoch after the change */
    uint64_t fact_ns;    /* 24: CLOCK_MONOTONIC when the monitor observed the fact */
    uint32_t nic_index;  /* 32 */
    uint32_t old_state;  /* 36 */
    uint32_t new_state;  /* 40 */
    uint32_t reason;     /* 44 */
    char name[LG_NAME_LEN]; /* 48 */
};

#define LG_SHM_ASSERT_OFFSET(type, field, off) \
    _Static_assert(offsetof(struct type, field) == (off), #type "." #field " offset")

LG_SHM_ASSERT_OFFSET(lg_shm_header, generation, 64);
LG_SHM_ASSERT_OFFSET(lg_shm_header, heartbeat_ns, 72);
LG_SHM_ASSERT_OFFSET(lg_shm_header, ring_head, 80);
LG_SHM_ASSERT_OFFSET(lg_shm_header, nic_count, 88);
LG_SHM_ASSERT_OFFSET(lg_shm_header, daemon_start_ns, 128);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, state, 16);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, epoch, 24);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, backup_index, 40);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, ipv4, 64);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, ipv6, 88);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, rdma_dev, 152);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, pci_path, 216);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, n_backups, 408);
LG_SHM_ASSERT_OFFSET(lg_shm_nic, backup_set, 412);
LG_SHM_ASSERT_OFFSET(lg_shm_event, nic_index, 32);
LG_SHM_ASSERT_OFFSET(lg_shm_event, name, 48);
_Static_assert(sizeof(struct lg_shm_header) == LG_SHM_HEADER_SIZE, "header size");
_Static_assert(sizeof(struct lg_shm_nic) == LG_SHM_NIC_SIZE, "nic size");
_Static_assert(sizeof(struct lg_shm_event) == LG_SHM_EVENT_SIZE, "event size");
_Static_assert(LG_SHM_MAX_NICS <= UINT8_MAX + 1, "a backup_set index is one byte");

/* ---- Reader API (plugin/src/daemon/shm_reader.c) ---------------------------------------------- */

enum lg_shm_status {
    LG_SHM_OK = 0,
    LG_SHM_ENOENT = 1,      /* no file */
    LG_SHM_ESHORT = 2,      /* smaller than its header or its declared layout */
    LG_SHM_EMAGIC = 3,      /* wrong magic */
    LG_SHM_EVERSION = 4,    /* compat_version newer than this reader */
    LG_SHM_ELAYOUT = 5,     /* sizes/offsets/capacities inconsistent */
    LG_SHM_EBUSY = 6,       /* no stable snapshot within the retry bound */
    LG_SHM_ESYS = 7,        /* open/mmap failed */
    LG_SHM_ESTALE = 8,      /* heartbeat older than the timeout */
    LG_SHM_EUNTRUSTED = 9,  /* owner or mode lets someone else than the daemon write it */
};

struct lg_shm_reader {
    const uint8_t *base; /* read-only mapping, NULL when closed */
    size_t size;
    const struct lg_shm_header *hdr;
    const struct lg_shm_nic *nics;
    const struct lg_shm_event *ring;
    uint32_t nic_capacity;
    uint32_t ring_mask;
    uint64_t dev, ino; /* identity of the mapped file, to notice a replaced one */
};

struct lg_shm_snapshot {
    uint64_t generation;
    uint32_t nic_count;
    struct lg_shm_nic nics[LG_SHM_MAX_NICS];
};

/* Maps `path` (NULL: $LINKGUARD_SHM, else the default) read-only and validates the header. */
/* The path a reader opens for `path`: it, else $LINKGUARD_SHM, else the default. */
const char *lg_shm_path_resolve(const char *path);
int lg_shm_reader_open(struct lg_shm_reader *r, const char *path);
/* The trust rule above for a file of owner `uid` and mode `mode` (st_uid, st_mode): LG_SHM_OK
 * or LG_SHM_EUNTRUSTED. */
int lg_shm_owner_check(uint32_t uid, uint32_t mode);
void lg_shm_reader_close(struct lg_shm_reader *r);
const char *lg_shm_strerror(int status);

/* Hot path: one acquire load. Returns non-zero when the table changed since *seen and updates
 * *seen. Needs an open reader (true for every function below taking a reader). */
static inline int lg_shm_changed(const struct lg_shm_reader *r, uint64_t *seen)
{
    uint64_t g = __atomic_load_n(&r->hdr->generation, __ATOMIC_ACQUIRE);
    if (g == *seen)
        return 0;
    *seen = g;
    return 1;
}

/* The same acquire load as lg_shm_changed, out of line, for bindings that cannot use an inline
 * function (ctypes). */
uint64_t lg_shm_generation(const struct lg_shm_reader *r);

/* A consistent copy of the table; entries are validated (state range, NUL-terminated names,
 * backup index in range, the backup set by the rules of "Backup sets", a version 1 file's
 * backup_index as a set of one, and backup_index the set's first member). LG_SHM_OK, LG_SHM_EBUSY or LG_SHM_ELAYOUT (nic_count too
 * big). */
int lg_shm_snapshot_read(const struct lg_shm_reader *r, struct lg_shm_snapshot *out);

/* Copies up to `max` events after *cursor into out[], advances *cursor, returns the number
 * copied (>= 0). Sets *lapped when events were lost (reader fell behind by more than the ring,
 * or *cursor was ahead of ring_head: another daemon's cursor): the caller then takes a snapshot;
 * the events returned are those after the gap. Start a cursor at lg_shm_ring_head(). Records are
 * sanitized like snapshot entries (states, reason, NUL-terminated name), except nic_index:
 * check it against the snapshot's nic_count before indexing. */
int lg_shm_events_read(const struct lg_shm_reader *r, uint64_t *cursor, struct lg_shm_event *out,
                       int max, int *lapped);

/* Newest published event sequence number (to start a cursor "from now"). */
uint64_t lg_shm_ring_head(const struct lg_shm_reader *r);

/* LG_SHM_OK when the heartbeat is at most timeout_ns away from now_ns (CLOCK_MONOTONIC), else
 * LG_SHM_ESTALE (also for a heartbeat of 0). */
int lg_shm_alive(const struct lg_shm_reader *r, uint64_t now_ns, uint64_t timeout_ns);

/* Non-zero when the file at `path` is no longer the mapped one (daemon restarted). Slow path:
 * one stat(2); call it only after the heartbeat went stale. */
int lg_shm_replaced(const struct lg_shm_reader *r, const char *path);

/* ---- Writer API (plugin/src/daemon/shm_writer.c; called from Python through ctypes) --------- */

struct lg_shm_writer;

/* Creates the file at `path` (tmp + rename, mode 0644) with room for nic_capacity NICs and
 * ring_slots events (power of two); the first event gets seq first_seq (>= 1; tests start near
 * 2^32 to prove the wrap). Returns NULL and sets *err (errno or an lg_shm_status) on failure. */
struct lg_shm_writer *lg_shm_writer_create(const char *path, uint32_t nic_capacity,
                                           uint32_t ring_slots, uint64_t first_seq, int *err);

/* Replaces the table with `count` entries (count <= capacity) under the seqlock and returns the
 * new generation (>= 2). `entries` is count * LG_SHM_NIC_SIZE bytes. Entries past count are
 * zeroed. Returns 0 and writes nothing when count > capacity. Not concurrent with itself. */
uint64_t lg_shm_writer_update(struct lg_shm_writer *w, const void *entries, uint32_t count);

/* Publishes one event (LG_SHM_EVENT_SIZE bytes; its seq field is ignored) and returns its seq.
 * Not concurrent with itself. */
uint64_t lg_shm_writer_push_event(struct lg_shm_writer *w, const void *event);

/* Stores now (CLOCK_MONOTONIC ns; 0 = read the clock) as the heartbeat. May run concurrently
 * with update/push_event (it writes only heartbeat_ns). */
void lg_shm_writer_heartbeat(struct lg_shm_writer *w, uint64_t now_ns);

/* Unmaps; unlinks the file when `unlink_file` is set (clean shutdown). */
void lg_shm_writer_close(struct lg_shm_writer *w, int unlink_file);

#ifdef __cplusplus
}
#endif
#endif /* LINKGUARD_SHM_H */
