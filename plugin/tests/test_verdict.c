/* Verdicts to the daemon: the datagram's bytes, delivery to a real unix datagram socket, the
 * rate limit per (NIC, kind), and that nothing blocks or fails without a daemon or with a full
 * queue. tests/unit/test_plugin_verdicts.py decodes this encoder's output with the daemon's code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/verdict.h"
#include "lg_test.h"
#include "lg_test_unix.h"
#include "runtime/le.h"
#include "runtime/params.h"

#define S(x) ((uint64_t)(x) * 1000000000ull)

static void test_encode(void)
{
    uint8_t b[LG_VERDICT_SIZE];
    struct lg_verdict v = {.nic = "rail0", .kind = LG_VERDICT_STALLED, .path = 1,
                           .for_ms = 1234, .loss_ppm = 20000, .rate_Bps = 0x0102030405060708ull,
                           .expected_Bps = 5, .conn = 0xfeedull, .peer = "198.18.1.2:40001"};
    lg_verdict_encode(b, &v);
    CHECK_EQ(b[0], 'L');
    CHECK(!memcmp(b, "LGVD", 4));
    CHECK_EQ(lg_get16(b + 4), LG_VERDICT_VERSION);
    CHECK_EQ(b[6], LG_VERDICT_STALLED);
    CHECK_EQ(b[7], 1);
    CHECK(!strcmp((const char *)b + 8, "rail0") && b[8 + 15] == 0);
    CHECK_EQ(lg_get32(b + 24), 1234);
    CHECK_EQ(lg_get32(b + 28), 20000);
    CHECK_EQ(b[32], 0x08); /* little-endian */
    CHECK(lg_get64(b + 32) == 0x0102030405060708ull);
    CHECK_EQ(lg_get64(b + 40), 5);
    CHECK_EQ(lg_get64(b + 48), 0xfeed);
    CHECK(!strcmp((const char *)b + 56, "198.18.1.2:40001"));
    /* Too-long names are cut, NUL-terminated; NULL peer is empty. */
    v.nic = "a-name-much-longer-than-ifnamsiz";
    v.peer = NULL;
    lg_verdict_encode(b, &v);
    CHECK_EQ(strlen((const char *)b + 8), LG_VERDICT_NIC_LEN - 1);
    CHECK_EQ(b[56], 0);
}

static int received(int fd, uint8_t *out)
{
    return (int)recv(fd, out, LG_VERDICT_SIZE + 1, MSG_DONTWAIT);
}

static void test_report(const char *path)
{
    lg_params.verdict_socket = path;
    lg_verdict_reset();
    struct lg_verdict v = {.nic = "rail0", .kind = LG_VERDICT_STALLED, .for_ms = 700,
                           .peer = "198.18.1.2:1"};
    /* No daemon: dropped, never an error or a block. */
    unlink(path);
    CHECK_EQ(lg_verdict_report_at(&v, S(100)), 0);
    int fd = bound(path);
    uint8_t got[LG_VERDICT_SIZE + 1], want[LG_VERDICT_SIZE];
    CHECK_EQ(lg_verdict_report_at(&v, S(200)), 1);
    CHECK_EQ(received(fd, got), LG_VERDICT_SIZE);
    lg_verdict_encode(want, &v);
    CHECK(!memcmp(got, want, LG_VERDICT_SIZE));
    /* Rate limit: per (NIC, kind), one per LG_VERDICT_INTERVAL_MS. */
    uint64_t soon = S(200) + (uint64_t)LG_VERDICT_INTERVAL_MS * 1000000ull - 1;
    CHECK_EQ(lg_verdict_report_at(&v, soon), 0);
    CHECK_EQ(received(fd, got), -1);
    struct lg_verdict other_kind = v, other_nic = v;
    other_kind.kind = LG_VERDICT_HEALTHY;
    other_nic.nic = "rail1";
    CHECK_EQ(lg_verdict_report_at(&other_kind, soon), 1);
    CHECK_EQ(lg_verdict_report_at(&other_nic, soon), 1);
    CHECK_EQ(lg_verdict_report_at(&v, soon + 1), 1);
    int n = 0;
    while (received(fd, got) == LG_VERDICT_SIZE)
        n++;
    CHECK_EQ(n, 3);
    /* Nonsense is not sent at all. */
    struct lg_verdict bad = v;
    bad.kind = LG_VERDICT_KIND_MAX;
    CHECK_EQ(lg_verdict_report_at(&bad, S(1000)), 0);
    bad = v;
    bad.nic = "";
    CHECK_EQ(lg_verdict_report_at(&bad, S(1000)), 0);
    CHECK_EQ(lg_verdict_report(NULL), 0);
    /* A daemon that does not read: the queue fills, reports are dropped, nothing blocks. */
    int dropped = 0;
    for (int i = 0; i < 100000 && !dropped; i++)
        dropped = !lg_verdict_report_at(&v, S(2000 + i));
    CHECK(dropped);
    /* Disabled. */
    lg_params.verdict_socket = "";
    CHECK_EQ(lg_verdict_report_at(&v, S(200000)), 0);
    close(fd);
    unlink(path);
}

/* Someone else's socket at the path gets nothing: the control file's owner rule. */
static void test_untrusted_socket(const char *path)
{
    lg_params.verdict_socket = path;
    lg_verdict_reset();
    struct lg_verdict v = {.nic = "rail0", .kind = LG_VERDICT_STALLED};
    int fd = bound(path);
    uint8_t got[LG_VERDICT_SIZE + 1];
    if (geteuid() != 0) { /* only root can hand a socket to another user */
        close(fd);
        unlink(path);
        return;
    }
    CHECK(chown(path, 65534, 65534) == 0);
    unsetenv("LINKGUARD_SHM_OWNER");
    CHECK_EQ(lg_verdict_report_at(&v, S(100)), 0);
    CHECK_EQ(received(fd, got), -1);
    setenv("LINKGUARD_SHM_OWNER", "65534", 1); /* the operator says that user runs the daemon */
    CHECK_EQ(lg_verdict_report_at(&v, S(200)), 1);
    CHECK_EQ(received(fd, got), LG_VERDICT_SIZE);
    unsetenv("LINKGUARD_SHM_OWNER");
    close(fd);
    unlink(path);
    /* Not a socket at all: nothing is sent (and nothing is opened). */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK_EQ(lg_verdict_report_at(&v, S(300)), 0);
    unlink(path);
}

static const char *no_env(const char *name)
{
    (void)name;
    return NULL;
}

int main(void)
{
    lg_params_load(&lg_params, no_env);
    test_encode();
    char path[64];
    snprintf(path, sizeof(path), "/tmp/lg-test-verdict-%d.sock", (int)getpid());
    test_report(path);
    test_untrusted_socket(path);
    lg_verdict_reset();
    LG_TEST_DONE();
}
