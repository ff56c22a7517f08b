/* Small helpers shared by the core: clocks, randomness, address formatting. */
#include "runtime/util.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

uint64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t lg_random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
        return v;
    /* No entropy yet (early boot): a splitmix of the clock is unique enough for ids. */
    static uint64_t state;
    uint64_t z = __atomic_add_fetch(&state, lg_now_ns() | 1, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 1;
}

struct lg_addr_str lg_addr_format(uint32_t ip_be, uint16_t port)
{
    struct lg_addr_str a;
    char ip[INET_ADDRSTRLEN];
    struct in_addr in = {.s_addr = ip_be};
    inet_ntop(AF_INET, &in, ip, sizeof(ip));
    snprintf(a.s, sizeof(a.s), "%s:%u", ip, (unsigned)port);
    return a;
}
