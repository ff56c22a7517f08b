/* Dialing a path's sockets and sending their hellos (dial.h). */
#include "session/dial.h"

#include <errno.h>

#include "runtime/sock.h"
#include "session/session.h"

int lg_hello_send(int fd, const struct lg_hello *h, size_t *sent)
{
    uint8_t buf[LG_HELLO_SIZE];
    lg_hello_encode(buf, h);
    while (*sent < LG_HELLO_SIZE) {
        struct iovec iov = {buf + *sent, LG_HELLO_SIZE - *sent};
        ssize_t n = lg_sock_writev(fd, &iov, 1);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        *sent += (size_t)n;
    }
    return 1;
}

int lg_dial_start(struct lg_dial *d, const char *nic, uint32_t local_ip, uint32_t peer_ip,
                  uint16_t peer_port)
{
    for (int k = 0; k <= LG_MAX_STREAMS; k++)
        d->connected[k] = 0, d->hello_sent[k] = 0;
    d->hello.session = d->ch->sess->id;
    d->hello.chan = d->ch->id;
    for (int k = 1; k <= d->nstreams; k++) {
        int fd = lg_sock_connect_start(nic, local_ip, peer_ip, peer_port, LG_SOCK_DATA);
        if (fd < 0) {
            d->part = LG_DIAL_CONNECT;
            return -1;
        }
        *d->fd[k] = fd;
    }
    return 0;
}

int lg_dial_hello(struct lg_dial *d, int k)
{
    struct lg_hello h = d->hello;
    h.stream = (uint8_t)k;
    return lg_hello_send(*d->fd[k], &h, &d->hello_sent[k]);
}

int lg_dial_step(struct lg_dial *d, int expired)
{
    int all = 1;
    for (int k = 0; k <= d->nstreams; k++) {
        int rc = 0;
        if (!d->connected[k]) {
            rc = k ? lg_sock_connect_check(*d->fd[k]) : lg_session_connect_check(d->ch->sess);
            if (rc == 0)
                d->connected[k] = 1;
            else if (rc > 0 && expired)
                rc = -1, errno = ETIMEDOUT;
            if (rc < 0) {
                d->part = k ? LG_DIAL_CONNECT : LG_DIAL_SESSION;
                return -1;
            }
        }
        int hello = k && k != d->held;
        if (rc == 0 && hello && d->connected[0] && lg_dial_hello(d, k) < 0) {
            d->part = LG_DIAL_HELLO;
            return -1;
        }
        if (rc > 0 || (hello && d->hello_sent[k] < LG_HELLO_SIZE))
            all = 0;
    }
    return all;
}

int lg_dial_connected(const struct lg_dial *d)
{
    int up = 1;
    for (int k = 0; k <= d->nstreams; k++)
        up &= d->connected[k];
    return up;
}
