/* TCP socket helpers for paths: non-blocking sockets bound to one NIC. */
#ifndef LG_SOCK_H
#define LG_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "runtime/util.h"

enum lg_sock_role { LG_SOCK_CTRL, LG_SOCK_DATA };

/* Non-blocking socket bound to ip (its port chosen at connect: IP_BIND_ADDRESS_NO_PORT) and, if
 * enabled and permitted, to the device; connect started towards (peer_ip, peer_port). Returns
 * the fd or -1 (errno set). */
int lg_sock_connect_start(const char *ifname, uint32_t ip, uint32_t peer_ip, uint16_t peer_port,
                          enum lg_sock_role role);
/* The socket's peer, "a.b.c.d:port" ("0.0.0.0:0" if it has none): an accepted path's name. */
struct lg_addr_str lg_sock_peer(int fd);
/* The socket's local TCP port (host order); 0 if it has none. */
unsigned lg_sock_local_port(int fd);
/* Listening socket on (ip, ephemeral port); *port gets the port (host order). */
int lg_sock_listen(uint32_t ip, uint16_t *port);
/* 0 when a started connect finished, 1 while in progress, -1 (errno set) on failure. */
int lg_sock_connect_check(int fd);
/* Options for an accepted socket (TCP_NODELAY, non-blocking). */
int lg_sock_setup_accepted(int fd, enum lg_sock_role role);
void lg_sock_set_role(int fd, enum lg_sock_role role);

/* send/recv that never raise SIGPIPE and never block. Return bytes, 0 on EOF (recv only),
 * -1 with errno (EAGAIN: try later). */
ssize_t lg_sock_writev(int fd, const struct iovec *iov, int n);
ssize_t lg_sock_readv(int fd, const struct iovec *iov, int n);
/* Reads what is there of a `len`-byte greeting into buf, never past it (what follows belongs
 * to the stream); *got counts across calls. 0: keep going (complete when *got == len), -1:
 * EOF or an error, drop the socket. */
int lg_sock_read_exact(int fd, void *buf, size_t len, size_t *got);

#endif
