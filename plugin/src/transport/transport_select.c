/* The process's transport (see transport_select.h). */
#include "transport/transport_select.h"

#include "transport/inner/inner_dev.h"
#include "transport/inner/inner_transport.h"
#include "transport/tcp/tcp.h"

static const struct lg_transport *lg_transport_forced; /* tests only */

void lg_transport_test_force(const struct lg_transport *tr)
{
    __atomic_store_n(&lg_transport_forced, tr, __ATOMIC_RELEASE);
}

const struct lg_transport *lg_transport_select(void)
{
    const struct lg_transport *forced = __atomic_load_n(&lg_transport_forced, __ATOMIC_ACQUIRE);
    return forced ? forced : lg_inner_devs ? &lg_inner_transport : &lg_tcp_transport;
}
