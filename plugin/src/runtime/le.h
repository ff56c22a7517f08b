/* Field access for wire formats: little-endian numbers (byte by byte: any host, any alignment)
 * and NUL-padded text. */
#ifndef LG_LE_H
#define LG_LE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void lg_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void lg_put32(uint8_t *p, uint32_t v) { lg_put16(p, (uint16_t)v); lg_put16(p + 2, (uint16_t)(v >> 16)); }
static inline void lg_put64(uint8_t *p, uint64_t v) { lg_put32(p, (uint32_t)v); lg_put32(p + 4, (uint32_t)(v >> 32)); }
static inline uint16_t lg_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t lg_get32(const uint8_t *p) { return lg_get16(p) | ((uint32_t)lg_get16(p + 2) << 16); }
static inline uint64_t lg_get64(const uint8_t *p) { return lg_get32(p) | ((uint64_t)lg_get32(p + 4) << 32); }

/* `s` into a field of `len` bytes: cut to len - 1, NUL-padded (NULL: empty). */
static inline void lg_put_text(uint8_t *out, size_t len, const char *s)
{
    size_t n = s ? strnlen(s, len - 1) : 0;
    memcpy(out, s ? s : "", n);
    memset(out + n, 0, len - n);
}

#endif
