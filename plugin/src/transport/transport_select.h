/* Which transport carries this process's paths: the inner plugin's when wrap mode is on
 * (LINKGUARD_INNER, inner_dev.h), else linkguard's TCP streams. Known once init is done. */
#ifndef LG_TRANSPORT_SELECT_H
#define LG_TRANSPORT_SELECT_H

#include "transport/transport.h"

const struct lg_transport *lg_transport_select(void);
/* Tests only: every connection made from now on uses `tr` (NULL: back to the choice above). */
void lg_transport_test_force(const struct lg_transport *tr);

#endif
