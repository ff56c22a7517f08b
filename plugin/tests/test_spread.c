/* Spreading backups over a backup set (src/proto/spread.h), without a daemon: the choice of
 * the least-loaded usable member, the count following take and put, and the listener's
 * address on the chosen member's rail (its subnet, else the same place in the set). */
#include <arpa/inet.h>
#include <string.h>

#include "daemon/devices.h"
#include "lg_test.h"
#include "proto/spread.h"
#include "session/handle.h"

static struct lg_nic nic(const char *name, const char *ip, const char *mask)
{
    struct lg_nic n = {.ip = inet_addr(ip), .mask = mask ? inet_addr(mask) : 0};
    snprintf(n.name, sizeof(n.name), "%s", name);
    return n;
}

static void check_choose(void)
{
    int load[4] = {2, 1, 1, 0}, usable[4] = {1, 1, 1, 0};
    CHECK_EQ(lg_spread_choose(load, usable, 4), 1); /* the unusable least loaded is skipped */
    usable[3] = 1;
    CHECK_EQ(lg_spread_choose(load, usable, 4), 3);
    int none[4] = {0, 0, 0, 0};
    CHECK_EQ(lg_spread_choose(load, none, 4), -1);
    CHECK_EQ(lg_spread_choose(load, usable, 0), -1);
}

/* 3 members, 9 connections: 3 each, in set order on ties; a close frees its member's place. */
static void check_take_put(void)
{
    struct lg_device d = {.nset = 3};
    d.set[0] = nic("sp1", "198.18.1.1", "255.255.255.0");
    d.set[1] = nic("sp2", "198.18.2.1", "255.255.255.0");
    d.set[2] = nic("sp3", "198.18.3.1", "255.255.255.0");
    int got[9], per[3] = {0, 0, 0};
    for (int i = 0; i < 9; i++) {
        got[i] = lg_spread_take(&d);
        CHECK(got[i] >= 0 && got[i] < 3);
        per[got[i]]++;
    }
    CHECK(got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 0);
    CHECK(per[0] == 3 && per[1] == 3 && per[2] == 3);
    CHECK_EQ(lg_spread_load("sp2"), 3);
    lg_spread_put("sp2");
    lg_spread_put("sp2");
    CHECK_EQ(lg_spread_load("sp2"), 1);
    CHECK_EQ(lg_spread_take(&d), 1); /* the emptiest now */
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
            lg_spread_put(d.set[i].name);
    CHECK(lg_spread_load("sp1") == 0 && lg_spread_load("sp2") == 0 && lg_spread_load("sp3") == 0);
    lg_spread_put("sp1"); /* never below zero */
    CHECK_EQ(lg_spread_load("sp1"), 0);
}

static void check_peer(void)
{
    struct lg_handle h = {.flags = LG_HANDLE_F_BACKUP | LG_HANDLE_F_SET, .nmore = 2};
    h.ip[1] = inet_addr("198.18.3.2");
    h.port[1] = 4003;
    h.more_ip[0] = inet_addr("198.18.1.2");
    h.more_port[0] = 4001;
    h.more_ip[1] = inet_addr("198.18.2.2");
    h.more_port[1] = 4002;
    uint32_t ip = 0;
    uint16_t port = 0;
    /* The peer lists its set in another order (its own locality): the subnet decides. */
    struct lg_nic two = nic("sp2", "198.18.2.1", "255.255.255.0");
    CHECK_EQ(lg_spread_peer(&two, 0, &h, &ip, &port), 0);
    CHECK(ip == inet_addr("198.18.2.2") && port == 4002);
    /* No mask known: the same place in the set. */
    struct lg_nic blind = nic("sp9", "10.0.0.1", NULL);
    CHECK_EQ(lg_spread_peer(&blind, 2, &h, &ip, &port), 0);
    CHECK(ip == inet_addr("198.18.2.2") && port == 4002);
    CHECK_EQ(lg_spread_peer(&blind, 3, &h, &ip, &port), -1); /* the peer has no 4th */
    /* A subnet none of the peer's members is on: the same place, as without a mask. */
    struct lg_nic other = nic("sp8", "198.19.9.1", "255.255.255.0");
    CHECK_EQ(lg_spread_peer(&other, 0, &h, &ip, &port), 0);
    CHECK(ip == inet_addr("198.18.3.2") && port == 4003);
    struct lg_handle pair = {.flags = 0};
    CHECK_EQ(lg_spread_peer(&two, 0, &pair, &ip, &port), -1); /* no backup at all */
}

int main(void)
{
    check_choose();
    check_take_put();
    check_peer();
    LG_TEST_DONE();
}
