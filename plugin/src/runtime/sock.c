/* TCP socket helpers for paths. */
#include "runtime/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/params.h"

void lg_sock_set_role(int fd, enum lg_sock_role role)
{
    int one = 1;
    /* Frames are written whole by one writev, so Nagle only adds latency. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* Bytes unacknowledged for the dead timeout fail the socket (ETIMEDOUT) instead of TCP's
     * ~15 min of retransmissions (tcp(7)): a stream that stalls alone ends in a failover or a
     * clear error, however well its path's other sockets still talk. */
    unsigned int ms = (unsigned int)lg_params.dead_timeout_ms;
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
    if (role == LG_SOCK_DATA) {
        int v;
        if (lg_params.sndbuf > 0 && (v = (int)lg_params.sndbuf) > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
        if (lg_params.rcvbuf > 0 && (v = (int)lg_params.rcvbuf) > 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

int lg_sock_connect_start(const char *ifname, uint32_t ip, uint32_t peer_ip, uint16_t peer_port,
                          enum lg_sock_role role)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    lg_sock_set_role(fd, role);
    if (lg_params.bind_device && ifname && ifname[0]) {
        static int warned;
        if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname, (socklen_t)strlen(ifname)) != 0 &&
            !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            LG_INFO(NCCL_INIT | NCCL_NET,
                    "SO_BINDTODEVICE(%s) failed (%s): paths are pinned by source address only",
                    ifname, strerror(errno));
    }
    /* The source address picks the NIC, but the port is left to connect() (ip(7)): a bind
     * would reserve an ephemeral port per socket for the 4-tuple it will never share, and
     * hundreds of connections times (streams + 1) sockets per path run a NIC address out. */
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_addr.s_addr = ip};
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_addr.s_addr = peer_ip,
                               .sin_port = htons(peer_port)};
    if (bind(fd, (struct sockaddr *)&local, sizeof(local)) != 0 ||
        (connect(fd, (struct sockaddr *)&peer, sizeof(peer)) != 0 && errno != EINPROGRESS)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

struct lg_addr_str lg_sock_peer(int fd)
{
    struct sockaddr_in peer = {0};
    socklen_t len = sizeof(peer);
    getpeername(fd, (struct sockaddr *)&peer, &len);
    return lg_addr_format(peer.sin_addr.s_addr, ntohs(peer.sin_port));
}

unsigned lg_sock_local_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0 || a.sin_family != AF_INET)
        return 0;
    return ntohs(a.sin_port);
}

int lg_sock_listen(uint32_t ip, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* Buffer sizes must be set before listen() to be inherited with window scaling. One
     * listener serves every connection of the process on this NIC (acceptor.h): the backlog
     * is the kernel's largest (somaxconn caps it), for hundreds connecting at once. */
    lg_sock_set_role(fd, LG_SOCK_DATA);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = ip};
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int lg_sock_connect_check(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return -1;
    if (err) {
        errno = err;
        return -1;
    }
    /* Connected once the peer address is known. */
    struct sockaddr_in peer;
    len = sizeof(peer);
    if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0)
        return 0;
    if (errno == ENOTCONN)
        return 1;
    return -1;
}

int lg_sock_setup_accepted(int fd, enum lg_sock_role role)
{
    lg_sock_set_role(fd, role);
    return 0;
}

ssize_t lg_sock_writev(int fd, const struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    ssize_t r;
    do
        r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    return r;
}

int lg_sock_read_exact(int fd, void *buf, size_t len, size_t *got)
{
    while (*got < len) {
        struct iovec iov = {(char *)buf + *got, len - *got};
        ssize_t n = lg_sock_readv(fd, &iov, 1);
        if (n > 0) {
            *got += (size_t)n;
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) ? -1 : 0;
    }
    return 0;
}

ssize_t lg_sock_readv(int fd, const struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    ssize_t r;
    do
        r = recvmsg(fd, &m, MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    return r;
}
