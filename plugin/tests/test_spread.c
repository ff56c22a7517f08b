/* Spreading backups over a backup set (src/proto/spread.h), without a daemon: the choice of
 * the least-loaded usable member (the device's count first, the process's on a tie), the
 * counts following take and put, the listener's address on the chosen member's rail (its
 * subnet, else the same place in the set), and re-spreading after a return: which standby
 * moves where, when it may, and the budget per heartbeat period. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/devices.h"
#include "lg_test.h"
#include "proto/conn.h"
#include "proto/spread.h"
#include "runtime/params.h"
#include "runtime/util.h"
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
    CHECK_EQ(lg_spread_choose(load, NULL, usable, 4), 1); /* the unusable least loaded is skipped */
    usable[3] = 1;
    CHECK_EQ(lg_spread_choose(load, NULL, usable, 4), 3);
    int none[4] = {0, 0, 0, 0};
    CHECK_EQ(lg_spread_choose(load, NULL, none, 4), -1);
    CHECK_EQ(lg_spread_choose(load, NULL, usable, 0), -1);
    /* The process's count breaks a tie of the device's, never overrides it. */
    int dl[3] = {1, 1, 0}, pl[3] = {9, 2, 7}, all[3] = {1, 1, 1};
    CHECK_EQ(lg_spread_choose(dl, pl, all, 3), 2);
    dl[2] = 1;
    CHECK_EQ(lg_spread_choose(dl, pl, all, 3), 1);
    pl[0] = 2;
    CHECK_EQ(lg_spread_choose(dl, pl, all, 3), 0); /* a tie of both: the nearest */
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
        got[i] = lg_spread_take(0, &d);
        CHECK(got[i] >= 0 && got[i] < 3);
        per[got[i]]++;
    }
    CHECK(got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 0);
    CHECK(per[0] == 3 && per[1] == 3 && per[2] == 3);
    CHECK_EQ(lg_spread_load("sp2"), 3);
    lg_spread_put(0, "sp2");
    lg_spread_put(0, "sp2");
    CHECK_EQ(lg_spread_load("sp2"), 1);
    CHECK_EQ(lg_spread_take(0, &d), 1); /* the emptiest now */
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
            lg_spread_put(0, d.set[i].name);
    CHECK(lg_spread_load("sp1") == 0 && lg_spread_load("sp2") == 0 && lg_spread_load("sp3") == 0);
    lg_spread_put(0, "sp1"); /* never below zero */
    CHECK_EQ(lg_spread_load("sp1"), 0);
    CHECK_EQ(lg_spread_dev_load(0, "sp1"), 0);
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

static const char *env(const char *name) { return getenv(name); }

static struct lg_device three(void)
{
    struct lg_device d = {.nset = 3};
    d.set[0] = nic("sp1", "198.18.1.1", "255.255.255.0");
    d.set[1] = nic("sp2", "198.18.2.1", "255.255.255.0");
    d.set[2] = nic("sp3", "198.18.3.1", "255.255.255.0");
    return d;
}

/* Overlapping sets: device 1 (set sp2+sp3) holds 4 backups. With one process-wide count device
 * 0 (sp1+sp2+sp3) would put its 3 all on sp1 (0, then 1 < 2, then the nearest of 2/2/2); its
 * own count first spreads them 1/1/1, the process's count deciding only among its ties. */
static void check_per_device(void)
{
    lg_spread_reset();
    struct lg_device d0 = three(), d1 = {.nset = 2};
    d1.set[0] = d0.set[1];
    d1.set[1] = d0.set[2];
    for (int i = 0; i < 4; i++)
        CHECK(lg_spread_take(1, &d1) >= 0);
    CHECK(lg_spread_dev_load(1, "sp2") == 2 && lg_spread_dev_load(1, "sp3") == 2);
    int per[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        per[lg_spread_take(0, &d0)]++;
    CHECK(per[0] == 1 && per[1] == 1 && per[2] == 1);
    CHECK(lg_spread_load("sp1") == 1 && lg_spread_load("sp2") == 3 && lg_spread_load("sp3") == 3);
    CHECK_EQ(lg_spread_dev_load(0, "sp2"), 1);
    lg_spread_put(0, "sp2"); /* device 0's put leaves device 1's count */
    CHECK(lg_spread_dev_load(0, "sp2") == 0 && lg_spread_dev_load(1, "sp2") == 2);
    lg_spread_reset();
}

/* Which standby moves, and where: only from a member at least 2 above the least-loaded usable
 * other one, to that one (the process's count on a tie); never in a set of one. */
static void check_respread_target(void)
{
    int all[3] = {1, 1, 1};
    int piled[3] = {0, 5, 4}; /* a second failure's member came back empty */
    CHECK_EQ(lg_spread_respread_target(piled, NULL, all, 3, 1), 0);
    CHECK_EQ(lg_spread_respread_target(piled, NULL, all, 3, 2), 0);
    CHECK_EQ(lg_spread_respread_target(piled, NULL, all, 3, 0), -1); /* the emptiest stays */
    int even[3] = {3, 3, 3}, near[3] = {4, 3, 3};
    for (int k = 0; k < 3; k++)
        CHECK_EQ(lg_spread_respread_target(even, NULL, all, 3, k), -1);
    CHECK_EQ(lg_spread_respread_target(near, NULL, all, 3, 0), -1); /* a move would only swap */
    int off[3] = {0, 1, 1}; /* the empty member is not usable (yet): nothing to even out */
    CHECK_EQ(lg_spread_respread_target(piled, NULL, off, 3, 1), -1);
    int steep[3] = {1, 6, 2};
    CHECK_EQ(lg_spread_respread_target(steep, NULL, off, 3, 1), 2); /* the usable one left */
    int pair[1] = {5}, one[1] = {1};
    CHECK_EQ(lg_spread_respread_target(pair, NULL, one, 1, 0), -1); /* a pair never moves */
    CHECK_EQ(lg_spread_respread_target(piled, NULL, all, 3, -1), -1); /* not a member */
    CHECK_EQ(lg_spread_respread_target(piled, NULL, all, 3, 3), -1);
    int tie[3] = {4, 1, 1}, pl[3] = {4, 6, 3};
    CHECK_EQ(lg_spread_respread_target(tie, pl, all, 3, 0), 2); /* the process's count */
    /* The pile re-spreads in exactly its surplus of moves, whatever order the connections
     * look in (the monitor's), and then nothing moves. */
    int at[9] = {1, 2, 1, 2, 1, 2, 1, 2, 1}; /* 5 on member 1, 4 on member 2 */
    int cnt[3] = {0, 5, 4}, moves = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < 9; i++) {
            int t = lg_spread_respread_target(cnt, NULL, all, 3, at[i]);
            if (t >= 0) {
                cnt[at[i]]--;
                cnt[t]++;
                at[i] = t;
                moves++;
            }
        }
    CHECK(cnt[0] == 3 && cnt[1] == 3 && cnt[2] == 3);
    CHECK_EQ(moves, 3);
}

/* Only an idle standby moves: the data on the primary, nothing being switched or rebuilt. */
static void check_may_move(void)
{
    const struct lg_spread_standby idle = {.spread = 1, .active = 0, .committed = 1,
                                           .primary_works = 1, .standby_up = 1};
    CHECK_EQ(lg_spread_may_move(&idle), 1);
    struct lg_spread_standby s = idle;
    s.spread = 0; /* a pair, wrap mode */
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.active = 1; /* the standby carries the data */
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.committed = 0;
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.primary_works = 0; /* the standby is what protects it now */
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.standby_up = 0;
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.switching = 1;
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.rebuilding = 1;
    CHECK_EQ(lg_spread_may_move(&s), 0);
    s = idle;
    s.held = 1;
    CHECK_EQ(lg_spread_may_move(&s), 0);
}

/* lg_spread_respread on connections of a published device: the moved one's slot names the
 * new member and the listener's NIC on its rail, the counts follow, and at most
 * LINKGUARD_RESPREAD_MOVES move per heartbeat period. */
static void check_respread(void)
{
    lg_spread_reset();
    static struct lg_device_table t = {.count = 1};
    t.dev[0] = three();
    t.dev[0].nic[0] = nic("sp0", "198.18.0.1", "255.255.255.0");
    lg_devices_publish(&t);
    struct lg_handle h = {.flags = LG_HANDLE_F_BACKUP | LG_HANDLE_F_SET, .nmore = 2};
    h.ip[1] = inet_addr("198.18.1.2");
    h.port[1] = 4001;
    h.more_ip[0] = inet_addr("198.18.2.2");
    h.more_port[0] = 4002;
    h.more_ip[1] = inet_addr("198.18.3.2");
    h.more_port[1] = 4003;
    static struct lg_conn c[9];
    /* As a second failure leaves them: none on sp1, 5 on sp2, 4 on sp3. */
    for (int i = 0; i < 9; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].dev = 0;
        c[i].spread_held = 1;
        c[i].peer = h;
        lg_nic_name_copy(c[i].nic[1], t.dev[0].set[i < 5 ? 1 : 2].name);
    }
    lg_spread_reset();
    for (int i = 0; i < 9; i++) { /* the same counts, in the table */
        struct lg_device only = {.nset = 1};
        only.set[0] = t.dev[0].set[i < 5 ? 1 : 2];
        CHECK_EQ(lg_spread_take(0, &only), 0);
    }
    CHECK(lg_spread_dev_load(0, "sp2") == 5 && lg_spread_dev_load(0, "sp3") == 4);
    lg_params.respread_moves = 2;
    uint64_t now = LG_MS(1000);
    int moved = 0, later = 0;
    for (int i = 0; i < 9; i++) {
        int r = lg_spread_respread(&c[i], now);
        later += r == LG_SPREAD_LATER;
        if (r >= 0) {
            moved++;
            CHECK_EQ(r, 0);
            CHECK(!strcmp(c[i].nic[1], "sp1") && c[i].local_ip[1] == inet_addr("198.18.1.1"));
            CHECK(c[i].peer_ip[1] == inet_addr("198.18.1.2") && c[i].peer_port[1] == 4001);
        }
    }
    CHECK_EQ(moved, 2); /* the period's budget */
    CHECK(later >= 1);
    CHECK(lg_spread_dev_load(0, "sp1") == 2 && lg_spread_load("sp1") == 2);
    now += LG_MS(lg_params.heartbeat_ms); /* the next period */
    for (int i = 0; i < 9; i++)
        moved += lg_spread_respread(&c[i], now) >= 0;
    CHECK_EQ(moved, 3);
    CHECK(lg_spread_dev_load(0, "sp1") == 3 && lg_spread_dev_load(0, "sp2") == 3 &&
          lg_spread_dev_load(0, "sp3") == 3);
    now += LG_MS(lg_params.heartbeat_ms);
    for (int i = 0; i < 9; i++)
        CHECK_EQ(lg_spread_respread(&c[i], now), -1); /* even: nothing more moves */
    c[0].spread_held = 0; /* not spread (a pair's handle, wrap mode): never */
    CHECK_EQ(lg_spread_respread(&c[0], now), -1);
    lg_params.respread_moves = 0; /* turned off */
    lg_spread_put(0, c[0].nic[1]); /* sp1 1, sp2 3, sp3 3: c[3] would move */
    lg_spread_put(0, c[1].nic[1]);
    CHECK_EQ(lg_spread_respread(&c[3], now + LG_MS(1000)), LG_SPREAD_LATER);
    lg_devices_publish(NULL);
    lg_spread_reset();
}

int main(void)
{
    check_choose();
    check_take_put();
    check_peer();
    check_per_device();
    check_respread_target();
    check_may_move();
    lg_params_load(&lg_params, env);
    check_respread();
    LG_TEST_DONE();
}
