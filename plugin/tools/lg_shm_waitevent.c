/* lg_shm_waitevent: busy-polls the event ring of the control channel and prints, for every new
 * event, the CLOCK_MONOTONIC time at which it became visible to a reader. bench/detect_latency.py
 * uses it to measure fault -> shared memory latency; CLOCK_MONOTONIC is one clock for the whole
 * machine (network namespaces do not have their own), so these stamps compare with the lab's.
 *
 *   lg_shm_waitevent [--path P] [--cpu N] [--open-timeout-ms T] [--idle-timeout-ms T]
 *                    [--max-events N]
 *
 * Prints one JSON object per line, flushed at once:
 *   {"ready": true, "ring_head": H, "pid": P}              once the file is open and alive
 *   {"seq": .., "seen_ns": .., "time_ns": .., "fact_ns": .., "epoch": .., "nic_index": ..,
 *    "name": "..", "old_state": "..", "new_state": "..", "reason": "..", "lapped": false,
 *    "table_seen_ns": ..}
 * seen_ns: when the event's ring slot became visible. table_seen_ns: when the first table
 * generation change at or after the event's time_ns became visible, i.e. the moment the
 * plugin's hot path (one load of `generation`) would have noticed this transition (the daemon
 * publishes the table before the event); 0 if none was seen.
 *   {"gone": true}                                         the daemon's heartbeat went stale
 * Exit status: 0 after --max-events events or on SIGTERM/SIGINT; 1 no daemon (not open within
 * --open-timeout-ms, or it went away); 2 usage; 3 no event for --idle-timeout-ms.
 *
 * Why not lg_shm_dump --wait-state: it sleeps 1 ms between polls (right for a test, but that is
 * the size of what we measure) and reports table states, not events with the daemon's stamps.
 * The spin is the hot path of the plugin (one acquire load of ring_head) plus a pause and a
 * sched_yield, so a 2-CPU machine still runs the daemon and the kernel's work next to it.
 */
#include "linkguard_shm.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LG_EXIT_OK = 0, LG_EXIT_NODAEMON = 1, LG_EXIT_USAGE = 2, LG_EXIT_IDLE = 3 };

static const char *const lg_state_names[LG_NIC_STATE_COUNT] = {
    "UNKNOWN", "UP", "DEGRADED", "DOWN", "DRAINED", "RECOVERING",
};
static const char *const lg_reason_names[LG_REASON_COUNT] = {
    "NONE", "STARTUP", "CARRIER_LOST", "OPER_DOWN", "ADMIN_DOWN", "ABSENT",
    "IB_PORT_NOT_ACTIVE", "VERBS_PORT_ERR", "VERBS_DEVICE_FATAL", "DOM_WARNING", "DOM_ALARM",
    "ERROR_RATE", "LINK_RESTORED", "HOLDDOWN_EXPIRED", "OPERATOR_DRAIN", "OPERATOR_UNDRAIN",
    "CONDITION_CLEARED", "PLUGIN_VERDICT", "PLUGIN_VERDICT_CLEARED",
};

static volatile sig_atomic_t lg_stop;

static void lg_on_signal(int sig)
{
    (void)sig;
    lg_stop = 1;
}

static uint64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void lg_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
    sched_yield();
}

static int lg_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || *end || errno || *s == '-')
        return -1;
    *out = v;
    return 0;
}

/* Names are sanitized by lg_shm_events_read (NUL-terminated); quote and escape for JSON. */
static void lg_json_name(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* Stamps of the latest table generation changes, oldest overwritten first. Unrelated publishes
 * (inventory, DOM readings) also change the generation, so an event is matched with the first
 * change at or after its own decision time, not simply with the latest one. */
#define LG_GEN_STAMPS 16
static uint64_t lg_gen_stamps[LG_GEN_STAMPS];
static unsigned lg_gen_next;

static uint64_t lg_table_seen(uint64_t time_ns)
{
    uint64_t best = 0;
    for (unsigned i = 0; i < LG_GEN_STAMPS; i++) {
        uint64_t t = lg_gen_stamps[i];
        if (t >= time_ns && (best == 0 || t < best))
            best = t;
    }
    return best;
}

static void lg_print_event(const struct lg_shm_event *e, uint64_t seen_ns, int lapped)
{
    printf("{\"seq\": %llu, \"seen_ns\": %llu, \"time_ns\": %llu, \"fact_ns\": %llu, "
           "\"epoch\": %llu, \"nic_index\": %u, \"name\": ",
           (unsigned long long)e->seq, (unsigned long long)seen_ns,
           (unsigned long long)e->time_ns, (unsigned long long)e->fact_ns,
           (unsigned long long)e->epoch, e->nic_index);
    lg_json_name(e->name);
    printf(", \"old_state\": \"%s\", \"new_state\": \"%s\", \"reason\": \"%s\", "
           "\"lapped\": %s, \"table_seen_ns\": %llu}\n",
           lg_state_names[e->old_state], lg_state_names[e->new_state], lg_reason_names[e->reason],
           lapped ? "true" : "false", (unsigned long long)lg_table_seen(e->time_ns));
}

static void lg_usage(void)
{
    fprintf(stderr, "usage: lg_shm_waitevent [--path P] [--cpu N] [--open-timeout-ms T] "
                    "[--idle-timeout-ms T] [--max-events N]\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"path", required_argument, NULL, 'p'},
        {"cpu", required_argument, NULL, 'c'},
        {"open-timeout-ms", required_argument, NULL, 'o'},
        {"idle-timeout-ms", required_argument, NULL, 'i'},
        {"max-events", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    uint64_t cpu = UINT64_MAX, open_timeout_ms = 10000, idle_timeout_ms = 60000, max_events = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'p': path = optarg; break;
        case 'c': bad = lg_parse_u64(optarg, &cpu); break;
        case 'o': bad = lg_parse_u64(optarg, &open_timeout_ms); break;
        case 'i': bad = lg_parse_u64(optarg, &idle_timeout_ms); break;
        case 'm': bad = lg_parse_u64(optarg, &max_events); break;
        default: lg_usage(); return c == 'h' ? LG_EXIT_OK : LG_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "lg_shm_waitevent: bad number '%s'\n", optarg);
            return LG_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        lg_usage();
        return LG_EXIT_USAGE;
    }
    if (cpu != UINT64_MAX) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if (cpu >= CPU_SETSIZE) {
            fprintf(stderr, "lg_shm_waitevent: bad cpu %llu\n", (unsigned long long)cpu);
            return LG_EXIT_USAGE;
        }
        CPU_SET((int)cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "lg_shm_waitevent: cannot pin to cpu %llu: %s (running unpinned)\n",
                    (unsigned long long)cpu, strerror(errno));
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = lg_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    /* Open: the daemon may still be starting; poll (bounded) until the file is valid and alive. */
    struct lg_shm_reader r = {0};
    uint64_t start = lg_now_ns(), hb_timeout = 1000000000ull;
    int status = LG_SHM_ENOENT;
    while (!lg_stop) {
        status = lg_shm_reader_open(&r, path);
        if (status == LG_SHM_OK && (status = lg_shm_alive(&r, lg_now_ns(), hb_timeout)) == 0)
            break;
        lg_shm_reader_close(&r);
        if (lg_now_ns() - start > open_timeout_ms * 1000000ull)
            break;
        struct timespec ms = {0, 1000000L};
        nanosleep(&ms, NULL);
    }
    if (status != LG_SHM_OK) {
        fprintf(stderr, "lg_shm_waitevent: %s\n", lg_shm_strerror(status));
        return LG_EXIT_NODAEMON;
    }
    uint64_t cursor = lg_shm_ring_head(&r), printed = 0;
    printf("{\"ready\": true, \"ring_head\": %llu, \"pid\": %u}\n", (unsigned long long)cursor,
           r.hdr->daemon_pid);
    fflush(stdout);

    static struct lg_shm_event events[LG_SHM_MAX_RING_SLOTS];
    uint64_t last_event = lg_now_ns(), last_check = last_event, generation = 0;
    (void)lg_shm_changed(&r, &generation);
    int rc = LG_EXIT_OK;
    while (!lg_stop && (max_events == 0 || printed < max_events)) {
        /* The plugin's hot path (one acquire load of generation), then the ring head. An odd
         * generation is an update in progress: stamp only the even one that ends it. */
        uint64_t before = generation;
        if (lg_shm_changed(&r, &generation)) {
            if (generation & 1)
                generation = before; /* look again until the update is complete */
            else
                lg_gen_stamps[lg_gen_next++ % LG_GEN_STAMPS] = lg_now_ns();
        }
        uint64_t head = lg_shm_ring_head(&r);
        if (head == cursor) {
            uint64_t now = lg_now_ns();
            if (now - last_check > 100000000ull) { /* slow path, 10 times a second */
                last_check = now;
                if (lg_shm_alive(&r, now, hb_timeout) != LG_SHM_OK) {
                    printf("{\"gone\": true}\n");
                    rc = LG_EXIT_NODAEMON;
                    break;
                }
                if (now - last_event > idle_timeout_ms * 1000000ull) {
                    rc = LG_EXIT_IDLE;
                    break;
                }
            }
            lg_relax();
            continue;
        }
        uint64_t seen_ns = lg_now_ns(); /* stamped before the copy: visibility, not our work */
        last_event = seen_ns;
        int lapped = 0;
        int n = lg_shm_events_read(&r, &cursor, events, LG_SHM_MAX_RING_SLOTS, &lapped);
        for (int i = 0; i < n && (max_events == 0 || printed < max_events); i++, printed++)
            lg_print_event(&events[i], seen_ns, lapped);
        fflush(stdout);
    }
    lg_shm_reader_close(&r);
    return rc;
}
