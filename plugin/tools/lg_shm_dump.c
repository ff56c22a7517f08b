/* lg_shm_dump: reads the control channel through the plugin's C reader and prints it, so tests
 * can check what NCCL processes see, not only what Python sees.
 *
 *   lg_shm_dump [--path P] [--json] [--heartbeat-timeout-ms T] [--events-since N]
 *   lg_shm_dump [--path P] --stress-snapshots SECONDS
 *   lg_shm_dump [--path P] --wait-state NIC STATE [--timeout-ms T]
 *
 * Exit status: 0 ok; 1 "no daemon" (lg_shm_strerror's message on stderr); 2 usage; 3 a check
 * failed (torn snapshots in --stress-snapshots, --wait-state timed out).
 *
 * --stress-snapshots expects the stress pattern (tests/unit/test_shm_channel.py writes it): every
 * publish uses one counter c for all entries, and entry i is
 *   name "stress<i>", state c % 6, reason c % 17, epoch c, last_change_ns c * 0x9E3779B97F4A7C15,
 *   backup_index -1, flags c & 15, ifindex (u32)c, speed_mbps (u32)(c >> 32), rdma_port (u32)(3c),
 *   4 IPv4 = the u32 (c + k), 4 IPv6 = be64(c + k) || be64(~(c + k)), k = 0..3,
 *   rdma_dev = "%016llx" of c three times, pci_path the same eleven times, the rest zero.
 * So a snapshot mixing two publishes, or one publish half-written, differs from the entry its
 * own epoch predicts (torn); the counter must also never go backwards.
 */
#include "linkguard_shm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum { LG_EXIT_OK = 0, LG_EXIT_NODAEMON = 1, LG_EXIT_USAGE = 2, LG_EXIT_CHECK = 3 };

static const char *const lg_state_names[LG_NIC_STATE_COUNT] = {
    "UNKNOWN", "UP", "DEGRADED", "DOWN", "DRAINED", "RECOVERING",
};
static const char *const lg_reason_names[LG_REASON_COUNT] = {
    "NONE", "STARTUP", "CARRIER_LOST", "OPER_DOWN", "ADMIN_DOWN", "ABSENT",
    "IB_PORT_NOT_ACTIVE", "VERBS_PORT_ERR", "VERBS_DEVICE_FATAL", "DOM_WARNING", "DOM_ALARM",
    "ERROR_RATE", "LINK_RESTORED", "HOLDDOWN_EXPIRED", "OPERATOR_DRAIN", "OPERATOR_UNDRAIN",
    "CONDITION_CLEARED", "PLUGIN_VERDICT", "PLUGIN_VERDICT_CLEARED",
};

static uint64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void lg_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* JSON string: bytes >= 0x80 are shown as Latin-1 escapes so garbage still gives valid JSON. */
static void lg_json_str(const char *s)
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

/* The members of n's backup set that the header's reader rules keep (in the table, not n
 * itself, not a repeat), separated by `sep`; returns how many it printed. */
static uint32_t lg_backup_set_print(const struct lg_shm_nic *n, uint32_t index, uint32_t count,
                                    const char *sep)
{
    uint32_t shown = 0;
    for (uint32_t k = 0; k < n->n_backups && k < LG_SHM_MAX_BACKUPS; k++) {
        uint32_t m = n->backup_set[k];
        int repeat = 0;
        for (uint32_t j = 0; j < k; j++)
            repeat |= n->backup_set[j] == m;
        if (m >= count || m == index || repeat)
            continue;
        printf("%s%u", shown++ ? sep : "", m);
    }
    return shown;
}

static void lg_nic_print_json(const struct lg_shm_nic *n, uint32_t index, uint32_t count)
{
    char addr[INET6_ADDRSTRLEN];
    printf("{\"index\": %u, \"name\": ", index);
    lg_json_str(n->name);
    printf(", \"state\": \"%s\", \"state_code\": %u, \"reason\": \"%s\", \"reason_code\": %u",
           lg_state_names[n->state], n->state, lg_reason_names[n->reason], n->reason);
    printf(", \"epoch\": %llu, \"last_change_ns\": %llu, \"backup_index\": %d, \"flags\": %u",
           (unsigned long long)n->epoch, (unsigned long long)n->last_change_ns, n->backup_index,
           n->flags);
    printf(", \"ifindex\": %u, \"speed_mbps\": %u, \"rdma_dev\": ", n->ifindex, n->speed_mbps);
    lg_json_str(n->rdma_dev);
    printf(", \"rdma_port\": %u, \"pci_path\": ", n->rdma_port);
    lg_json_str(n->pci_path);
    printf(", \"ipv4\": [");
    for (uint32_t k = 0; k < n->n_ipv4; k++)
        printf("%s\"%s\"", k ? ", " : "", inet_ntop(AF_INET, &n->ipv4[k], addr, sizeof(addr)));
    printf("], \"ipv6\": [");
    for (uint32_t k = 0; k < n->n_ipv6; k++)
        printf("%s\"%s\"", k ? ", " : "", inet_ntop(AF_INET6, n->ipv6[k], addr, sizeof(addr)));
    printf("], \"backup_set\": [");
    lg_backup_set_print(n, index, count, ", ");
    printf("]}");
}

static void lg_event_print_json(const struct lg_shm_event *e)
{
    printf("{\"seq\": %llu, \"time_ns\": %llu, \"fact_ns\": %llu, \"epoch\": %llu, "
           "\"nic_index\": %u, \"name\": ",
           (unsigned long long)e->seq, (unsigned long long)e->time_ns,
           (unsigned long long)e->fact_ns, (unsigned long long)e->epoch, e->nic_index);
    lg_json_str(e->name);
    printf(", \"old_state\": \"%s\", \"new_state\": \"%s\", \"reason\": \"%s\"}",
           lg_state_names[e->old_state], lg_state_names[e->new_state], lg_reason_names[e->reason]);
}

/* A snapshot, retrying briefly while a writer is mid-update (EBUSY is a try-result). */
static int lg_snapshot_retry(const struct lg_shm_reader *r, struct lg_shm_snapshot *snap)
{
    int status = LG_SHM_EBUSY;
    for (int i = 0; i < 100 && status == LG_SHM_EBUSY; i++) {
        if (i)
            lg_sleep_ms(1);
        status = lg_shm_snapshot_read(r, snap);
    }
    return status;
}

static int lg_dump(const struct lg_shm_reader *r, int json, int with_events, uint64_t cursor)
{
    static struct lg_shm_snapshot snap;
    static struct lg_shm_event events[LG_SHM_MAX_RING_SLOTS];
    int status = lg_snapshot_retry(r, &snap);
    if (status != LG_SHM_OK) {
        fprintf(stderr, "lg_shm_dump: %s\n", lg_shm_strerror(status));
        return LG_EXIT_NODAEMON;
    }
    int n = 0, lapped = 0;
    if (with_events) /* one call: the buffer holds a whole ring */
        n = lg_shm_events_read(r, &cursor, events, LG_SHM_MAX_RING_SLOTS, &lapped);
    const struct lg_shm_header *h = r->hdr; /* static words, plus hot ones shown as-is */
    uint64_t hb = __atomic_load_n(&h->heartbeat_ns, __ATOMIC_ACQUIRE), now = lg_now_ns();
    if (!json) {
        printf("pid %u generation %llu heartbeat_age_ms %.1f nics %u/%u ring_head %llu\n",
               h->daemon_pid, (unsigned long long)snap.generation,
               now > hb ? (double)(now - hb) / 1e6 : 0.0, snap.nic_count, r->nic_capacity,
               (unsigned long long)lg_shm_ring_head(r));
        for (uint32_t i = 0; i < snap.nic_count; i++) {
            const struct lg_shm_nic *nic = &snap.nics[i];
            printf("%-15s %-10s %-18s epoch %-6llu backup %d set ", nic->name,
                   lg_state_names[nic->state], lg_reason_names[nic->reason],
                   (unsigned long long)nic->epoch, nic->backup_index);
            if (!lg_backup_set_print(nic, i, snap.nic_count, ","))
                putchar('-');
            putchar('\n');
        }
        for (int i = 0; i < n; i++)
            printf("event %llu %s %s -> %s (%s)\n", (unsigned long long)events[i].seq,
                   events[i].name, lg_state_names[events[i].old_state],
                   lg_state_names[events[i].new_state], lg_reason_names[events[i].reason]);
        if (lapped)
            printf("events lapped: some were lost\n");
        return LG_EXIT_OK;
    }
    printf("{\"version\": %u, \"compat_version\": %u, \"daemon_pid\": %u, "
           "\"daemon_start_ns\": %llu, \"heartbeat_ns\": %llu, \"heartbeat_age_ns\": %lld, "
           "\"generation\": %llu, \"nic_capacity\": %u, \"ring_slots\": %u, \"ring_head\": %llu, "
           "\"nics\": [",
           h->version, h->compat_version, h->daemon_pid, (unsigned long long)h->daemon_start_ns,
           (unsigned long long)hb, (long long)(now - hb), (unsigned long long)snap.generation,
           r->nic_capacity, r->ring_mask + 1, (unsigned long long)lg_shm_ring_head(r));
    for (uint32_t i = 0; i < snap.nic_count; i++) {
        fputs(i ? ", " : "", stdout);
        lg_nic_print_json(&snap.nics[i], i, snap.nic_count);
    }
    printf("]");
    if (with_events) {
        printf(", \"events\": [");
        for (int i = 0; i < n; i++) {
            fputs(i ? ", " : "", stdout);
            lg_event_print_json(&events[i]);
        }
        printf("], \"events_lapped\": %s, \"events_cursor\": %llu", lapped ? "true" : "false",
               (unsigned long long)cursor);
    }
    printf("}\n");
    return LG_EXIT_OK;
}

/* The entry the stress pattern (see the top of this file) predicts for counter c, index i. */
static void lg_stress_entry(struct lg_shm_nic *n, uint64_t c, uint32_t i)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->name, sizeof(n->name), "stress%u", i % 1000u); /* i < LG_SHM_MAX_NICS */
    n->state = (uint32_t)(c % 6);
    n->reason = (uint32_t)(c % 17);
    n->epoch = c;
    n->last_change_ns = c * 0x9E3779B97F4A7C15ull;
    n->backup_index = LG_NO_BACKUP;
    n->flags = (uint32_t)(c & 15);
    n->ifindex = (uint32_t)c;
    n->speed_mbps = (uint32_t)(c >> 32);
    n->rdma_port = (uint32_t)(3 * c);
    n->n_ipv4 = LG_MAX_IPV4;
    n->n_ipv6 = LG_MAX_IPV6;
    for (int k = 0; k < 4; k++) {
        uint64_t v = c + (uint64_t)k;
        n->ipv4[k] = htonl((uint32_t)v);
        for (int b = 0; b < 8; b++) {
            n->ipv6[k][b] = (uint8_t)(v >> (56 - 8 * b));
            n->ipv6[k][8 + b] = (uint8_t)(~v >> (56 - 8 * b));
        }
    }
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c);
    for (int k = 0; k < 3; k++)
        memcpy(n->rdma_dev + 16 * k, hex, 16);
    for (int k = 0; k < 11; k++)
        memcpy(n->pci_path + 16 * k, hex, 16);
}

static int lg_stress(const struct lg_shm_reader *r, double seconds)
{
    static struct lg_shm_snapshot snap;
    struct lg_shm_nic want;
    uint64_t snapshots = 0, generations = 0, torn = 0, busy = 0, empty = 0;
    uint64_t last_gen = 0, last_c = 0, first_c = 0;
    int have_last = 0;
    uint64_t start = lg_now_ns(), end = start + (uint64_t)(seconds * 1e9), now = start;
    for (uint64_t i = 0; now < end; i++) {
        if ((i & 63) == 0)
            now = lg_now_ns();
        int status = lg_shm_snapshot_read(r, &snap);
        if (status == LG_SHM_EBUSY) {
            busy++;
            continue;
        }
        if (status != LG_SHM_OK) {
            fprintf(stderr, "lg_shm_dump: %s\n", lg_shm_strerror(status));
            return LG_EXIT_NODAEMON;
        }
        snapshots++;
        if (snap.nic_count == 0) {
            empty++;
            continue;
        }
        uint64_t c = snap.nics[0].epoch;
        int bad = snap.generation & 1;
        for (uint32_t k = 0; k < snap.nic_count && !bad; k++) {
            lg_stress_entry(&want, c, k);
            bad = memcmp(&want, &snap.nics[k], sizeof(want)) != 0;
        }
        if (have_last && (snap.generation < last_gen || c < last_c ||
                          (snap.generation == last_gen && c != last_c)))
            bad = 1; /* went backwards, or one generation holding two contents */
        if (bad) {
            if (torn++ < 5)
                fprintf(stderr, "lg_shm_dump: torn snapshot at generation %llu (counter %llu)\n",
                        (unsigned long long)snap.generation, (unsigned long long)c);
            continue;
        }
        if (!have_last || snap.generation != last_gen)
            generations++;
        if (!have_last)
            first_c = c;
        have_last = 1;
        last_gen = snap.generation;
        last_c = c;
    }
    double took = (double)(lg_now_ns() - start) / 1e9;
    printf("{\"seconds\": %.3f, \"snapshots\": %llu, \"snapshots_per_s\": %.0f, "
           "\"generations\": %llu, \"torn\": %llu, \"busy\": %llu, \"empty\": %llu, "
           "\"first_counter\": %llu, \"last_counter\": %llu}\n",
           took, (unsigned long long)snapshots, (double)snapshots / took,
           (unsigned long long)generations, (unsigned long long)torn, (unsigned long long)busy,
           (unsigned long long)empty, (unsigned long long)first_c, (unsigned long long)last_c);
    return torn ? LG_EXIT_CHECK : LG_EXIT_OK;
}

static int lg_state_parse(const char *s)
{
    for (int i = 0; i < LG_NIC_STATE_COUNT; i++)
        if (strcasecmp(s, lg_state_names[i]) == 0)
            return i;
    char *end;
    long v = strtol(s, &end, 10);
    return (*s && !*end && v >= 0 && v < LG_NIC_STATE_COUNT) ? (int)v : -1;
}

/* Polls (changed() then a snapshot) until `nic` has `state`; re-opens a replaced file when the
 * heartbeat goes stale, as the plugin does across a daemon restart. */
static int lg_wait_state(struct lg_shm_reader *r, const char *path, const char *nic, int state,
                         long timeout_ms)
{
    static struct lg_shm_snapshot snap;
    uint64_t start = lg_now_ns(), deadline = start + (uint64_t)timeout_ms * 1000000ull;
    uint64_t seen = 0, last_check = start;
    int first = 1, last_state = -1;
    for (;;) {
        uint64_t now = lg_now_ns();
        if (r->base && now - last_check > 100000000ull) {
            last_check = now;
            if (lg_shm_alive(r, now, 1000000000ull) != LG_SHM_OK && lg_shm_replaced(r, path)) {
                lg_shm_reader_close(r);
                first = 1;
            }
        }
        if (!r->base)
            (void)lg_shm_reader_open(r, path); /* not there yet: poll until the deadline */
        if (r->base && (first || lg_shm_changed(r, &seen))) {
            if (lg_shm_snapshot_read(r, &snap) != LG_SHM_OK) {
                first = 1; /* busy: retry the full read next turn */
                goto next;
            }
            first = 0;
            seen = snap.generation;
            for (uint32_t i = 0; i < snap.nic_count; i++) {
                const struct lg_shm_nic *n = &snap.nics[i];
                if (strcmp(n->name, nic) != 0)
                    continue;
                last_state = (int)n->state;
                if (last_state != state)
                    break;
                uint64_t at = lg_now_ns();
                printf("{\"nic\": ");
                lg_json_str(nic);
                printf(", \"state\": \"%s\", \"seen\": true, \"waited_ms\": %.3f, "
                       "\"seen_monotonic_ns\": %llu, \"last_change_ns\": %llu, \"epoch\": %llu, "
                       "\"reason\": \"%s\", \"generation\": %llu}\n",
                       lg_state_names[state], (double)(at - start) / 1e6,
                       (unsigned long long)at, (unsigned long long)n->last_change_ns,
                       (unsigned long long)n->epoch, lg_reason_names[n->reason],
                       (unsigned long long)snap.generation);
                return LG_EXIT_OK;
            }
        }
    next:
        if (lg_now_ns() >= deadline)
            break;
        lg_sleep_ms(1);
    }
    printf("{\"nic\": ");
    lg_json_str(nic);
    printf(", \"state\": \"%s\", \"seen\": false, \"last_state\": \"%s\", \"waited_ms\": %ld}\n",
           lg_state_names[state], last_state < 0 ? "ABSENT" : lg_state_names[last_state],
           timeout_ms);
    return LG_EXIT_CHECK;
}

static void lg_usage(void)
{
    fprintf(stderr,
            "usage: lg_shm_dump [--path P] [--json] [--heartbeat-timeout-ms T] "
            "[--events-since N]\n"
            "       lg_shm_dump [--path P] --stress-snapshots SECONDS\n"
            "       lg_shm_dump [--path P] --wait-state NIC STATE [--timeout-ms T]\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"path", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {"events-since", required_argument, NULL, 'e'},
        {"heartbeat-timeout-ms", required_argument, NULL, 'H'},
        {"stress-snapshots", required_argument, NULL, 's'},
        {"wait-state", required_argument, NULL, 'w'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL, *wait_nic = NULL;
    int json = 0, with_events = 0, wait_state = -1;
    uint64_t cursor = 0;
    long hb_timeout_ms = 1000, timeout_ms = 10000;
    double stress_s = 0;
    char *end = NULL;
    int c;
    /* "+": no argv permutation, so --wait-state can take its second word by advancing optind. */
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        errno = 0;
        switch (c) {
        case 'p': path = optarg; break;
        case 'j': json = 1; break;
        case 'e': with_events = 1; cursor = strtoull(optarg, &end, 0); break;
        case 'H': hb_timeout_ms = strtol(optarg, &end, 0); break;
        case 's': stress_s = strtod(optarg, &end); break;
        case 't': timeout_ms = strtol(optarg, &end, 0); break;
        case 'w':
            /* two arguments: NIC (optarg) and STATE (the next word) */
            if (optind >= argc || (wait_state = lg_state_parse(argv[optind])) < 0) {
                fprintf(stderr, "lg_shm_dump: --wait-state NIC STATE (a state name or 0..%d)\n",
                        LG_NIC_STATE_COUNT - 1);
                return LG_EXIT_USAGE;
            }
            wait_nic = optarg;
            optind++;
            break;
        default: lg_usage(); return c == 'h' ? LG_EXIT_OK : LG_EXIT_USAGE;
        }
        if (end && (end == optarg || *end || errno)) {
            fprintf(stderr, "lg_shm_dump: bad number '%s'\n", optarg);
            return LG_EXIT_USAGE;
        }
        end = NULL;
    }
    if (optind != argc || hb_timeout_ms < 0 || timeout_ms < 0 || stress_s < 0 ||
        (stress_s > 0 && wait_nic)) {
        lg_usage();
        return LG_EXIT_USAGE;
    }
    struct lg_shm_reader r = {0};
    if (wait_nic)
        return lg_wait_state(&r, path, wait_nic, wait_state, timeout_ms);
    int status = lg_shm_reader_open(&r, path);
    if (status == LG_SHM_OK && hb_timeout_ms > 0 && stress_s == 0)
        status = lg_shm_alive(&r, lg_now_ns(), (uint64_t)hb_timeout_ms * 1000000ull);
    if (status != LG_SHM_OK) {
        fprintf(stderr, "lg_shm_dump: %s\n", lg_shm_strerror(status));
        lg_shm_reader_close(&r);
        return LG_EXIT_NODAEMON;
    }
    int rc = stress_s > 0 ? lg_stress(&r, stress_s) : lg_dump(&r, json, with_events, cursor);
    lg_shm_reader_close(&r);
    return rc;
}
