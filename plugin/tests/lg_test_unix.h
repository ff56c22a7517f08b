/* Shared by the tests of what the plugin sends to its daemon (verdicts, the census): the
 * daemon's end, a unix datagram socket bound at a path, non-blocking. */
#ifndef LG_TEST_UNIX_H
#define LG_TEST_UNIX_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lg_test.h"

static int bound(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    unlink(path);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    return fd;
}

#endif
