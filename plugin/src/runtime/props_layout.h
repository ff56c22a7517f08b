/* What the ncclNetProperties layouts share (reference §1.4-1.8), as copy macros over
 * pointers to any two of them: the export tables copy our v12 properties down into an older
 * layout (abi/net_tables.h), the inner transport copies an inner plugin's older layout up
 * into v12 (transport/inner/inner_props.c). */
#ifndef LG_PROPS_LAYOUT_H
#define LG_PROPS_LAYOUT_H

#include "nccl_net_abi.h"

/* v8's fields, in every layout since. */
#define LG_PROPS_COPY_COMMON(dst, src)                     \
    do {                                                   \
        (dst)->name = (src)->name;                         \
        (dst)->pciPath = (src)->pciPath;                   \
        (dst)->guid = (src)->guid;                         \
        (dst)->ptrSupport = (src)->ptrSupport;             \
        (dst)->regIsGlobal = (src)->regIsGlobal;           \
        (dst)->speed = (src)->speed;                       \
        (dst)->port = (src)->port;                         \
        (dst)->latency = (src)->latency;                   \
        (dst)->maxComms = (src)->maxComms;                 \
        (dst)->maxRecvs = (src)->maxRecvs;                 \
        (dst)->netDeviceType = (src)->netDeviceType;       \
        (dst)->netDeviceVersion = (src)->netDeviceVersion; \
    } while (0)

/* v9..v11 add forceFlush, a vProps of at most 4 devices and the size limits (§1.5). */
#define LG_PROPS_COPY_V9(dst, src)                                                      \
    do {                                                                                \
        LG_PROPS_COPY_COMMON(dst, src);                                                 \
        (dst)->forceFlush = (src)->forceFlush;                                          \
        int n_ = (src)->vProps.ndevs;                                                   \
        n_ = n_ < 0 ? 0 : n_ > NCCL_NET_MAX_DEVS_PER_NIC_V9 ? NCCL_NET_MAX_DEVS_PER_NIC_V9 : n_; \
        (dst)->vProps.ndevs = n_;                                                       \
        for (int i_ = 0; i_ < n_; i_++)                                                 \
            (dst)->vProps.devs[i_] = (src)->vProps.devs[i_];                            \
        (dst)->maxP2pBytes = (src)->maxP2pBytes;                                        \
        (dst)->maxCollBytes = (src)->maxCollBytes;                                      \
    } while (0)

#endif
