/* Socket options every path socket gets: TCP_NODELAY, and TCP_USER_TIMEOUT at the dead timeout
 * (issue #12: a stalled stream must not wait out TCP's retransmissions). */
#include "lg_test.h"
#include "lg_test_peer.h"
#include "runtime/params.h"
#include "runtime/sock.h"

int main(void)
{
    lg_params_load(&lg_params, NULL);
    lg_params.dead_timeout_ms = 4321;
    for (int role = LG_SOCK_CTRL; role <= LG_SOCK_DATA; role++) {
        int sv[2];
        CHECK_EQ(peer_tcp_pair(sv), 0);
        lg_sock_set_role(sv[0], (enum lg_sock_role)role);
        unsigned int ms = 0;
        int on = 0;
        socklen_t len = sizeof(ms);
        CHECK_EQ(getsockopt(sv[0], IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, &len), 0);
        CHECK_EQ(ms, 4321);
        len = sizeof(on);
        CHECK_EQ(getsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
        CHECK(on != 0);
        close(sv[0]);
        close(sv[1]);
    }
    LG_TEST_DONE();
}
