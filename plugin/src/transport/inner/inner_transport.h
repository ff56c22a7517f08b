/* The inner transport (wrap mode): its ops table (transport.h), defined by inner_transport.c
 * over the endpoint (inner_endpoint.h) and the inner devices (inner_dev.h). */
#ifndef LG_INNER_TRANSPORT_H
#define LG_INNER_TRANSPORT_H

#include "transport/transport.h"

extern const struct lg_transport lg_inner_transport;

#endif
