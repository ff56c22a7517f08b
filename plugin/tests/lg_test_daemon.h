/* Shared by the in-process tests that need a daemon: a fake one (the C shm writer) speaking
 * for device 0's NICs lgt0 and lgt1 (lg_test_pair.h), beating from its own thread and from
 * the test's loops (daemon_beat), its NICs' states set by the test (daemon_set). */
#ifndef LG_TEST_DAEMON_H
#define LG_TEST_DAEMON_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lg_test.h"
#include "linkguard_shm.h"
#include "runtime/util.h"

static struct {
    pthread_mutex_t mu;
    struct lg_shm_writer *w;
    uint32_t state[2];
    uint64_t epoch;
    int stop;
    pthread_t tid;
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __attribute__((unused)) void daemon_publish_locked(void)
{
    struct lg_shm_nic nics[2];
    memset(nics, 0, sizeof(nics));
    for (int i = 0; i < 2; i++) {
        snprintf(nics[i].name, sizeof(nics[i].name), "lgt%d", i);
        nics[i].state = fake.state[i];
        nics[i].epoch = fake.epoch;
        nics[i].backup_index = 1 - i;
    }
    lg_shm_writer_update(fake.w, nics, 2);
}

static __attribute__((unused)) void *daemon_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&fake.mu);
        int stop = fake.stop;
        if (!stop)
            lg_shm_writer_heartbeat(fake.w, lg_now_ns());
        pthread_mutex_unlock(&fake.mu);
        if (stop)
            return NULL;
        usleep(20000);
    }
}

static __attribute__((unused)) void daemon_start(const char *path)
{
    int err = 0;
    fake.w = lg_shm_writer_create(path, 8, 16, (uint32_t)getpid(), &err);
    CHECK(fake.w != NULL);
    fake.state[0] = fake.state[1] = LG_NIC_UP;
    pthread_mutex_lock(&fake.mu);
    daemon_publish_locked();
    pthread_mutex_unlock(&fake.mu);
    fake.stop = 0;
    pthread_create(&fake.tid, NULL, daemon_main, NULL);
}

/* Also from the test's own loops: a starved heartbeat thread (a loaded machine) must not
 * make the fake daemon look dead. */
static __attribute__((unused)) void daemon_beat(void)
{
    if (!fake.w || fake.stop || pthread_mutex_trylock(&fake.mu) != 0)
        return;
    if (!fake.stop)
        lg_shm_writer_heartbeat(fake.w, lg_now_ns());
    pthread_mutex_unlock(&fake.mu);
}

static __attribute__((unused)) void daemon_set(int nic, uint32_t state)
{
    pthread_mutex_lock(&fake.mu);
    fake.state[nic] = state;
    fake.epoch++;
    daemon_publish_locked();
    pthread_mutex_unlock(&fake.mu);
}

static __attribute__((unused)) void daemon_stop(void)
{
    pthread_mutex_lock(&fake.mu);
    fake.stop = 1;
    pthread_mutex_unlock(&fake.mu);
    pthread_join(fake.tid, NULL);
    lg_shm_writer_close(fake.w, 1);
    fake.w = NULL;
}

#endif
