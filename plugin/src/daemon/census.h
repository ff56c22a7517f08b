/* The connection census: each process tells its host's daemon, per NIC, how many of its
 * connections run on their primary path there, how many on their backup, how many standby
 * paths stand by there, and how often data left or came back or a connection failed, so that
 * an operator sees who is on the backup after a cut and whether a NIC is empty before it is
 * pulled (issue 29). One datagram per report on the verdicts' socket (daemon_sock.h); the
 * daemon tells the two apart by the magic.
 *
 * Datagram, LG_CENSUS_SIZE bytes, little-endian (daemon/linkguardd/census/wire.py decodes it;
 * plugin/tools/lg_census_send.c sends one from the command line: tests/unit/
 * test_census_surfaces.py round-trips this encoder through that decoder):
 *    0 u32  magic "LGCS"
 *    4 u16  version
 *    6 u16  nnics: entries used, 0..LG_CENSUS_MAX_NICS; the unused ones are all zero
 *    8 u32  seq: reports this process sent so far (1, 2, ...)
 *   12 u32  flags: LG_CENSUS_F_*
 *   16 u64  instance: random, drawn once per process (pid 0 when the daemon sees the job in
 *           another pid namespace: this tells the processes apart)
 *   24 char job[64]: NUL-padded printable ASCII [!-~]: SLURM_JOB_ID, else POD_NAME, else
 *           HOSTNAME when KUBERNETES_SERVICE_HOST is set (the pod's name), else empty
 *   88 entry[LG_CENSUS_MAX_NICS], LG_CENSUS_ENTRY_SIZE bytes each:
 *        0 char nic[16]  NUL-padded netdev name (as in verdicts)
 *       16 u32 primary   connections whose data runs on this NIC on their primary path
 *       20 u32 backup    connections whose data runs on this NIC on their backup path
 *       24 u32 away      connections whose primary is this NIC and whose data runs on the backup
 *       28 u32 standing  standby paths on this NIC that are up (a backup standing by, or a
 *                        rebuilt primary not yet taken back)
 *       32 u32 failovers       data left this NIC's primary path for the backup
 *       36 u32 reintegrations  data came back to this NIC's primary path
 *       40 u16 failed[LG_FAIL_REASONS]: connections failed, by enum lg_fail_reason, counted
 *                        on the NIC of their primary path
 * The last six are cumulative (never "since the last report"), so a lost datagram loses
 * nothing; they restart at 0 after a report with LG_CENSUS_F_BYE. A connection counts once
 * per side: a send and a receive connection of one process pair are two. A failed connection
 * counts only in `failed`. The daemon learns who sent it from the kernel (SCM_CREDENTIALS). */
#ifndef LG_CENSUS_H
#define LG_CENSUS_H

#include <stdint.h>

#define LG_CENSUS_MAGIC 0x5343474cu /* "LGCS" */
#define LG_CENSUS_VERSION 1
#define LG_CENSUS_MAX_NICS 16
#define LG_CENSUS_NIC_LEN 16
#define LG_CENSUS_JOB_LEN 64
#define LG_CENSUS_HEAD_SIZE 88
#define LG_CENSUS_ENTRY_SIZE 48
#define LG_CENSUS_SIZE (LG_CENSUS_HEAD_SIZE + LG_CENSUS_MAX_NICS * LG_CENSUS_ENTRY_SIZE) /* 856 */

#define LG_CENSUS_F_CHANGE 0x1u /* sent because something changed (else: the heartbeat) */
#define LG_CENSUS_F_BYE 0x2u    /* the process's last report (no connection left, or it
                                 * unloads): all zeros, the daemon forgets the process */

/* A change goes out at once, but at most once per 100 ms: a cut moves every connection of
 * the process within a few ms, one report (not one per connection) says so, and the operator
 * still sees the move well within the second the issue asks for. Otherwise one report per
 * second while the process has connections, which keeps the daemon's view alive (it forgets
 * a process after 5 s of silence) at a few datagrams per second per host. */
#define LG_CENSUS_MIN_INTERVAL_MS 100
#define LG_CENSUS_INTERVAL_MS 1000

/* Why a connection failed (lg_conn_fail), in the order of the datagram's `failed` counters. */
enum lg_fail_reason {
    LG_FAIL_NO_PATH, /* no working path left: both paths failed past the dead timeout, or
                      * the only path of a connection without a backup broke */
    LG_FAIL_PEER,    /* the peer closed with requests in flight, or vanished (EOF or reset
                      * on both paths without a goodbye) */
    LG_FAIL_TIMEOUT, /* nothing heard from the peer for the dead timeout (no backup path) */
    LG_FAIL_OTHER,   /* the peer broke the protocol, a message no receive can take, ... */
    LG_FAIL_REASONS,
    LG_FAIL_CLOSED = LG_FAIL_REASONS /* not a failure: the peer closed with nothing in
                                      * flight (a close whose goodbye came first) */
};

struct lg_census_nic {
    char nic[LG_CENSUS_NIC_LEN];
    uint32_t primary, backup, away, standing;
    uint32_t failovers, reintegrations;
    uint16_t failed[LG_FAIL_REASONS];
};

struct lg_census {
    uint32_t seq, flags;
    uint64_t instance;
    char job[LG_CENSUS_JOB_LEN];
    int nnics;
    struct lg_census_nic nic[LG_CENSUS_MAX_NICS];
};

/* Pure: the datagram of `c` (names longer than their field are cut, always NUL-terminated;
 * nnics above LG_CENSUS_MAX_NICS is taken as the maximum). */
void lg_census_encode(uint8_t out[LG_CENSUS_SIZE], const struct lg_census *c);

/* Pure: the job id from the environment `get` (printable ASCII, other bytes as '_', cut to
 * LG_CENSUS_JOB_LEN - 1), or "" when there is none. */
void lg_census_job(char out[LG_CENSUS_JOB_LEN], const char *(*get)(const char *name));

/* 1 when reports go out: LINKGUARD_CENSUS and a socket path (LINKGUARD_VERDICT_SOCKET). */
int lg_census_enabled(void);

/* ---- the monitor thread (monitor.c, failover.c) ------------------------------------------- */

/* The cumulative counters, process-wide, kept per NIC in a table of LG_CENSUS_MAX_NICS
 * names in the order first seen. Monitor thread, or a close (never NCCL's progress thread). */
void lg_census_count_failover(const char *primary_nic);
void lg_census_count_reintegration(const char *primary_nic);
void lg_census_count_failed(const char *primary_nic, enum lg_fail_reason why);

/* Tallying: start from an all-zero census, add each live connection (its primary NIC, the
 * NIC its data runs on, whether that is its backup, and its standby path's NIC if that is up,
 * else NULL), then done: the cumulative counters are added and the NICs ordered as the table
 * has them, so that an unchanged process reports the same bytes. */
void lg_census_tally_conn(struct lg_census *t, const char *primary_nic, const char *active_nic,
                          int on_backup, const char *standing_nic);
void lg_census_tally_done(struct lg_census *t);

/* Reports the tally `t` of `nconns` live connections by the rules above (never blocks; a
 * datagram that cannot go out is dropped). With no connection left after some: the pending
 * change at once, then the F_BYE report, and the counters restart. Returns when it wants to
 * be called again (a held change, the heartbeat), UINT64_MAX: not before something changes.
 * One thread at a time (the monitor). */
uint64_t lg_census_report(struct lg_census *t, int nconns);
/* The same at a given CLOCK_MONOTONIC time (tests). */
uint64_t lg_census_report_at(struct lg_census *t, int nconns, uint64_t now_ns);

/* The monitor starts: the job id and the instance (once per process). It stops: the last
 * report (F_BYE) if one is due. */
void lg_census_start(void);
void lg_census_stop(void);

/* Tests: forget what was sent and counted (seq and instance stay). */
void lg_census_reset(void);

#endif
