/* Which transport carries this process's paths: the inner plugin's when wrap mode is on
 * (LINKGUARD_INNER, inner_dev.h), else linkguard's TCP streams. Known once init is done. */
#ifndef LG_TRANSPORT_SELECT_H
#define LG_TRANSPORT_SELECT_H

#include "transport.h"

const struct lg_transport *lg_transport_select(void);

#endif
