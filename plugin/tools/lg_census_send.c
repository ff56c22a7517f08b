/* lg_census_send: sends one census datagram to the daemon exactly as the plugin encodes and
 * sends it (census.c, daemon_sock.c), to test the daemon's decoder and store, a CLI view or
 * an alert rule without a job.
 *
 *   lg_census_send [--socket PATH] [--seq N] [--flags N] [--instance N] [--job TEXT]
 *                  [NIC=primary,backup,away,standing,failovers,reintegrations,no_path,peer,
 *                   timeout,other ...]
 *
 * Each NIC argument is one entry, its ten numbers in the datagram's order (census.h); fewer
 * numbers leave the rest 0, more than LG_CENSUS_MAX_NICS entries are cut by the encoder. The
 * socket defaults to LINKGUARD_VERDICT_SOCKET (or its default). Exit status: 0 sent, 1 not
 * sent (no daemon listening, a full queue, someone else's socket), 2 usage. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/census.h"
#include "daemon/daemon_sock.h"
#include "runtime/params.h"

static const char *env(const char *name) { return getenv(name); }

/* 0 and *out, or -1 when `s` is not a number up to max (decimal, 0x hex). */
static int number(const char *s, unsigned long long max, char **end, unsigned long long *out)
{
    if (!s[0] || s[0] == '-' || s[0] == ',')
        return -1;
    *out = strtoull(s, end, 0);
    return *end == s || *out > max ? -1 : 0;
}

/* "rail0=4,0,1" into e; 0, or -1. */
static int parse_nic(const char *arg, struct lg_census_nic *e)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(e->nic))
        return -1;
    memset(e, 0, sizeof(*e));
    memcpy(e->nic, arg, (size_t)(eq - arg));
    uint32_t *u32[6] = {&e->primary, &e->backup, &e->away, &e->standing, &e->failovers,
                        &e->reintegrations};
    char *p = (char *)eq + 1;
    for (int k = 0; k < 6 + LG_FAIL_REASONS && *p; k++) {
        unsigned long long n;
        if (number(p, k < 6 ? UINT32_MAX : UINT16_MAX, &p, &n) || (*p && *p++ != ','))
            return -1;
        if (k < 6)
            *u32[k] = (uint32_t)n;
        else
            e->failed[k - 6] = (uint16_t)n;
    }
    return *p ? -1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", 1, 0, 's'}, {"seq", 1, 0, 'q'}, {"flags", 1, 0, 'f'},
        {"instance", 1, 0, 'i'}, {"job", 1, 0, 'j'}, {0, 0, 0, 0}};
    lg_params_load(&lg_params, env);
    struct lg_census c = {0};
    unsigned long long n;
    char *end;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 's') {
            lg_params.verdict_socket = optarg;
        } else if (opt == 'j') {
            snprintf(c.job, sizeof(c.job), "%s", optarg); /* as given: the decoder's tests */
        } else if (opt == '?' || number(optarg, opt == 'i' ? UINT64_MAX : UINT32_MAX, &end, &n) ||
                   *end) {
            fprintf(stderr, "lg_census_send: bad value for an option (see the usage in "
                            "tools/lg_census_send.c)\n");
            return 2;
        } else if (opt == 'q') {
            c.seq = (uint32_t)n;
        } else if (opt == 'f') {
            c.flags = (uint32_t)n;
        } else {
            c.instance = n;
        }
    }
    for (int i = optind; i < argc; i++) {
        struct lg_census_nic e;
        if (parse_nic(argv[i], &e)) {
            fprintf(stderr, "lg_census_send: '%s' is not NIC=n,n,... (at most %d numbers, each within its field)\n",
                    argv[i], 6 + LG_FAIL_REASONS);
            return 2;
        }
        if (c.nnics < LG_CENSUS_MAX_NICS)
            c.nic[c.nnics++] = e;
    }
    uint8_t msg[LG_CENSUS_SIZE];
    lg_census_encode(msg, &c);
    char why[96];
    if (!lg_daemon_sock_send(msg, sizeof(msg), why, sizeof(why))) {
        fprintf(stderr, "lg_census_send: not sent to '%s': %s\n", lg_params.verdict_socket, why);
        return 1;
    }
    return 0;
}
