/* The plugin's own NCCL connection handle (see handle.h). */
#include "session/handle.h"

#include <string.h>

#include "runtime/le.h"

#include "nccl_net_abi.h"

_Static_assert(LG_HANDLE_SIZE <= NCCL_NET_HANDLE_MAXSIZE, "handle fits NCCL's buffer");
_Static_assert(66 + 6 * (LG_HANDLE_MAX_SET - 1) <= LG_HANDLE_STAGE_OFFSET, "the set ends before the stage");

#define LG_STAGE_KEY 0x9e3779b97f4a7c15ull


/* Layout: 0 magic u32 | 4 version u16 | 6 flags u16 | 8 listen_id u64 |
 *         16 + 8p: ip[p] (4 bytes, network order), port[p] u16, reserved u16 |
 *         32 + 16p: nic[p], NUL-padded (zero from peers older than the names) |
 *         64 nmore u8, reserved u8 | 66 + 6k: more_ip[k] (4 bytes), more_port[k] u16 (F_SET) |
 *         112 stage cookie u64 | 120 stage pointer u64 */
void lg_handle_encode(void *buf, const struct lg_handle *h)
{
    uint8_t *p = buf;
    memset(p, 0, LG_HANDLE_SIZE);
    lg_put32(p, LG_HANDLE_MAGIC);
    lg_put16(p + 4, LG_HANDLE_VERSION);
    lg_put16(p + 6, h->flags);
    lg_put64(p + 8, h->listen_id);
    for (int i = 0; i < LG_NPATHS; i++) {
        memcpy(p + 16 + 8 * i, &h->ip[i], 4);
        lg_put16(p + 20 + 8 * i, h->port[i]);
        size_t n = strnlen(h->nic[i], LG_HANDLE_NIC_LEN - 1);
        memcpy(p + 32 + LG_HANDLE_NIC_LEN * i, h->nic[i], n);
    }
    if (h->flags & LG_HANDLE_F_SET) {
        int n = h->nmore < 0 ? 0 : h->nmore > LG_HANDLE_MAX_SET - 1 ? LG_HANDLE_MAX_SET - 1 : h->nmore;
        p[64] = (uint8_t)n;
        for (int k = 0; k < n; k++) {
            memcpy(p + 66 + 6 * k, &h->more_ip[k], 4);
            lg_put16(p + 70 + 6 * k, h->more_port[k]);
        }
    }
}

/* A peer's NIC name goes into our log: printable ASCII and NUL-terminated, else "". */
static void nic_decode(const uint8_t *p, char out[LG_HANDLE_NIC_LEN])
{
    size_t n = strnlen((const char *)p, LG_HANDLE_NIC_LEN);
    memset(out, 0, LG_HANDLE_NIC_LEN);
    if (n == LG_HANDLE_NIC_LEN)
        return; /* no NUL */
    for (size_t k = 0; k < n; k++)
        if (p[k] <= ' ' || p[k] > '~')
            return;
    memcpy(out, p, n);
}

int lg_handle_decode(const void *buf, struct lg_handle *h)
{
    const uint8_t *p = buf;
    if (lg_get32(p) != LG_HANDLE_MAGIC)
        return LG_HANDLE_EMAGIC;
    if (lg_get16(p + 4) != LG_HANDLE_VERSION)
        return LG_HANDLE_EVERSION;
    memset(h, 0, sizeof(*h));
    h->flags = lg_get16(p + 6);
    h->listen_id = lg_get64(p + 8);
    for (int i = 0; i < LG_NPATHS; i++) {
        memcpy(&h->ip[i], p + 16 + 8 * i, 4);
        h->port[i] = lg_get16(p + 20 + 8 * i);
        nic_decode(p + 32 + LG_HANDLE_NIC_LEN * i, h->nic[i]);
    }
    if (!h->ip[0] || !h->port[0] || !h->listen_id)
        return LG_HANDLE_EADDR;
    if ((h->flags & LG_HANDLE_F_BACKUP) && (!h->ip[1] || !h->port[1]))
        return LG_HANDLE_EADDR;
    if (h->flags & ~(LG_HANDLE_F_BACKUP | LG_HANDLE_F_SET))
        return LG_HANDLE_EVERSION; /* unknown flags: a newer peer */
    if (h->flags & LG_HANDLE_F_SET) {
        if (!(h->flags & LG_HANDLE_F_BACKUP) || p[64] > LG_HANDLE_MAX_SET - 1)
            return LG_HANDLE_EADDR;
        h->nmore = p[64];
        for (int k = 0; k < h->nmore; k++) {
            memcpy(&h->more_ip[k], p + 66 + 6 * k, 4);
            h->more_port[k] = lg_get16(p + 70 + 6 * k);
            if (!h->more_ip[k] || !h->more_port[k])
                return LG_HANDLE_EADDR;
        }
    }
    return LG_HANDLE_OK;
}

const char *lg_handle_strerror(int status)
{
    switch (status) {
    case LG_HANDLE_OK: return "ok";
    case LG_HANDLE_EMAGIC: return "not a linkguard handle (bad magic)";
    case LG_HANDLE_EVERSION: return "linkguard handle of an unsupported version";
    case LG_HANDLE_EADDR: return "linkguard handle without a valid address";
    default: return "unknown handle error";
    }
}

void lg_handle_stage_set(void *buf, void *ptr)
{
    uint8_t *p = buf;
    uint64_t v = (uint64_t)(uintptr_t)ptr;
    lg_put64(p + LG_HANDLE_STAGE_OFFSET, ptr ? v ^ LG_STAGE_KEY : 0);
    lg_put64(p + LG_HANDLE_STAGE_OFFSET + 8, v);
}

void *lg_handle_stage_get(const void *buf)
{
    const uint8_t *p = buf;
    uint64_t cookie = lg_get64(p + LG_HANDLE_STAGE_OFFSET);
    uint64_t v = lg_get64(p + LG_HANDLE_STAGE_OFFSET + 8);
    if (!v || cookie != (v ^ LG_STAGE_KEY))
        return NULL;
    return (void *)(uintptr_t)v;
}
