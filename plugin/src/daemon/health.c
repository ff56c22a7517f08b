/* Process-wide reader of the daemon's NIC table (see health.h for the contract). */
#include "daemon/health.h"

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/log.h"
#include "runtime/wake.h"

static struct {
    pthread_mutex_t mu; /* serialises open/close/refresh */
    struct lg_shm_reader reader; /* reader.base != NULL while open (under mu) */
    const struct lg_shm_header *hdr; /* published copy of reader.hdr for the hot path (atomic) */
    uint64_t seen_gen;    /* generation of the cached table (atomic) */
    int alive;            /* cached table is from a live daemon (atomic) */
    uint64_t next_check;  /* next heartbeat check, CLOCK_MONOTONIC ns (atomic) */
    int said_absent;      /* "no daemon" logged since the last time it was alive (under mu) */
    uint32_t count;       /* entries in names[] (under mu; read racily only for a scan) */
    char names[LG_SHM_MAX_NICS][LG_NAME_LEN];
    uint32_t state[LG_SHM_MAX_NICS]; /* atomics */
    uint64_t epoch[LG_SHM_MAX_NICS]; /* atomics */
    struct lg_shm_snapshot snap;     /* scratch for refresh (under mu) */
    /* Mappings of replaced files (daemon restarts): never unmapped while comms may poll,
     * since a hot-path reader may still hold the old header pointer; unmapped at fini. */
    struct lg_shm_reader retired[16];
    int nretired;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void forget_states(void)
{
    for (uint32_t i = 0; i < LG_SHM_MAX_NICS; i++)
        __atomic_store_n(&g.state[i], LG_NIC_UNKNOWN, __ATOMIC_RELEASE);
    __atomic_store_n(&g.alive, 0, __ATOMIC_RELEASE);
}

/* Under mu. */
static void say_absent(const char *why)
{
    if (!g.said_absent)
        LG_INFO(NCCL_INIT | NCCL_NET,
                "linkguard: no daemon (%s); failover relies on the plugin's own detection", why);
    g.said_absent = 1;
}

/* Under mu: a planted or loosely permitted control file is worth a WARN, once per file. */
static void say_untrusted(void)
{
    static uint64_t warned_ino;
    const char *path = lg_shm_path_resolve(NULL);
    struct stat st;
    if (stat(path, &st) == 0 && (uint64_t)st.st_ino != warned_ino) {
        warned_ino = (uint64_t)st.st_ino;
        LG_WARN("linkguard: ignoring the control file %s: owner uid %u, mode %04o; it must be "
                "owned by root, by this process's user or by %s, and writable by no one else",
                path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), LG_SHM_OWNER_ENV);
    }
    say_absent(lg_shm_strerror(LG_SHM_EUNTRUSTED));
}

/* Under mu: copy the table into the cache. */
static void refresh_locked(void)
{
    if (!g.reader.base)
        return;
    if (lg_shm_snapshot_read(&g.reader, &g.snap) != LG_SHM_OK)
        return; /* a writer stuck mid-update; the heartbeat check will call it stale */
    g.count = g.snap.nic_count;
    for (uint32_t i = 0; i < g.snap.nic_count; i++) {
        memcpy(g.names[i], g.snap.nics[i].name, LG_NAME_LEN);
        __atomic_store_n(&g.epoch[i], g.snap.nics[i].epoch, __ATOMIC_RELAXED);
        __atomic_store_n(&g.state[i], g.snap.nics[i].state, __ATOMIC_RELEASE);
    }
    for (uint32_t i = g.snap.nic_count; i < LG_SHM_MAX_NICS; i++)
        __atomic_store_n(&g.state[i], LG_NIC_UNKNOWN, __ATOMIC_RELEASE);
    __atomic_store_n(&g.seen_gen, g.snap.generation, __ATOMIC_RELEASE);
}

/* Under mu: (re)open when closed, stale or replaced; refresh when alive. */
static void check_locked(uint64_t now)
{
    if (g.reader.base) {
        int stale = lg_shm_alive(&g.reader, now, LG_HEALTH_STALE_NS) != LG_SHM_OK;
        if (!stale) {
            if (!__atomic_load_n(&g.alive, __ATOMIC_ACQUIRE)) {
                refresh_locked();
                __atomic_store_n(&g.alive, 1, __ATOMIC_RELEASE);
            }
            return;
        }
        if (!lg_shm_replaced(&g.reader, NULL)) {
            forget_states();
            say_absent("heartbeat stale");
            return;
        }
        __atomic_store_n(&g.hdr, NULL, __ATOMIC_RELEASE);
        if (g.nretired < (int)(sizeof(g.retired) / sizeof(g.retired[0])))
            g.retired[g.nretired++] = g.reader; /* else leak it: a few KiB per restart */
        memset(&g.reader, 0, sizeof(g.reader));
    }
    forget_states();
    int status = lg_shm_reader_open(&g.reader, NULL);
    if (status == LG_SHM_EUNTRUSTED) {
        say_untrusted();
        return;
    }
    if (status != LG_SHM_OK) {
        say_absent(lg_shm_strerror(status));
        return;
    }
    if (lg_shm_alive(&g.reader, now, LG_HEALTH_STALE_NS) != LG_SHM_OK) {
        say_absent("heartbeat stale");
        __atomic_store_n(&g.hdr, g.reader.hdr, __ATOMIC_RELEASE);
        return;
    }
    __atomic_store_n(&g.hdr, g.reader.hdr, __ATOMIC_RELEASE);
    refresh_locked();
    __atomic_store_n(&g.alive, 1, __ATOMIC_RELEASE);
    if (g.said_absent)
        LG_INFO(NCCL_INIT | NCCL_NET, "linkguard: daemon found (pid %u); using its NIC health",
                g.reader.hdr->daemon_pid);
    g.said_absent = 0;
}

void lg_health_init(void)
{
    pthread_mutex_lock(&g.mu);
    uint64_t now = now_monotonic();
    check_locked(now);
    __atomic_store_n(&g.next_check, now + LG_HEALTH_RECHECK_NS, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g.mu);
}

void lg_health_fini(void)
{
    pthread_mutex_lock(&g.mu);
    __atomic_store_n(&g.hdr, NULL, __ATOMIC_RELEASE);
    lg_shm_reader_close(&g.reader);
    for (int i = 0; i < g.nretired; i++)
        lg_shm_reader_close(&g.retired[i]);
    g.nretired = 0;
    forget_states();
    g.count = 0;
    pthread_mutex_unlock(&g.mu);
}

uint64_t lg_health_poll(void)
{
    const struct lg_shm_header *h = __atomic_load_n(&g.hdr, __ATOMIC_ACQUIRE);
    uint64_t seen = __atomic_load_n(&g.seen_gen, __ATOMIC_ACQUIRE);
    if (!h || !__atomic_load_n(&g.alive, __ATOMIC_RELAXED))
        return seen;
    /* The one load of the hot path. The mapping stays valid: replaced mappings are retired,
     * not unmapped, until lg_health_fini. */
    uint64_t gen = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
    if (gen == seen || (gen & 1))
        return seen;
    if (pthread_mutex_trylock(&g.mu) == 0) {
        refresh_locked();
        pthread_mutex_unlock(&g.mu);
    }
    return __atomic_load_n(&g.seen_gen, __ATOMIC_ACQUIRE);
}

void lg_monitor_health_poll(void)
{
    static uint64_t gen_told; /* the table generation last announced (atomic) */
    uint64_t gen = lg_health_poll();
    if (gen != __atomic_load_n(&gen_told, __ATOMIC_RELAXED)) {
        __atomic_store_n(&gen_told, gen, __ATOMIC_RELAXED);
        lg_wake_monitor(1);
    }
}

void lg_health_tick(uint64_t now_ns)
{
    uint64_t next = __atomic_load_n(&g.next_check, __ATOMIC_RELAXED);
    if (now_ns < next)
        return;
    if (pthread_mutex_trylock(&g.mu) != 0)
        return;
    __atomic_store_n(&g.next_check, now_ns + LG_HEALTH_RECHECK_NS, __ATOMIC_RELAXED);
    check_locked(now_ns);
    pthread_mutex_unlock(&g.mu);
}

int lg_health_alive(void) { return __atomic_load_n(&g.alive, __ATOMIC_ACQUIRE); }

int lg_health_find(const char *name)
{
    int found = -1;
    pthread_mutex_lock(&g.mu);
    for (uint32_t i = 0; i < g.count; i++)
        if (strncmp(g.names[i], name, LG_NAME_LEN) == 0) {
            found = (int)i;
            break;
        }
    pthread_mutex_unlock(&g.mu);
    return found;
}

uint32_t lg_health_state(int index, uint64_t *epoch)
{
    if (index < 0 || index >= (int)LG_SHM_MAX_NICS) {
        if (epoch)
            *epoch = 0;
        return LG_NIC_UNKNOWN;
    }
    uint32_t s = __atomic_load_n(&g.state[index], __ATOMIC_ACQUIRE);
    if (epoch)
        *epoch = __atomic_load_n(&g.epoch[index], __ATOMIC_RELAXED);
    return s;
}

int lg_health_snapshot(struct lg_shm_snapshot *out)
{
    int status = LG_SHM_ENOENT;
    pthread_mutex_lock(&g.mu);
    if (g.reader.base && __atomic_load_n(&g.alive, __ATOMIC_ACQUIRE))
        status = lg_shm_snapshot_read(&g.reader, out);
    else if (g.reader.base)
        status = LG_SHM_ESTALE;
    pthread_mutex_unlock(&g.mu);
    return status;
}
