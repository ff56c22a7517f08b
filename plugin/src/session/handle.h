/* The plugin's own NCCL connection handle (<= NCCL_NET_HANDLE_MAXSIZE bytes): self-describing
 * (magic, version, random listener id, the listener's IPv4 address, port and NIC name on both
 * NICs, and the address and port of the rest of its backup set when it has one) plus the
 * connector's progress state, which lives in NCCL's handle memory between calls
 * to connect (NCCL calls connect again with the same memory until it returns a comm). */
#ifndef LG_HANDLE_H
#define LG_HANDLE_H

#include <stdint.h>

#include "session/wire.h"

#define LG_HANDLE_MAGIC 0x3148474cu /* "LGH1" */
#define LG_HANDLE_VERSION 1
#define LG_HANDLE_WIRE_SIZE 112  /* the part the listener writes and the peer reads */
#define LG_HANDLE_STAGE_OFFSET 112 /* connector-local progress state: 16 bytes */
#define LG_HANDLE_SIZE 128

#define LG_HANDLE_F_BACKUP 0x1 /* ip[1]/port[1] are valid */
#define LG_HANDLE_F_SET 0x2    /* more of the backup set: nmore, more_ip[], more_port[] */
#define LG_HANDLE_NIC_LEN 16  /* IFNAMSIZ: a name and its NUL */
#define LG_HANDLE_MAX_SET 8   /* backup-set members a handle names: ip[1] and 7 more */

struct lg_handle {
    uint64_t listen_id;
    uint16_t flags;
    uint32_t ip[LG_NPATHS];   /* network order */
    uint16_t port[LG_NPATHS]; /* host order */
    /* The listener's NIC names, for log lines only; "" from a peer that sent none (they were
     * zero before) or a name that is not printable ASCII. */
    char nic[LG_NPATHS][LG_HANDLE_NIC_LEN];
    /* The listener's other backup NICs (its set after ip[1]), in its order: a connector
     * spreading its backups takes the one on the rail of its own choice (spread.h). */
    int nmore; /* 0 .. LG_HANDLE_MAX_SET - 1 */
    uint32_t more_ip[LG_HANDLE_MAX_SET - 1];   /* network order */
    uint16_t more_port[LG_HANDLE_MAX_SET - 1]; /* host order */
};

enum lg_handle_status {
    LG_HANDLE_OK = 0,
    LG_HANDLE_EMAGIC = -1,   /* not a linkguard handle (or another plugin's) */
    LG_HANDLE_EVERSION = -2, /* a linkguard handle of another version */
    LG_HANDLE_EADDR = -3,    /* missing address or port */
};

/* Writes the wire part and zeroes the stage (the full LG_HANDLE_SIZE bytes). */
void lg_handle_encode(void *buf, const struct lg_handle *h);
int lg_handle_decode(const void *buf, struct lg_handle *h);
const char *lg_handle_strerror(int status);

/* Connector progress state: a pointer guarded by a cookie so that a fresh handle (zeroes from
 * the listener) or garbage is never taken for a pointer. */
void lg_handle_stage_set(void *buf, void *ptr);
void *lg_handle_stage_get(const void *buf);

#endif
