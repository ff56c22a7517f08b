/* Verdicts to the daemon over its unix datagram socket (see verdict.h). */
#include "verdict.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "le.h"
#include "linkguard_shm.h"
#include "log.h"
#include "params.h"
#include "util.h"

/* (NIC, kind) pairs remembered for the rate limit: more than any host has NICs x kinds; when
 * full, the oldest entry is reused (at worst one extra report). */
#define LG_VERDICT_SLOTS 64

struct slot {
    char nic[LG_VERDICT_NIC_LEN];
    uint8_t kind;
    uint64_t sent_ns;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[LG_VERDICT_SLOTS];
static int fd = -1;
static int dropped_logged;

static void put_text(uint8_t *out, size_t len, const char *s)
{
    size_t n = s ? strnlen(s, len - 1) : 0;
    memcpy(out, s ? s : "", n);
    memset(out + n, 0, len - n);
}

void lg_verdict_encode(uint8_t out[LG_VERDICT_SIZE], const struct lg_verdict *v)
{
    memset(out, 0, LG_VERDICT_SIZE);
    lg_put32(out + 0, LG_VERDICT_MAGIC);
    lg_put16(out + 4, LG_VERDICT_VERSION);
    out[6] = v->kind;
    out[7] = v->path;
    put_text(out + 8, LG_VERDICT_NIC_LEN, v->nic);
    lg_put32(out + 24, v->for_ms);
    lg_put32(out + 28, v->loss_ppm);
    lg_put64(out + 32, v->rate_Bps);
    lg_put64(out + 40, v->expected_Bps);
    lg_put64(out + 48, v->conn);
    put_text(out + 56, LG_VERDICT_PEER_LEN, v->peer);
}

/* Under mu: 1 if (nic, kind) may be reported now (and the slot is taken), 0 if too soon. */
static int take_slot(const char *nic, uint8_t kind, uint64_t now)
{
    struct slot *oldest = &slots[0];
    for (int i = 0; i < LG_VERDICT_SLOTS; i++) {
        struct slot *s = &slots[i];
        if (s->sent_ns && s->kind == kind && !strncmp(s->nic, nic, sizeof(s->nic) - 1)) {
            if (now - s->sent_ns < (uint64_t)LG_VERDICT_INTERVAL_MS * 1000000ull)
                return 0;
            s->sent_ns = now;
            return 1;
        }
        if (s->sent_ns < oldest->sent_ns)
            oldest = s;
    }
    put_text((uint8_t *)oldest->nic, sizeof(oldest->nic), nic);
    oldest->kind = kind;
    oldest->sent_ns = now;
    return 1;
}

/* 1 if `path` is a socket the daemon bound, else 0 with why in `why`: the control file's owner
 * rule (root, our own user, or LINKGUARD_SHM_OWNER), without its mode rule (the socket is 0666
 * so that every job can send). Someone else's socket there (a directory others can write, no
 * daemon running) would otherwise receive every job's verdicts. */
static int trusted_socket(const char *path, char *why, size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, len, "%s", strerror(errno));
        return 0;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, len, "not a socket");
        return 0;
    }
    if (lg_shm_owner_check(st.st_uid, st.st_mode & ~(mode_t)(S_IWGRP | S_IWOTH)) != LG_SHM_OK) {
        snprintf(why, len, "the socket is owned by uid %u, not root, us or %s",
                 (unsigned)st.st_uid, LG_SHM_OWNER_ENV);
        return 0;
    }
    return 1;
}

int lg_verdict_report(const struct lg_verdict *v) { return lg_verdict_report_at(v, lg_now_ns()); }

int lg_verdict_report_at(const struct lg_verdict *v, uint64_t now_ns)
{
    const char *path = lg_params.verdict_socket;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!v || !v->nic || !v->nic[0] || v->kind < LG_VERDICT_HEALTHY ||
        v->kind >= LG_VERDICT_KIND_MAX || !path || !path[0] ||
        strlen(path) >= sizeof(sa.sun_path))
        return 0;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    uint8_t msg[LG_VERDICT_SIZE];
    lg_verdict_encode(msg, v);
    int sent = 0;
    pthread_mutex_lock(&mu);
    if (take_slot(v->nic, v->kind, now_ns)) {
        char why[96] = "";
        int trusted = trusted_socket(path, why, sizeof(why));
        if (trusted && fd < 0)
            fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        /* Unconnected: each send resolves the path again, so a restarted daemon is found. */
        sent = trusted && fd >= 0 &&
               sendto(fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL,
                      (const struct sockaddr *)&sa, sizeof(sa)) == (ssize_t)sizeof(msg);
        if (!sent && !dropped_logged) { /* once: no daemon is a normal way to run */
            dropped_logged = 1;
            if (trusted)
                snprintf(why, sizeof(why), "%s", fd < 0 ? "no socket" : strerror(errno));
            LG_INFO(NCCL_NET, "verdict for NIC %s not reported to the daemon at %s: %s (later "
                    "failures to report are not logged)", v->nic, path, why);
        }
    }
    pthread_mutex_unlock(&mu);
    return sent;
}

void lg_verdict_reset(void)
{
    pthread_mutex_lock(&mu);
    memset(slots, 0, sizeof(slots));
    if (fd >= 0)
        close(fd);
    fd = -1;
    dropped_logged = 0;
    pthread_mutex_unlock(&mu);
}
