/* Small helpers shared by the core: clocks, randomness, address formatting. */
#ifndef LG_UTIL_H
#define LG_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define LG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LG_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

uint64_t lg_now_ns(void); /* CLOCK_MONOTONIC */
uint64_t lg_random_u64(void);

/* "a.b.c.d:port" of a network-order IPv4 address and host-order port. */
struct lg_addr_str {
    char s[24];
};
struct lg_addr_str lg_addr_format(uint32_t ip_be, uint16_t port);

#endif
