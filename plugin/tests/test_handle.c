/* The NCCL handle: round trip (NIC names too), size, garbage (wrong magic/version, missing address, random
 * bytes) rejected, and the connector's stage pointer never taken from garbage. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "nccl_net_abi.h"
#include "session/handle.h"

int main(void)
{
    char buf[NCCL_NET_HANDLE_MAXSIZE + 1]; /* one byte past NCCL's, to see none is written */
    struct lg_handle h = {.listen_id = 0xdeadbeefcafef00dull, .flags = LG_HANDLE_F_BACKUP,
                          .ip = {inet_addr("198.18.0.1"), inet_addr("198.18.1.1")},
                          .port = {40000, 50001}, .nic = {"rail0", "rail1"}}, d;
    CHECK(LG_HANDLE_SIZE <= NCCL_NET_HANDLE_MAXSIZE);
    memset(buf, 0x77, sizeof(buf));
    lg_handle_encode(buf, &h);
    CHECK_EQ(buf[LG_HANDLE_SIZE], 0x77); /* writes only its own bytes */
    CHECK_EQ(lg_handle_decode(buf, &d), LG_HANDLE_OK);
    CHECK(d.listen_id == h.listen_id && d.flags == h.flags);
    CHECK(d.ip[0] == h.ip[0] && d.ip[1] == h.ip[1]);
    CHECK(d.port[0] == 40000 && d.port[1] == 50001);
    CHECK(!strcmp(d.nic[0], "rail0") && !strcmp(d.nic[1], "rail1"));
    CHECK(lg_handle_stage_get(buf) == NULL); /* fresh from the listener */

    /* NIC names are for log lines: a peer that sends none (zeros, as before the names), 16
     * bytes without a NUL, or bytes that are not printable yield "", and the handle still
     * decodes. */
    char named[sizeof(buf)];
    memcpy(named, buf, sizeof(buf));
    memset(named + 32, 0, 32);
    CHECK_EQ(lg_handle_decode(named, &d), LG_HANDLE_OK);
    CHECK(d.nic[0][0] == 0 && d.nic[1][0] == 0);
    memset(named + 32, 'x', 16);
    memcpy(named + 48, "rail\n1", 7);
    CHECK_EQ(lg_handle_decode(named, &d), LG_HANDLE_OK);
    CHECK(d.nic[0][0] == 0 && d.nic[1][0] == 0);
    struct lg_handle longname = h;
    memset(longname.nic[0], 'y', sizeof(longname.nic[0])); /* no NUL: 15 bytes are sent */
    lg_handle_encode(named, &longname);
    CHECK_EQ(lg_handle_decode(named, &d), LG_HANDLE_OK);
    CHECK_EQ(strlen(d.nic[0]), LG_HANDLE_NIC_LEN - 1);

    char bad[sizeof(buf)];
    memcpy(bad, buf, sizeof(buf));
    bad[0] ^= 1;
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_EMAGIC);
    memcpy(bad, buf, sizeof(buf));
    bad[4] = 2;
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_EVERSION);
    memcpy(bad, buf, sizeof(buf));
    bad[6] = 0x80; /* unknown flag: a newer peer */
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_EVERSION);
    struct lg_handle noaddr = h;
    noaddr.port[1] = 0;
    lg_handle_encode(bad, &noaddr);
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_EADDR);
    noaddr = h;
    noaddr.ip[0] = 0;
    lg_handle_encode(bad, &noaddr);
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_EADDR);
    noaddr = h;
    noaddr.flags = 0;
    noaddr.port[1] = 0; /* no backup: its address is not needed */
    lg_handle_encode(bad, &noaddr);
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_OK);
    CHECK(lg_handle_strerror(LG_HANDLE_EMAGIC)[0] != 0);

    /* The rest of a backup set: each member's address and port, in the listener's order; a
     * member without either, a count past the handle's room, or a set without a backup is
     * refused. */
    struct lg_handle set = h;
    set.flags |= LG_HANDLE_F_SET;
    set.nmore = LG_HANDLE_MAX_SET - 1;
    for (int k = 0; k < set.nmore; k++) {
        set.more_ip[k] = htonl(0xc6120201u + ((uint32_t)k << 8)); /* 198.18.2+k.1 */
        set.more_port[k] = (uint16_t)(41000 + k);
    }
    lg_handle_encode(bad, &set);
    CHECK_EQ(lg_handle_decode(bad, &d), LG_HANDLE_OK);
    CHECK(d.nmore == LG_HANDLE_MAX_SET - 1 && d.more_ip[6] == set.more_ip[6] &&
          d.more_port[6] == 41006 && d.ip[1] == h.ip[1]);
    CHECK(lg_handle_stage_get(bad) == NULL); /* the set stops short of the stage */
    char setb[sizeof(buf)];
    memcpy(setb, bad, sizeof(setb));
    setb[64] = LG_HANDLE_MAX_SET; /* more than fits */
    CHECK_EQ(lg_handle_decode(setb, &d), LG_HANDLE_EADDR);
    memcpy(setb, bad, sizeof(setb));
    memset(setb + 66 + 6 * 3 + 4, 0, 2); /* member 3 without a port */
    CHECK_EQ(lg_handle_decode(setb, &d), LG_HANDLE_EADDR);
    struct lg_handle noback = set;
    noback.flags = LG_HANDLE_F_SET;
    lg_handle_encode(setb, &noback);
    CHECK_EQ(lg_handle_decode(setb, &d), LG_HANDLE_EADDR);

    /* Stage pointer: set, read back, cleared; garbage never yields a pointer. */
    int obj;
    lg_handle_stage_set(buf, &obj);
    CHECK(lg_handle_stage_get(buf) == &obj);
    CHECK_EQ(lg_handle_decode(buf, &d), LG_HANDLE_OK); /* the wire part is untouched */
    lg_handle_stage_set(buf, NULL);
    CHECK(lg_handle_stage_get(buf) == NULL);
    srand(3);
    int ptrs = 0, decoded = 0;
    for (int i = 0; i < 100000; i++) {
        for (size_t k = 0; k < sizeof(bad); k++)
            bad[k] = (char)rand();
        ptrs += lg_handle_stage_get(bad) != NULL;
        decoded += lg_handle_decode(bad, &d) == LG_HANDLE_OK;
    }
    CHECK_EQ(ptrs, 0);
    CHECK_EQ(decoded, 0);
    LG_TEST_DONE();
}
