/* The process's transport (see transport_select.h). */
#include "transport_select.h"

#include "inner_dev.h"
#include "tcp.h"
#include "wrap.h"

const struct lg_transport *lg_transport_select(void)
{
    return lg_wrap ? &lg_inner_transport : &lg_tcp_transport;
}
