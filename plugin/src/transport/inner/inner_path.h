/* What a path of the inner transport (wrap.h) keeps of its inner comm: a member of struct
 * lg_path (conn.h). Types only. */
#ifndef LG_INNER_PATH_H
#define LG_INNER_PATH_H

#include <stdint.h>

#include "nccl_net_abi.h"

struct lg_inner_connecting;

/* Per path (struct lg_path member `w`). */
struct lg_wpath {
    void *comm;   /* the inner send/recv comm; set with `ready` under c->mr_mu */
    int ready;    /* atomic */
    int dead;     /* atomic, set under c->wmu: no inner call on `comm` from then on */
    void *lcomm;  /* receiver: the inner listen comm of the handshake */
    struct lg_inner_connecting *cg; /* sender: connect in progress */
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE]; /* sender: from the INNER frames */
    uint32_t parts; /* sender: frames received, bit i = part i (atomic) */
    uint32_t parts_igen; /* sender: the inner generation those frames are of (atomic) */
    uint32_t igen;  /* inner generation: +1 each time the path gets a new inner comm */
    uint64_t t0;    /* handshake start */
    int ready_owed; /* receiver, rebuilt path: READY goes out once the comm is accepted */
};

/* A path carries data: its comm is there and not fenced. */
static inline int lg_wrap_carries(const struct lg_wpath *w)
{
    return __atomic_load_n(&w->ready, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&w->dead, __ATOMIC_ACQUIRE);
}

#endif
