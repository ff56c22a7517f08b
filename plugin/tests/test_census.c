/* The connection census (census.h): the datagram's bytes, the job id, the tally, the sending
 * rules on an injected clock against a real unix datagram socket, and end to end: connection
 * pairs over loopback (lg_test_pair.h) with a fake daemon (lg_test_daemon.h) whose NIC goes
 * DOWN and UP again, and a connection whose peer closes with a send in flight, each seen in
 * the datagrams the monitor thread sends, through to the goodbye when the last one closes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi/core.h"
#include "daemon/census.h"
#include "daemon/health.h"
#include "lg_test.h"
#include "lg_test_daemon.h"
#include "lg_test_flow.h"
#include "lg_test_pair.h"
#include "lg_test_unix.h"
#include "lg_test_warn.h"
#include "proto/conn.h"
#include "runtime/le.h"
#include "runtime/params.h"
#include "runtime/util.h"

#define MS(x) ((uint64_t)(x) * 1000000ull)

/* ---- reading a datagram ------------------------------------------------------------------- */

/* Offsets of an entry's fields (census.h). */
enum { E_PRIMARY = 16, E_BACKUP = 20, E_AWAY = 24, E_STANDING = 28, E_FAILOVERS = 32,
       E_REINTEGRATIONS = 36, E_FAILED = 40 };

static const uint8_t *entry_of(const uint8_t *b, const char *nic)
{
    for (int i = 0; i < lg_get16(b + 6) && i < LG_CENSUS_MAX_NICS; i++) {
        const uint8_t *e = b + LG_CENSUS_HEAD_SIZE + i * LG_CENSUS_ENTRY_SIZE;
        if (!strncmp((const char *)e, nic, LG_CENSUS_NIC_LEN))
            return e;
    }
    return NULL;
}

/* A NIC's field (0 for a NIC the census does not name). */
static uint32_t field(const uint8_t *b, const char *nic, int off)
{
    const uint8_t *e = entry_of(b, nic);
    return !e ? 0 : off >= E_FAILED ? lg_get16(e + off) : lg_get32(e + off);
}

/* The next census datagram waiting (verdicts on the same socket are skipped): 1, or 0. */
static int received(int fd, uint8_t out[LG_CENSUS_SIZE])
{
    uint8_t b[LG_CENSUS_SIZE + 1];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n < 0)
            return 0;
        if (n == LG_CENSUS_SIZE && lg_get32(b) == LG_CENSUS_MAGIC) {
            memcpy(out, b, LG_CENSUS_SIZE);
            return 1;
        }
    }
}

static int count_received(int fd)
{
    uint8_t b[LG_CENSUS_SIZE];
    int n = 0;
    while (received(fd, b))
        n++;
    return n;
}

/* ---- the datagram -------------------------------------------------------------------------- */

static void test_encode(void)
{
    struct lg_census c = {.seq = 0x01020304, .flags = LG_CENSUS_F_CHANGE | LG_CENSUS_F_BYE,
                          .instance = 0x1122334455667788ull, .job = "job-1", .nnics = 2};
    c.nic[0] = (struct lg_census_nic){"rail0", 1, 2, 3, 4, 5, 6, {7, 8, 9, 10}};
    c.nic[1] = (struct lg_census_nic){.primary = 0xa0b0c0d0u, .failed = {0, 0, 0, 0xfffe}};
    memcpy(c.nic[1].nic, "abcdefghijklmnop", LG_CENSUS_NIC_LEN); /* no NUL of its own */
    uint8_t b[LG_CENSUS_SIZE];
    memset(b, 0xee, sizeof(b));
    lg_census_encode(b, &c);
    CHECK_EQ(LG_CENSUS_SIZE, 856);
    CHECK(!memcmp(b, "LGCS", 4));
    CHECK_EQ(lg_get32(b), LG_CENSUS_MAGIC);
    CHECK_EQ(lg_get16(b + 4), LG_CENSUS_VERSION);
    CHECK_EQ(lg_get16(b + 6), 2);
    CHECK_EQ(lg_get32(b + 8), 0x01020304);
    CHECK_EQ(b[8], 0x04); /* little-endian */
    CHECK_EQ(lg_get32(b + 12), 3);
    CHECK(lg_get64(b + 16) == 0x1122334455667788ull);
    CHECK_EQ(b[16], 0x88);
    CHECK(!strcmp((const char *)b + 24, "job-1"));
    for (int i = 24 + 5; i < 88; i++)
        CHECK_EQ(b[i], 0);
    const uint8_t *e = b + 88;
    CHECK(!strcmp((const char *)e, "rail0"));
    for (int i = 5; i < 16; i++)
        CHECK_EQ(e[i], 0);
    static const int offs[6] = {E_PRIMARY, E_BACKUP, E_AWAY, E_STANDING, E_FAILOVERS,
                                E_REINTEGRATIONS};
    for (int k = 0; k < 6; k++)
        CHECK_EQ(lg_get32(e + offs[k]), k + 1);
    for (int k = 0; k < LG_FAIL_REASONS; k++)
        CHECK_EQ(lg_get16(e + E_FAILED + 2 * k), 7 + k);
    e = b + 88 + 48;
    CHECK_EQ(strnlen((const char *)e, 16), LG_CENSUS_NIC_LEN - 1); /* cut, NUL-terminated */
    CHECK(!memcmp(e, "abcdefghijklmno", 15) && e[15] == 0);
    CHECK_EQ(lg_get32(e + E_PRIMARY), 0xa0b0c0d0u);
    CHECK_EQ(lg_get16(e + 46), 0xfffe);
    int zero = 1;
    for (int i = 88 + 2 * 48; i < LG_CENSUS_SIZE; i++)
        zero &= b[i] == 0; /* unused entries, even with garbage in the struct */
    CHECK(zero);
    /* A job as long as its field is cut and terminated; too many NICs are the maximum. */
    memset(c.job, 'j', sizeof(c.job));
    c.nnics = 40;
    for (int i = 0; i < LG_CENSUS_MAX_NICS; i++)
        snprintf(c.nic[i].nic, sizeof(c.nic[i].nic), "n%d", i);
    lg_census_encode(b, &c);
    CHECK_EQ(strnlen((const char *)b + 24, 64), LG_CENSUS_JOB_LEN - 1);
    CHECK_EQ(b[24 + 63], 0);
    CHECK_EQ(lg_get16(b + 6), LG_CENSUS_MAX_NICS);
    CHECK(!strcmp((const char *)b + 88 + 15 * 48, "n15"));
    c.nnics = -3;
    lg_census_encode(b, &c);
    CHECK_EQ(lg_get16(b + 6), 0);
    CHECK_EQ(b[88], 0);
}

/* ---- the job id ---------------------------------------------------------------------------- */

static const char *const *fake_env;

static const char *from_fake(const char *name)
{
    for (int i = 0; fake_env[i]; i += 2)
        if (!strcmp(fake_env[i], name))
            return fake_env[i + 1];
    return NULL;
}

static const char *job_of(const char *const *env)
{
    static char out[LG_CENSUS_JOB_LEN];
    fake_env = env;
    memset(out, 0x55, sizeof(out));
    lg_census_job(out, from_fake);
    return out;
}

static void test_job(void)
{
    CHECK(!strcmp(job_of((const char *[]){"SLURM_JOB_ID", "1234", "POD_NAME", "p", NULL}), "1234"));
    CHECK(!strcmp(job_of((const char *[]){"SLURM_JOB_ID", "", "POD_NAME", "trainer-0", NULL}),
                  "trainer-0"));
    /* HOSTNAME is the pod's name only inside Kubernetes. */
    CHECK(!strcmp(job_of((const char *[]){"HOSTNAME", "node7", NULL}), ""));
    CHECK(!strcmp(job_of((const char *[]){"HOSTNAME", "pod-x", "KUBERNETES_SERVICE_HOST",
                                          "10.0.0.1", NULL}), "pod-x"));
    /* Printable ASCII only, cut to the field; the rest of the field is NUL. */
    const char *j = job_of((const char *[]){"SLURM_JOB_ID", "a b\tc\x7f\xc3\xa9", NULL});
    CHECK(!strcmp(j, "a_b_c___"));
    CHECK_EQ(j[LG_CENSUS_JOB_LEN - 1], 0);
    char longer[200];
    memset(longer, '7', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = 0;
    CHECK_EQ(strlen(job_of((const char *[]){"SLURM_JOB_ID", longer, NULL})), LG_CENSUS_JOB_LEN - 1);
    CHECK(!strcmp(job_of((const char *[]){NULL}), ""));
}

/* ---- the tally ----------------------------------------------------------------------------- */

static void test_tally(void)
{
    lg_census_reset();
    lg_census_count_failover("r0");
    lg_census_count_failed("r3", LG_FAIL_PEER);
    lg_census_count_failed("r0", LG_FAIL_CLOSED); /* an orderly end: not counted */
    struct lg_census t = {0};
    lg_census_tally_conn(&t, "r0", "r0", 0, "r1");  /* on its primary, backup standing */
    lg_census_tally_conn(&t, "r0", "r1", 1, NULL);  /* away on its backup */
    lg_census_tally_conn(&t, "r2", "r2", 0, NULL);  /* no backup */
    lg_census_tally_done(&t);
    /* The table's order: the counters' NICs first, then the live ones as first seen. */
    CHECK_EQ(t.nnics, 4);
    CHECK(!strcmp(t.nic[0].nic, "r0") && !strcmp(t.nic[1].nic, "r3") &&
          !strcmp(t.nic[2].nic, "r1") && !strcmp(t.nic[3].nic, "r2"));
    struct lg_census_nic *r0 = &t.nic[0], *r3 = &t.nic[1], *r1 = &t.nic[2], *r2 = &t.nic[3];
    CHECK(r0->primary == 1 && r0->backup == 0 && r0->away == 1 && r0->standing == 0 &&
          r0->failovers == 1 && r0->reintegrations == 0);
    CHECK(r0->failed[LG_FAIL_PEER] == 0 && r3->failed[LG_FAIL_PEER] == 1 &&
          r3->failed[LG_FAIL_NO_PATH] == 0 && r3->primary == 0);
    CHECK(r1->primary == 0 && r1->backup == 1 && r1->standing == 1 && r1->away == 0);
    CHECK(r2->primary == 1 && r2->standing == 0);
    /* The same connections in another order: the same bytes (no change to report). */
    struct lg_census u = {0};
    lg_census_tally_conn(&u, "r2", "r2", 0, NULL);
    lg_census_tally_conn(&u, "r0", "r1", 1, NULL);
    lg_census_tally_conn(&u, "r0", "r0", 0, "r1");
    lg_census_tally_done(&u);
    uint8_t bt[LG_CENSUS_SIZE], bu[LG_CENSUS_SIZE];
    lg_census_encode(bt, &t);
    lg_census_encode(bu, &u);
    CHECK(!memcmp(bt, bu, sizeof(bt)));
    /* A NIC that leaves keeps its place and counters; its live counts go to 0. */
    struct lg_census v = {0};
    lg_census_tally_conn(&v, "r1", "r1", 0, NULL);
    lg_census_tally_done(&v);
    CHECK(v.nnics == 4 && v.nic[0].failovers == 1 && v.nic[0].primary == 0 &&
          v.nic[2].primary == 1 && v.nic[3].primary == 0);
    /* The reintegration and every reason land in their own counter. */
    lg_census_count_reintegration("r0");
    for (int k = 0; k < LG_FAIL_REASONS; k++)
        for (int n = 0; n <= k; n++)
            lg_census_count_failed("r2", (enum lg_fail_reason)k);
    lg_census_tally_done(&v);
    CHECK_EQ(v.nic[0].reintegrations, 1);
    for (int k = 0; k < LG_FAIL_REASONS; k++)
        CHECK_EQ(v.nic[3].failed[k], k + 1);
    /* Past the table's 16 NICs, a NIC is dropped (live and counted), never folded. */
    lg_census_reset();
    struct lg_census w = {0};
    char name[LG_CENSUS_MAX_NICS + 1][8];
    for (int i = 0; i <= LG_CENSUS_MAX_NICS; i++) {
        snprintf(name[i], sizeof(name[i]), "x%d", i);
        lg_census_tally_conn(&w, name[i], name[i], 0, NULL);
    }
    lg_census_tally_done(&w);
    lg_census_count_failover(name[LG_CENSUS_MAX_NICS]);
    lg_census_tally_done(&w);
    CHECK_EQ(w.nnics, LG_CENSUS_MAX_NICS);
    int folded = 0;
    for (int i = 0; i < w.nnics; i++)
        folded |= w.nic[i].primary != 1 || w.nic[i].failovers != 0 ||
                  !strcmp(w.nic[i].nic, name[LG_CENSUS_MAX_NICS]);
    CHECK(!folded);
    lg_census_reset();
}

/* ---- the sending rules, on an injected clock --------------------------------------------- */

/* One connection on `nic` (on its primary, its backup on `standby`), tallied. */
static struct lg_census one_conn(const char *nic, const char *standby)
{
    struct lg_census t = {0};
    lg_census_tally_conn(&t, nic, nic, 0, standby);
    lg_census_tally_done(&t);
    return t;
}

static void test_rules(const char *path)
{
    lg_params.verdict_socket = path;
    lg_params.census = 1;
    lg_census_reset();
    int fd = bound(path);
    uint8_t b[LG_CENSUS_SIZE];
    const uint64_t t0 = MS(5000);
    /* Nothing before the first connection. */
    struct lg_census none = {0};
    lg_census_tally_done(&none);
    CHECK(lg_census_report_at(&none, 0, t0) == UINT64_MAX);
    CHECK_EQ(count_received(fd), 0);
    /* The first: sent at once, a change. */
    struct lg_census a = one_conn("rail0", "rail1");
    CHECK(lg_census_report_at(&a, 1, t0) == t0 + MS(LG_CENSUS_INTERVAL_MS));
    CHECK(received(fd, b));
    uint32_t seq = lg_get32(b + 8);
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_CHANGE);
    CHECK_EQ(field(b, "rail0", E_PRIMARY), 1);
    CHECK_EQ(field(b, "rail1", E_STANDING), 1);
    uint64_t instance = lg_get64(b + 16);
    CHECK(instance != 0);
    /* Unchanged: nothing until the heartbeat. */
    CHECK(lg_census_report_at(&a, 1, t0 + MS(50)) == t0 + MS(LG_CENSUS_INTERVAL_MS));
    CHECK_EQ(count_received(fd), 0);
    /* A change 150 ms later: sent at once. */
    struct lg_census c2 = one_conn("rail0", NULL); /* the standby went */
    CHECK(lg_census_report_at(&c2, 1, t0 + MS(150)) == t0 + MS(150 + LG_CENSUS_INTERVAL_MS));
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 8), seq + 1);
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_CHANGE);
    CHECK_EQ(field(b, "rail1", E_STANDING), 0);
    /* A second change within 100 ms: held, and the caller is told when it is due ... */
    uint64_t due = lg_census_report_at(&a, 1, t0 + MS(200));
    CHECK(due == t0 + MS(150 + LG_CENSUS_MIN_INTERVAL_MS));
    CHECK_EQ(count_received(fd), 0);
    CHECK(lg_census_report_at(&a, 1, due - 1) == due);
    CHECK_EQ(count_received(fd), 0);
    /* ... then sent when due. */
    CHECK(lg_census_report_at(&a, 1, due) == due + MS(LG_CENSUS_INTERVAL_MS));
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 8), seq + 2);
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_CHANGE);
    CHECK_EQ(field(b, "rail1", E_STANDING), 1);
    /* Changes that undo themselves before the interval ends: coalesced into nothing. */
    CHECK(lg_census_report_at(&c2, 1, due + MS(10)) == due + MS(LG_CENSUS_MIN_INTERVAL_MS));
    CHECK(lg_census_report_at(&a, 1, due + MS(LG_CENSUS_MIN_INTERVAL_MS)) ==
          due + MS(LG_CENSUS_INTERVAL_MS));
    CHECK_EQ(count_received(fd), 0);
    /* The heartbeat: a second after the last report, not a change. */
    uint64_t hb = due + MS(LG_CENSUS_INTERVAL_MS);
    CHECK(lg_census_report_at(&a, 1, hb - 1) == hb);
    CHECK_EQ(count_received(fd), 0);
    CHECK(lg_census_report_at(&a, 1, hb) == hb + MS(LG_CENSUS_INTERVAL_MS));
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 8), seq + 3);
    CHECK_EQ(lg_get32(b + 12), 0);
    CHECK(lg_get64(b + 16) == instance);
    /* The last connection closes with a failure counted 10 ms after the heartbeat: that change
     * goes out at once (not held), then the goodbye, all zeros. */
    lg_census_count_failed("rail0", LG_FAIL_TIMEOUT);
    lg_census_tally_done(&none);
    CHECK(lg_census_report_at(&none, 0, hb + MS(10)) == UINT64_MAX);
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 8), seq + 4);
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_CHANGE);
    CHECK_EQ(field(b, "rail0", E_PRIMARY), 0);
    CHECK_EQ(field(b, "rail0", E_FAILED + 2 * LG_FAIL_TIMEOUT), 1);
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 8), seq + 5);
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_BYE);
    CHECK(lg_get64(b + 16) == instance);
    CHECK_EQ(lg_get16(b + 6), 0);
    int zero = 1;
    for (int i = LG_CENSUS_HEAD_SIZE; i < LG_CENSUS_SIZE; i++)
        zero &= b[i] == 0;
    CHECK(zero);
    CHECK_EQ(count_received(fd), 0);
    /* Then nothing more, and the counters restarted: a new connection is a new start. */
    struct lg_census z = {0};
    lg_census_tally_done(&z);
    CHECK_EQ(z.nnics, 0);
    CHECK(lg_census_report_at(&z, 0, hb + MS(5000)) == UINT64_MAX);
    CHECK_EQ(count_received(fd), 0);
    a = one_conn("rail0", "rail1");
    lg_census_report_at(&a, 1, hb + MS(5010));
    CHECK(received(fd, b));
    CHECK_EQ(lg_get32(b + 12), LG_CENSUS_F_CHANGE);
    CHECK_EQ(field(b, "rail0", E_FAILED + 2 * LG_FAIL_TIMEOUT), 0);
    /* No daemon: dropped, never a block or an error; the rules go on. */
    unlink(path);
    CHECK(lg_census_report_at(&c2, 1, hb + MS(6000)) == hb + MS(7000));
    /* Disabled: LINKGUARD_CENSUS=0, or no socket path. */
    close(fd);
    fd = bound(path);
    lg_params.census = 0;
    CHECK(!lg_census_enabled());
    CHECK(lg_census_report_at(&a, 1, hb + MS(9000)) == UINT64_MAX);
    lg_params.census = 1;
    lg_params.verdict_socket = "";
    CHECK(!lg_census_enabled());
    CHECK(lg_census_report_at(&a, 1, hb + MS(9000)) == UINT64_MAX);
    CHECK_EQ(count_received(fd), 0);
    close(fd);
    unlink(path);
    lg_census_reset();
}

/* ---- end to end: the monitor's census of real connections -------------------------------- */

static int census_fd;
static uint8_t latest[LG_CENSUS_SIZE];  /* the newest census received */
static uint8_t before_bye[LG_CENSUS_SIZE]; /* the newest one without F_BYE */
static int got_bye;

static void drain(void)
{
    uint8_t b[LG_CENSUS_SIZE];
    while (received(census_fd, b)) {
        CHECK(lg_get32(b + 8) > lg_get32(latest + 8)); /* seq goes up */
        memcpy(latest, b, sizeof(latest));
        if (lg_get32(b + 12) & LG_CENSUS_F_BYE)
            got_bye = 1;
        else
            memcpy(before_bye, b, sizeof(before_bye));
    }
}

/* What a NIC's entry should say: {primary, backup, away, standing, failovers,
 * reintegrations, failed by peer}. */
struct want {
    uint32_t lgt0[7], lgt1[7];
};

static int matches_nic(const uint8_t *b, const char *nic, const uint32_t w[7])
{
    static const int offs[7] = {E_PRIMARY, E_BACKUP, E_AWAY, E_STANDING, E_FAILOVERS,
                                E_REINTEGRATIONS, E_FAILED + 2 * LG_FAIL_PEER};
    for (int k = 0; k < 7; k++)
        if (field(b, nic, offs[k]) != w[k])
            return 0;
    return 1;
}

static int census_is(void *arg)
{
    const struct want *w = arg;
    drain();
    return matches_nic(latest, "lgt0", w->lgt0) && matches_nic(latest, "lgt1", w->lgt1);
}

static void show(const char *what, const struct want *w)
{
    fprintf(stderr, "not ok: %s: census seq %u flags %u nnics %u:\n", what,
            lg_get32(latest + 8), lg_get32(latest + 12), lg_get16(latest + 6));
    static const char *const names[7] = {"primary", "backup", "away", "standing", "failovers",
                                         "reintegrations", "failed_peer"};
    static const int offs[7] = {E_PRIMARY, E_BACKUP, E_AWAY, E_STANDING, E_FAILOVERS,
                                E_REINTEGRATIONS, E_FAILED + 2 * LG_FAIL_PEER};
    for (int k = 0; k < 7; k++)
        fprintf(stderr, "  %-14s lgt0 %u (want %u)  lgt1 %u (want %u)\n", names[k],
                field(latest, "lgt0", offs[k]), w->lgt0[k], field(latest, "lgt1", offs[k]),
                w->lgt1[k]);
}

static void expect(struct flow *a, struct flow *b, const struct want *w, const char *what)
{
    int ok = run_while(a, b, census_is, (void *)w, 20);
    if (!ok)
        show(what, w);
    CHECK(ok);
}

static void test_end_to_end(const char *path)
{
    census_fd = bound(path);
    memset(latest, 0, sizeof(latest));
    struct flow a, b;
    flow_init(&a);
    flow_init(&b);
    a.count = b.count = 24;
    /* Four connections (a send and a receive side per flow), each on its primary on lgt0
     * with its backup standing on lgt1. */
    expect(&a, &b, &(struct want){{4, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 4, 0, 0, 0}}, "connected");
    CHECK_EQ(lg_get16(latest + 6), 2);
    CHECK(!strcmp((const char *)latest + 24, "job_42"));
    CHECK(lg_get64(latest + 16) != 0);
    /* lgt0 DOWN: every connection fails over and stays on the backup (no rebuild while
     * DOWN), its primary away; each side counts its own failover. */
    daemon_set(0, LG_NIC_DOWN);
    expect(&a, &b, &(struct want){{0, 0, 4, 0, 4, 0, 0}, {0, 4, 0, 0, 0, 0, 0}}, "failed over");
    /* UP again: rebuilt and taken back, the backup standing by again. */
    daemon_set(0, LG_NIC_UP);
    expect(&a, &b, &(struct want){{4, 0, 0, 0, 4, 4, 0}, {0, 0, 0, 4, 0, 0, 0}}, "back");
    /* A third pair whose receiver closes while a send is in flight (no receive posted for
     * it): the sender fails (the peer closed mid-transfer), counted once, on lgt0. */
    void *s, *r, *req = NULL;
    CHECK_EQ(pair_connect(&s, &r), 0);
    static char msg[64 << 10]; /* above LINKGUARD_SEND_COPY: it waits for its ack */
    CHECK(sizeof(msg) > (size_t)lg_params.send_copy);
    CHECK_EQ(lg_core_isend(s, msg, sizeof(msg), 0, NULL, &req), ncclSuccess);
    CHECK(req != NULL);
    lg_core_close_recv(r);
    expect(&a, &b, &(struct want){{4, 0, 0, 0, 4, 4, 1}, {0, 0, 0, 4, 0, 0, 0}}, "peer closed");
    int done = 0, size = 0;
    CHECK(lg_core_test(req, &done, &size) != ncclSuccess); /* NCCL sees it fail too */
    lg_core_close_send(s);
    /* The last close: what is left (counters only), then the goodbye. */
    finish(&a, &b, "census flows");
    flow_close(&a);
    flow_close(&b);
    uint64_t t0 = lg_now_ns();
    while (!got_bye && lg_now_ns() - t0 < 20000000000ull) {
        usleep(1000);
        drain();
    }
    CHECK(got_bye);
    CHECK_EQ(lg_get32(latest + 12), LG_CENSUS_F_BYE);
    CHECK_EQ(lg_get16(latest + 6), 0);
    const uint32_t left0[7] = {0, 0, 0, 0, 4, 4, 1}, left1[7] = {0};
    CHECK(matches_nic(before_bye, "lgt0", left0) && matches_nic(before_bye, "lgt1", left1));
    close(census_fd);
    unlink(path);
}

static const char *env(const char *name) { return getenv(name); }

int main(void)
{
    char dir[] = "/tmp/lgcensus-XXXXXX", path[64], shm[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/daemon.sock", dir);
    snprintf(shm, sizeof(shm), "/dev/shm/lgtest-census-%d", (int)getpid());
    unlink(shm);
    setenv("SLURM_JOB_ID", "job 42", 1); /* read once per process: before the first report */
    setenv("LINKGUARD_VERDICT_SOCKET", path, 1);
    setenv(LG_SHM_PATH_ENV, shm, 1);
    lg_params_load(&lg_params, env);
    test_encode();
    test_job();
    test_tally();
    test_rules(path);

    fast_failover_env("3000");
    loopback_devices("lgt0", "lgt1");
    flow_beat = daemon_beat;
    daemon_start(shm);
    CHECK_EQ(lg_core_init(LG_FLAVOR_LINKGUARD, test_print_logger), ncclSuccess);
    uint64_t t0 = lg_now_ns();
    while (!lg_health_alive() && lg_now_ns() - t0 < 10000000000ull) /* its next health tick */
        usleep(1000);
    CHECK(lg_health_alive());
    test_end_to_end(path);
    CHECK_EQ(lg_core_finalize(), ncclSuccess);
    daemon_stop();
    unlink(shm);
    rmdir(dir);
    LG_TEST_DONE();
}
