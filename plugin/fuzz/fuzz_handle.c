/* Fuzzes the NCCL connection handle decoder (src/session/handle.c) with whatever the peer's rank put
 * in the NCCL_NET_HANDLE_MAXSIZE bytes NCCL hands to connect().
 * Input: up to 128 bytes, the handle (shorter inputs are zero-padded, as NCCL's buffer is).
 * Checks: a handle that decodes has a listener id, a primary address and port, a backup
 * address and port when it says so, the rest of a backup set only with a backup and each
 * member with an address and port, no unknown flag, and NIC names of printable ASCII (they go
 * into log lines); it encodes back to the same fields;
 * encoding writes nothing past LG_HANDLE_SIZE; the stage pointer reads back what was set. */
#include <string.h>

#include "session/handle.h"
#include "fuzz.h"
#include "nccl_net_abi.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t buf[NCCL_NET_HANDLE_MAXSIZE] = {0};
    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    struct lg_handle h;
    int st = lg_handle_decode(buf, &h);
    FUZZ_ASSERT(lg_handle_strerror(st) != NULL);
    (void)lg_handle_stage_get(buf); /* may return a pointer, which connect.c checks */
    if (st != LG_HANDLE_OK)
        return 0;
    FUZZ_ASSERT(h.listen_id && h.ip[0] && h.port[0]);
    FUZZ_ASSERT(!(h.flags & ~(LG_HANDLE_F_BACKUP | LG_HANDLE_F_SET)));
    FUZZ_ASSERT(!(h.flags & LG_HANDLE_F_BACKUP) || (h.ip[1] && h.port[1]));
    FUZZ_ASSERT(h.nmore >= 0 && h.nmore <= LG_HANDLE_MAX_SET - 1);
    FUZZ_ASSERT(!h.nmore || ((h.flags & LG_HANDLE_F_SET) && (h.flags & LG_HANDLE_F_BACKUP)));
    for (int k = 0; k < h.nmore; k++)
        FUZZ_ASSERT(h.more_ip[k] && h.more_port[k]);
    for (int p = 0; p < LG_NPATHS; p++) {
        FUZZ_ASSERT(memchr(h.nic[p], 0, sizeof(h.nic[p])) != NULL);
        for (const char *c = h.nic[p]; *c; c++)
            FUZZ_ASSERT(*c > ' ' && *c <= '~');
    }

    uint8_t out[NCCL_NET_HANDLE_MAXSIZE];
    memset(out, 0xa5, sizeof(out));
    lg_handle_encode(out, &h);
    for (size_t i = LG_HANDLE_SIZE; i < sizeof(out); i++)
        FUZZ_ASSERT(out[i] == 0xa5);
    struct lg_handle back;
    FUZZ_ASSERT(lg_handle_decode(out, &back) == LG_HANDLE_OK);
    FUZZ_ASSERT(back.listen_id == h.listen_id && back.flags == h.flags);
    for (int p = 0; p < LG_NPATHS; p++)
        FUZZ_ASSERT(back.ip[p] == h.ip[p] && back.port[p] == h.port[p] &&
                    !strcmp(back.nic[p], h.nic[p]));
    FUZZ_ASSERT(back.nmore == h.nmore);
    for (int k = 0; k < h.nmore; k++)
        FUZZ_ASSERT(back.more_ip[k] == h.more_ip[k] && back.more_port[k] == h.more_port[k]);
    FUZZ_ASSERT(lg_handle_stage_get(out) == NULL); /* fresh: never a pointer */
    lg_handle_stage_set(out, &back);
    FUZZ_ASSERT(lg_handle_stage_get(out) == &back);
    return 0;
}
