/* Small helpers shared by the core: clocks, randomness, address formatting. */
#ifndef LG_UTIL_H
#define LG_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define LG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LG_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LG_MS(x) ((uint64_t)(x) * 1000000ull) /* milliseconds in lg_now_ns units */

uint64_t lg_now_ns(void); /* CLOCK_MONOTONIC */
/* How long ago t was at now; 0 when t is later: another thread can stamp t after this one read
 * now, and now - t would wrap to centuries. */
static inline uint64_t lg_age_ns(uint64_t now, uint64_t t) { return now > t ? now - t : 0; }
uint64_t lg_random_u64(void);
/* Milliseconds from t0 to now, for logs (0 when t0 is unset or later). */
static inline double lg_ms_since(uint64_t t0, uint64_t now)
{
    return t0 && now > t0 ? (double)(now - t0) / 1e6 : 0;
}

/* Raises *p to v if v is larger: the newest of counts that several threads may report. */
static inline void lg_atomic_raise(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur &&
           !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
}

/* "a.b.c.d:port" of a network-order IPv4 address and host-order port. */
struct lg_addr_str {
    char s[24];
};
struct lg_addr_str lg_addr_format(uint32_t ip_be, uint16_t port);

#endif
