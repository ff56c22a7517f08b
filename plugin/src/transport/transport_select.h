/* Which transport carries this process's paths: the inner plugin's when wrap mode is on
 * (LINKGUARD_INNER, inner_dev.h), else linkguard's TCP streams. Known once init is done. */
#ifndef LG_TRANSPORT_SELECT_H
#define LG_TRANSPORT_SELECT_H

#include "transport/transport.h"

const struct lg_transport *lg_transport_select(void);
/* The transport's word in a connector's hellos, and whether a listener takes `blob`. */
static inline uint32_t lg_transport_blob(const struct lg_transport *tr)
{
    return tr->hello_blob ? tr->hello_blob() : 0;
}
static inline int lg_transport_blob_ok(const struct lg_transport *tr, uint32_t blob)
{
    return tr->blob_ok ? tr->blob_ok(blob) : blob == 0;
}
/* Tests only: every connection made from now on uses `tr` (NULL: back to the choice above). */
void lg_transport_test_force(const struct lg_transport *tr);

#endif
