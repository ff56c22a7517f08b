/* The daemon's unix datagram socket (see daemon_sock.h). */
#include "daemon/daemon_sock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "linkguard_shm.h"
#include "runtime/params.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* fd */
static int fd = -1;

int lg_daemon_sock_enabled(void)
{
    const char *path = lg_params.verdict_socket;
    return path && path[0] && strlen(path) < sizeof(((struct sockaddr_un *)0)->sun_path);
}

/* 1 if `path` is a socket the daemon bound, else 0 with why in `why`: the control file's owner
 * rule (root, our own user, or LINKGUARD_SHM_OWNER), without its mode rule (the socket is 0666
 * so that every job can send). Someone else's socket there (a directory others can write, no
 * daemon running) would otherwise receive every job's reports. */
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

int lg_daemon_sock_send(const void *msg, size_t len, char *why, size_t why_len)
{
    char scratch[96];
    if (!why || !why_len) {
        why = scratch;
        why_len = sizeof(scratch);
    }
    why[0] = 0;
    if (!lg_daemon_sock_enabled()) {
        snprintf(why, why_len, "no socket path");
        return 0;
    }
    const char *path = lg_params.verdict_socket;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (!trusted_socket(path, why, why_len))
        return 0;
    pthread_mutex_lock(&mu);
    if (fd < 0)
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    /* Unconnected: each send resolves the path again, so a restarted daemon is found. */
    int sent = fd >= 0 && sendto(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL,
                                 (const struct sockaddr *)&sa, sizeof(sa)) == (ssize_t)len;
    if (!sent)
        snprintf(why, why_len, "%s", fd < 0 ? "no socket" : strerror(errno));
    pthread_mutex_unlock(&mu);
    return sent;
}

void lg_daemon_sock_reset(void)
{
    pthread_mutex_lock(&mu);
    if (fd >= 0)
        close(fd);
    fd = -1;
    pthread_mutex_unlock(&mu);
}
