"""Spread backups (issue 28, the plugin's first half): a device's backup paths over its whole
backup set, so that a dead primary's connections land on every other rail, not on one.

2 hosts x 4 rails, linkguardd in both with every NIC's set being all the others (`"*" =
"all"`); one lg_nccl_driver pair (bench/driver_fleet.py), a client in host a sending to a
server in host b over 9 connections through libnccl-net-linkguard.so on dev 0 (rail0 primary),
every byte verified. What host a's daemon shows from the plugins' census: before the cut, the
9 standby paths 3 on each of rail1, rail2 and rail3; after a's rail0 is cut, the 9 connections
3 on each of them; after rail1 is cut too, rail1's 3 rebuilt on rail2 and rail3 (at least 3 on
each); after both come back, all on rail0 again with a standby each, and the standbys
re-spread 3 on each of rail1..rail3 again: the surplus of rail2 and rail3 (3 standbys) moves
back to rail1, each an idle standby closed and rebuilt, never all of them. The pair mode
is what the other lab tests run (a set of one: nothing spreads). Each wait is bounded;
nothing is timed. It runs on linkguard's own TCP transport and in wrap mode over the
standalone build of that transport (one inner device per rail: each backup's inner comm on
its member's inner device)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from daemon_fixture import Daemons
from test_census_plugin import assert_all_verified, shows, traffic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from test_scale import WAIT_S, built  # noqa: F401  (autouse here too: the plugin is built)

from bench.driver_fleet import Fleet
from bench.plugin_driver import LGTCP_SO
from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

RAILS = ["rail0", "rail1", "rail2", "rail3"]
CONNS = 9
ARGS = ["--size", "4K", "--depth", "2", "--pace-us", "20000", "--idle-us", "200",
        "--gap-list-ms", "-1"]
TRANSPORTS = {
    "native": {},
    "wrap": {"LINKGUARD_INNER": str(LGTCP_SO), "LGTCP_IFS": ",".join(RAILS)},
}


# Wrap mode: each inner comm that came up, the linkguard path's NIC and its inner device.
INNER_READY = re.compile(r"(?P<slot>primary|backup) path on NIC (?P<nic>\S+) \(gen \d+\): "
                         r"inner '[^']*' (?:send|recv) comm #\d+ ready in [\d.]+ ms on inner "
                         r"dev \d+ \((?P<inner>[^)]*)\)")


def inner_comms(fleet: Fleet) -> list[tuple[str, str, str]]:
    """(role slot, path NIC, inner device name) of every inner comm that came up."""
    return [(f"{ln.role} {m['slot']}", m["nic"], m["inner"])
            for ln in fleet.pairs[0].stderr_lines() if (m := INNER_READY.search(ln.text))]


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_dead_primary_spreads_over_every_other_rail(lab_factory, daemons: Daemons,
                                                      transport: str) -> None:
    lab: Lab = lab_factory(rails=4)
    config = {"pairs": {"*": "all"}, "locality": "any"}
    d = {h: daemons.start(lab, h, "--interfaces", ",".join(RAILS), "--hold-down-ms", "300",
                          config=config) for h in ("a", "b")}
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET",  # the fleet reads the moves
           **TRANSPORTS[transport]}
    fleet = Fleet(lab, 1, CONNS, 10 * WAIT_S, ARGS, env=env,
                  server_env={"LINKGUARD_SHM": str(d["b"].shm_path),
                              "LINKGUARD_VERDICT_SOCKET": str(d["b"].verdict_socket)},
                  client_env={"LINKGUARD_SHM": str(d["a"].shm_path),
                              "LINKGUARD_VERDICT_SOCKET": str(d["a"].verdict_socket)})
    a, third = d["a"], CONNS // 3
    spread_standby = {nic: {"standing": third, "backup": 0} for nic in RAILS[1:]}
    try:
        shows(lab, a, fleet, {"rail0": {"primary": CONNS}, **spread_standby},
              "the standby paths spread over rail1..rail3")
        cut = lab.cut("a", 0)
        shows(lab, a, fleet, {"rail0": {"primary": 0, "away": CONNS},
                              **{nic: {"backup": third} for nic in RAILS[1:]}},
              "the connections spread over rail1..rail3")
        assert len(fleet.wait_all("failover", cut, WAIT_S)) == CONNS
        # A second cut, of rail1, while rail0 is down: rail1's connections have no path left,
        # and their backups are rebuilt on the other members, the least loaded first.
        second = lab.cut("a", 1)
        moved = {}

        def spread_over_two() -> bool:
            moved.update(traffic(lab, a))
            on = [moved.get(nic, {}).get("backup", 0) for nic in RAILS[1:]]
            return on[0] == 0 and on[1] + on[2] == CONNS and min(on[1:]) >= third

        assert fleet.wait(lambda: len(fleet.conn_times("rebuilt-backup", second)) >= third,
                          WAIT_S), ("rail1's backups rebuilt elsewhere", fleet.warnings[:5])
        assert len(fleet.conn_times("rebuilt-backup", second)) == third
        assert fleet.wait(spread_over_two, WAIT_S), ("rail1's connections on rail2 and rail3",
                                                     moved, fleet.warnings[:5])
        lab.restore("a", 1)
        restore = lab.restore("a", 0)
        assert len(fleet.wait_all("reintegration", restore, WAIT_S)) >= CONNS
        shows(lab, a, fleet, {"rail0": {"primary": CONNS, "away": 0},
                              **{nic: {"backup": 0} for nic in RAILS[1:]}},
              "all back on rail0")
        # The re-spread: rail1 came back empty of standbys, rail2 and rail3 hold its 3 too;
        # once the data is back on rail0 the surplus moves back, a few at a time, lossless.
        shows(lab, a, fleet, {"rail0": {"primary": CONNS, "away": 0}, **spread_standby},
              "the standbys re-spread 3 each over rail1..rail3 after the restores")
        # At least the surplus moves, and never every standby. More than the surplus is
        # right too when a member's UP reaches the plugin after the others' (6/3 on rail2 and
        # rail3 evens out to 5/4 without rail1, then 3/3/3 with it).
        surplus = sum(max(0, moved[nic]["backup"] - third) for nic in RAILS[2:])
        moves = fleet.conn_times("respread", restore)
        assert surplus <= len(moves) < CONNS, ("the surplus moves", surplus, moves, moved)
        assert fleet.wait(lambda: len(set(fleet.conn_times("rebuilt-backup", restore))
                                      & set(moves)) == len(moves), WAIT_S), \
            ("each moved standby rebuilt", moves, fleet.warnings[:5])
        results = fleet.finish()
        comms = inner_comms(fleet)
    finally:
        fleet.kill()
    assert_all_verified(results)
    if transport == "wrap":
        # Each backup's inner comm runs on its own member's inner device, at both ends, and
        # the standbys came up on every other rail (lgtcp names its devices by netdev).
        assert comms and all(nic == inner for _, nic, inner in comms), comms
        for role in ("client", "server"):
            assert {nic for who, nic, _ in comms if who == f"{role} backup"} == set(RAILS[1:]), \
                (role, comms)
