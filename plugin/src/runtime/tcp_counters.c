/* TCP_INFO counters of a set of sockets (tcp_counters.h). */
#include "runtime/tcp_counters.h"

#include <linux/tcp.h> /* the kernel's struct tcp_info: glibc's stops at tcpi_total_retrans */
#include <netinet/in.h>
#include <sys/socket.h>

int lg_tcp_counters_read(const int *fds, int n, struct lg_tcp_counters *out)
{
    struct lg_tcp_counters sum = {0};
    int got = 0;
    for (int i = 0; i < n; i++) {
        struct tcp_info ti = {0};
        socklen_t len = sizeof(ti);
        if (fds[i] < 0 || getsockopt(fds[i], IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
            continue;
        /* Older kernels return a shorter struct: the fields they lack stay 0. */
        sum.sent += ti.tcpi_bytes_sent;
        sum.retrans += ti.tcpi_bytes_retrans;
        sum.acked += ti.tcpi_bytes_acked;
        sum.segs_retrans += ti.tcpi_total_retrans;
        got++;
    }
    *out = sum;
    return got ? 0 : -1;
}
