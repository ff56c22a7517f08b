/* lg_verdict_send: sends one verdict to the daemon exactly as the plugin does (verdict.c), to
 * check the daemon's side, an alert rule or a read-only mount without a stalled job.
 *
 *   lg_verdict_send [--socket PATH] [--path 0|1] [--for-ms N] [--loss-ppm N] [--rate N]
 *                   [--expected N] [--conn N] [--peer TEXT] NIC healthy|stalled|lossy|slow
 *
 * The socket defaults to LINKGUARD_VERDICT_SOCKET (or its default). Exit status: 0 sent,
 * 1 not sent (no daemon listening, a full queue), 2 usage. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/verdict.h"
#include "runtime/params.h"

static const char *const kinds[LG_VERDICT_KIND_MAX] = {
    [LG_VERDICT_HEALTHY] = "healthy", [LG_VERDICT_STALLED] = "stalled",
    [LG_VERDICT_LOSSY] = "lossy", [LG_VERDICT_SLOW] = "slow"};

static const char *env(const char *name) { return getenv(name); }

static int number(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    if (!s[0] || s[0] == '-')
        return -1;
    *out = strtoull(s, &end, 0);
    return *end || *out > max ? -1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", 1, 0, 's'}, {"path", 1, 0, 'p'},     {"for-ms", 1, 0, 'f'},
        {"loss-ppm", 1, 0, 'l'}, {"rate", 1, 0, 'r'},   {"expected", 1, 0, 'e'},
        {"conn", 1, 0, 'c'},   {"peer", 1, 0, 'P'},     {0, 0, 0, 0}};
    lg_params_load(&lg_params, env);
    struct lg_verdict v = {0};
    unsigned long long n;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 's') {
            lg_params.verdict_socket = optarg;
            continue;
        }
        if (opt == 'P') {
            v.peer = optarg;
            continue;
        }
        unsigned long long max = opt == 'p' ? 1 : (opt == 'f' || opt == 'l') ? UINT32_MAX
                                                                            : UINT64_MAX;
        if (opt == '?' || number(optarg, max, &n)) {
            fprintf(stderr, "lg_verdict_send: bad value for an option (see the usage in "
                            "tools/lg_verdict_send.c)\n");
            return 2;
        }
        switch (opt) {
        case 'p': v.path = (uint8_t)n; break;
        case 'f': v.for_ms = (uint32_t)n; break;
        case 'l': v.loss_ppm = (uint32_t)n; break;
        case 'r': v.rate_Bps = n; break;
        case 'e': v.expected_Bps = n; break;
        case 'c': v.conn = n; break;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: lg_verdict_send [options] NIC healthy|stalled|lossy|slow\n");
        return 2;
    }
    v.nic = argv[optind];
    for (int k = LG_VERDICT_HEALTHY; k < LG_VERDICT_KIND_MAX; k++)
        if (!strcmp(argv[optind + 1], kinds[k]))
            v.kind = (uint8_t)k;
    if (!v.kind) {
        fprintf(stderr, "lg_verdict_send: unknown verdict '%s' (healthy, stalled, lossy, slow)\n",
                argv[optind + 1]);
        return 2;
    }
    if (!lg_verdict_report(&v)) {
        fprintf(stderr, "lg_verdict_send: not sent to '%s' (no daemon listening, or its queue "
                        "is full)\n", lg_params.verdict_socket);
        return 1;
    }
    return 0;
}
