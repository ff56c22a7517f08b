/* The plugin's health view over a real control file written by the C writer: no daemon,
 * a live one, state changes seen through the one-load poll, a stale heartbeat, a restart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/health.h"
#include "lg_test.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void publish(struct lg_shm_writer *w, uint32_t state0, uint32_t state1, uint64_t epoch)
{
    struct lg_shm_nic nics[2];
    memset(nics, 0, sizeof(nics));
    snprintf(nics[0].name, sizeof(nics[0].name), "rail0");
    snprintf(nics[1].name, sizeof(nics[1].name), "rail1");
    nics[0].state = state0;
    nics[1].state = state1;
    nics[0].epoch = nics[1].epoch = epoch;
    nics[0].backup_index = 1;
    nics[1].backup_index = 0;
    lg_shm_writer_update(w, nics, 2);
}

/* A control file nobody can plant (issue #16): one writable by others, or owned by someone
 * else than root, us or LINKGUARD_SHM_OWNER, is "no daemon", whatever it says. */
static void test_untrusted(const char *path, uint64_t t)
{
    uid_t me = geteuid();
    CHECK_EQ(lg_shm_owner_check(0, 0100644), LG_SHM_OK);
    CHECK_EQ(lg_shm_owner_check(me, 0100600), LG_SHM_OK);
    CHECK_EQ(lg_shm_owner_check(0, 0100666), LG_SHM_EUNTRUSTED);
    CHECK_EQ(lg_shm_owner_check(0, 0100664), LG_SHM_EUNTRUSTED);
    CHECK_EQ(lg_shm_owner_check(me + 1000, 0100644), LG_SHM_EUNTRUSTED);
    setenv(LG_SHM_OWNER_ENV, "54321", 1);
    CHECK_EQ(lg_shm_owner_check(54321, 0100644), LG_SHM_OK);
    setenv(LG_SHM_OWNER_ENV, "root", 1); /* a name */
    CHECK_EQ(lg_shm_owner_check(54321, 0100644), LG_SHM_EUNTRUSTED);
    setenv(LG_SHM_OWNER_ENV, "no-such-user-here", 1);
    CHECK_EQ(lg_shm_owner_check(54321, 0100644), LG_SHM_EUNTRUSTED);
    unsetenv(LG_SHM_OWNER_ENV);

    int err = 0;
    struct lg_shm_writer *w = lg_shm_writer_create(path, 8, 16, 1, &err);
    CHECK(w != NULL);
    publish(w, LG_NIC_DOWN, LG_NIC_UP, 1);
    lg_shm_writer_heartbeat(w, t);
    CHECK_EQ(chmod(path, 0666), 0); /* anyone could have written what it says */
    lg_health_tick(t);
    CHECK(!lg_health_alive());
    CHECK_EQ(lg_health_state(0, NULL), LG_NIC_UNKNOWN);
    struct lg_shm_reader r;
    CHECK_EQ(lg_shm_reader_open(&r, path), LG_SHM_EUNTRUSTED);
    CHECK_EQ(chmod(path, 0644), 0);
    CHECK_EQ(lg_shm_reader_open(&r, path), LG_SHM_OK);
    lg_shm_reader_close(&r);
    if (me == 0) { /* a file of another user (as root: CI) */
        CHECK_EQ(chown(path, 54321, 54321), 0);
        CHECK_EQ(lg_shm_reader_open(&r, path), LG_SHM_EUNTRUSTED);
        setenv(LG_SHM_OWNER_ENV, "54321", 1); /* ...unless it is the configured daemon user */
        CHECK_EQ(lg_shm_reader_open(&r, path), LG_SHM_OK);
        lg_shm_reader_close(&r);
        unsetenv(LG_SHM_OWNER_ENV);
    } else {
        printf("test_health: the foreign-owner case needs root; checked by the table only\n");
    }
    lg_shm_writer_close(w, 1);
}

int main(void)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/lgtest-health-%d", (int)getpid());
    setenv(LG_SHM_PATH_ENV, path, 1);
    unlink(path);

    /* No daemon: every NIC is UNKNOWN, which the transport treats as usable. */
    lg_health_init();
    CHECK(!lg_health_alive());
    CHECK_EQ(lg_health_find("rail0"), -1);
    CHECK_EQ(lg_health_state(0, NULL), LG_NIC_UNKNOWN);
    CHECK(lg_health_usable(lg_health_state(0, NULL)));

    /* A daemon appears: picked up at the next tick. */
    int err = 0;
    struct lg_shm_writer *w = lg_shm_writer_create(path, 8, 16, 1, &err);
    CHECK(w != NULL);
    publish(w, LG_NIC_UP, LG_NIC_UP, 1);
    lg_health_tick(now_ns() + LG_HEALTH_RECHECK_NS);
    CHECK(lg_health_alive());
    int i0 = lg_health_find("rail0"), i1 = lg_health_find("rail1");
    CHECK_EQ(i0, 0);
    CHECK_EQ(i1, 1);
    CHECK_EQ(lg_health_state(i0, NULL), LG_NIC_UP);

    /* A change is seen by the hot-path poll alone, with its epoch. */
    uint64_t g1 = lg_health_poll();
    publish(w, LG_NIC_DOWN, LG_NIC_UP, 2);
    uint64_t g2 = lg_health_poll();
    CHECK(g2 != g1);
    uint64_t epoch = 0;
    CHECK_EQ(lg_health_state(i0, &epoch), LG_NIC_DOWN);
    CHECK_EQ(epoch, 2);
    CHECK(!lg_health_usable(LG_NIC_DOWN) && !lg_health_usable(LG_NIC_DEGRADED) &&
          !lg_health_usable(LG_NIC_DRAINED) && !lg_health_usable(LG_NIC_RECOVERING));
    CHECK_EQ(lg_health_poll(), g2); /* nothing changed: same generation */

    struct lg_shm_snapshot snap;
    CHECK_EQ(lg_health_snapshot(&snap), LG_SHM_OK);
    CHECK_EQ(snap.nic_count, 2);

    /* Stale heartbeat: the view forgets the daemon's opinion. */
    lg_health_tick(now_ns() + 3 * LG_HEALTH_STALE_NS);
    CHECK(!lg_health_alive());
    CHECK_EQ(lg_health_state(i0, NULL), LG_NIC_UNKNOWN);

    /* A restarted daemon (a new file at the path) is found again. */
    lg_shm_writer_close(w, 0);
    w = lg_shm_writer_create(path, 8, 16, 1, &err);
    CHECK(w != NULL);
    publish(w, LG_NIC_RECOVERING, LG_NIC_UP, 7);
    lg_health_tick(now_ns() + 4 * LG_HEALTH_STALE_NS); /* the old file is stale, and replaced */
    lg_health_tick(now_ns() + 5 * LG_HEALTH_STALE_NS); /* opens the new one... */
    uint64_t later = now_ns() + 6 * LG_HEALTH_STALE_NS; /* ticks only move forward */
    lg_shm_writer_heartbeat(w, later);
    lg_health_tick(later); /* ...whose heartbeat is fresh */
    CHECK(lg_health_alive());
    CHECK_EQ(lg_health_state(lg_health_find("rail0"), &epoch), LG_NIC_RECOVERING);
    CHECK_EQ(epoch, 7);

    /* The daemon goes away on purpose: the file is removed, the view says so. */
    lg_shm_writer_close(w, 1);
    lg_health_tick(later + 10 * LG_HEALTH_STALE_NS);
    CHECK(!lg_health_alive());
    test_untrusted(path, later + 11 * LG_HEALTH_STALE_NS);
    lg_health_fini();
    LG_TEST_DONE();
}
