/* The connection census (see census.h): the encoder, the process's cumulative counters, the
 * tally and the sending rules. */
#include "daemon/census.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon_sock.h"
#include "runtime/le.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"

void lg_census_encode(uint8_t out[LG_CENSUS_SIZE], const struct lg_census *c)
{
    int n = c->nnics < 0 ? 0 : c->nnics > LG_CENSUS_MAX_NICS ? LG_CENSUS_MAX_NICS : c->nnics;
    memset(out, 0, LG_CENSUS_SIZE);
    lg_put32(out + 0, LG_CENSUS_MAGIC);
    lg_put16(out + 4, LG_CENSUS_VERSION);
    lg_put16(out + 6, (uint16_t)n);
    lg_put32(out + 8, c->seq);
    lg_put32(out + 12, c->flags);
    lg_put64(out + 16, c->instance);
    lg_put_text(out + 24, LG_CENSUS_JOB_LEN, c->job);
    for (int i = 0; i < n; i++) {
        const struct lg_census_nic *e = &c->nic[i];
        uint8_t *o = out + LG_CENSUS_HEAD_SIZE + i * LG_CENSUS_ENTRY_SIZE;
        lg_put_text(o, LG_CENSUS_NIC_LEN, e->nic);
        lg_put32(o + 16, e->primary);
        lg_put32(o + 20, e->backup);
        lg_put32(o + 24, e->away);
        lg_put32(o + 28, e->standing);
        lg_put32(o + 32, e->failovers);
        lg_put32(o + 36, e->reintegrations);
        for (int k = 0; k < LG_FAIL_REASONS; k++)
            lg_put16(o + 40 + 2 * k, e->failed[k]);
    }
}

void lg_census_job(char out[LG_CENSUS_JOB_LEN], const char *(*get)(const char *name))
{
    const char *v = get("SLURM_JOB_ID");
    if (!v || !v[0])
        v = get("POD_NAME");
    if ((!v || !v[0]) && get("KUBERNETES_SERVICE_HOST"))
        v = get("HOSTNAME"); /* a pod's hostname is its name */
    size_t n = 0;
    for (; v && v[n] && n < LG_CENSUS_JOB_LEN - 1; n++)
        out[n] = v[n] >= '!' && v[n] <= '~' ? v[n] : '_';
    memset(out + n, 0, LG_CENSUS_JOB_LEN - n);
}

int lg_census_enabled(void) { return lg_params.census && lg_daemon_sock_enabled(); }

/* ---- the cumulative counters ------------------------------------------------------------- */

/* Past LG_CENSUS_MAX_NICS names, a NIC's counters are dropped (logged once): folding them
 * into another NIC's entry would tell the operator that NIC carries what it does not. */
static struct {
    pthread_mutex_t mu; /* the table: the monitor, and a close counting a failure */
    int n, full_logged;
    struct lg_census_nic nic[LG_CENSUS_MAX_NICS];
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The entry for `nic` among the n of `nics` (added when new), or NULL when all
 * LG_CENSUS_MAX_NICS are taken: the table's and a tally's alike. */
static struct lg_census_nic *entry_of(struct lg_census_nic *nics, int *n, const char *nic)
{
    for (int i = 0; i < *n; i++)
        if (!strncmp(nics[i].nic, nic, LG_CENSUS_NIC_LEN - 1))
            return &nics[i];
    if (*n == LG_CENSUS_MAX_NICS)
        return NULL;
    struct lg_census_nic *e = &nics[(*n)++];
    lg_put_text((uint8_t *)e->nic, sizeof(e->nic), nic);
    return e;
}

/* Under T.mu: the table's entry for `nic`, or NULL when the table is full (logged once). */
static struct lg_census_nic *table_entry(const char *nic)
{
    struct lg_census_nic *e = entry_of(T.nic, &T.n, nic);
    if (!e && !T.full_logged++)
        LG_INFO(NCCL_NET, "census: more than %d NICs; NIC %s and any later one are not "
                "reported", LG_CENSUS_MAX_NICS, nic);
    return e;
}

#define COUNT_FAILOVER LG_FAIL_REASONS
#define COUNT_REINTEGRATION (LG_FAIL_REASONS + 1)

/* One more of `what` (a failure reason, or COUNT_*) on NIC `nic`. */
static void count(const char *nic, int what)
{
    pthread_mutex_lock(&T.mu);
    struct lg_census_nic *e = table_entry(nic);
    if (e && what == COUNT_FAILOVER)
        e->failovers++;
    else if (e && what == COUNT_REINTEGRATION)
        e->reintegrations++;
    else if (e && e->failed[what] < UINT16_MAX) /* saturates: wrapping would read as a restart */
        e->failed[what]++;
    pthread_mutex_unlock(&T.mu);
}

static void table_clear(void)
{
    pthread_mutex_lock(&T.mu);
    T.n = T.full_logged = 0;
    memset(T.nic, 0, sizeof(T.nic));
    pthread_mutex_unlock(&T.mu);
}

void lg_census_count_failover(const char *primary_nic) { count(primary_nic, COUNT_FAILOVER); }

void lg_census_count_reintegration(const char *primary_nic)
{
    count(primary_nic, COUNT_REINTEGRATION);
}

void lg_census_count_failed(const char *primary_nic, enum lg_fail_reason why)
{
    if (why < LG_FAIL_REASONS) /* LG_FAIL_CLOSED: an orderly end */
        count(primary_nic, (int)why);
}

/* ---- the tally ----------------------------------------------------------------------------- */

/* NULL past LG_CENSUS_MAX_NICS: lg_census_tally_done drops that NIC too. */
static struct lg_census_nic *tally_entry(struct lg_census *t, const char *nic)
{
    return entry_of(t->nic, &t->nnics, nic);
}

void lg_census_tally_conn(struct lg_census *t, const char *primary_nic, const char *active_nic,
                          int on_backup, const char *standing_nic)
{
    struct lg_census_nic *e = tally_entry(t, active_nic);
    if (e && on_backup)
        e->backup++;
    else if (e)
        e->primary++;
    if (on_backup && (e = tally_entry(t, primary_nic)))
        e->away++;
    if (standing_nic && (e = tally_entry(t, standing_nic)))
        e->standing++;
}

void lg_census_tally_done(struct lg_census *t)
{
    struct lg_census live = *t;
    pthread_mutex_lock(&T.mu);
    for (int i = 0; i < live.nnics; i++)
        table_entry(live.nic[i].nic); /* every NIC seen gets its place, for good */
    t->nnics = T.n;
    memcpy(t->nic, T.nic, sizeof(t->nic));
    pthread_mutex_unlock(&T.mu);
    for (int i = 0; i < live.nnics; i++) {
        const struct lg_census_nic *l = &live.nic[i];
        for (int k = 0; k < t->nnics; k++) {
            struct lg_census_nic *e = &t->nic[k];
            if (strncmp(e->nic, l->nic, LG_CENSUS_NIC_LEN - 1))
                continue;
            e->primary = l->primary;
            e->backup = l->backup;
            e->away = l->away;
            e->standing = l->standing;
            break;
        }
    }
}

/* ---- sending ------------------------------------------------------------------------------- */

/* The monitor thread's (or, once it stopped, lg_monitor_stop's caller's). */
static struct {
    int started, had, sent_any, dropped_logged;
    uint32_t seq;
    uint64_t instance, sent_ns;
    char job[LG_CENSUS_JOB_LEN];
    uint8_t last[LG_CENSUS_SIZE]; /* the last report sent, seq and flags zero */
} S;

static const char *env(const char *name) { return getenv(name); }

void lg_census_start(void)
{
    if (S.started)
        return;
    S.started = 1;
    S.instance = lg_random_u64(); /* getrandom */
    lg_census_job(S.job, env);
}

/* `body`: an encoded census with seq and flags zero. */
static void send_report(const uint8_t body[LG_CENSUS_SIZE], uint32_t flags, uint64_t now)
{
    uint8_t msg[LG_CENSUS_SIZE];
    memcpy(msg, body, sizeof(msg));
    lg_put32(msg + 8, ++S.seq);
    lg_put32(msg + 12, flags);
    char why[96];
    if (!lg_daemon_sock_send(msg, sizeof(msg), why, sizeof(why)) && !S.dropped_logged) {
        S.dropped_logged = 1; /* once: no daemon is a normal way to run */
        LG_INFO(NCCL_NET, "census not reported to the daemon at %s: %s (later failures to "
                "report are not logged)", lg_params.verdict_socket, why);
    }
    memcpy(S.last, body, sizeof(S.last));
    S.sent_ns = now;
    S.sent_any = 1;
}

/* The last report: all zeros; the counters restart, so that a process that connects again
 * is a new one to the daemon (which forgot it) and nothing is counted twice. */
static void say_bye(uint64_t now)
{
    struct lg_census none = {.instance = S.instance};
    memcpy(none.job, S.job, sizeof(none.job));
    uint8_t body[LG_CENSUS_SIZE];
    lg_census_encode(body, &none);
    send_report(body, LG_CENSUS_F_BYE, now);
    S.had = S.sent_any = 0;
    memset(S.last, 0, sizeof(S.last));
    table_clear();
}

uint64_t lg_census_report(struct lg_census *t, int nconns)
{
    return lg_census_report_at(t, nconns, lg_now_ns());
}

uint64_t lg_census_report_at(struct lg_census *t, int nconns, uint64_t now)
{
    if (!lg_census_enabled() || (!nconns && !S.had))
        return UINT64_MAX;
    lg_census_start();
    t->seq = t->flags = 0;
    t->instance = S.instance;
    memcpy(t->job, S.job, sizeof(t->job));
    uint8_t body[LG_CENSUS_SIZE];
    lg_census_encode(body, t);
    int changed = memcmp(body, S.last, sizeof(body)) != 0;
    if (!nconns) { /* the last connection closed: what it left, at once, then goodbye */
        if (changed)
            send_report(body, LG_CENSUS_F_CHANGE, now);
        say_bye(now);
        return UINT64_MAX;
    }
    S.had = 1;
    uint64_t since = now - S.sent_ns;
    if (changed && (!S.sent_any || since >= LG_MS(LG_CENSUS_MIN_INTERVAL_MS)))
        send_report(body, LG_CENSUS_F_CHANGE, now);
    else if (changed)
        return S.sent_ns + LG_MS(LG_CENSUS_MIN_INTERVAL_MS); /* held: sent when due */
    else if (since >= LG_MS(LG_CENSUS_INTERVAL_MS))
        send_report(body, 0, now);
    return S.sent_ns + LG_MS(LG_CENSUS_INTERVAL_MS);
}

void lg_census_stop(void)
{
    struct lg_census t = {0};
    lg_census_tally_done(&t);
    lg_census_report(&t, 0);
}

void lg_census_reset(void)
{
    S.had = S.sent_any = S.dropped_logged = 0;
    S.sent_ns = 0;
    memset(S.last, 0, sizeof(S.last));
    table_clear();
}
