"""Who is on the backup (issue 29): the plugins' connection census, end to end.

linkguardd in both hosts; two lg_nccl_driver pairs (bench/driver_fleet.py), each a client in host
a sending to a server in host b over 64 connections through libnccl-net-linkguard.so on dev 0
(rail0 primary, rail1 standby; on linkguard's TCP transport and in wrap mode over lgtcp),
every plugin pointed at its host's verdict socket, on which it
also sends its census. What an operator of host a sees with `linkguard-cli`: before the cut, 128
connections on rail0's primary and 128 standby paths on rail1; after a's rail0 is cut, all 128
on rail1's backup (rail0 "away" 128, nothing left on it) and `jobs` lists both processes as on
the backup; after the restore, all back on rail0. Then `drain rail0 --wait` returns once the
census shows rail0 empty, and `undrain` brings them back. Every driver exits 0 with every byte
verified. Each wait is bounded; nothing is timed (the census's delay after a failover is measured
by the note's bench figures, not asserted here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from daemon_fixture import Daemon, Daemons
from ops_helpers import describe, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from test_scale import (  # the same lab, daemons and transports as the scale test
    DAEMON_ARGS,
    TRANSPORTS,
    WAIT_S,
    built,  # noqa: F401  (autouse here too: the plugin is built)
)

from bench.driver_fleet import Fleet
from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

PROCS, CONNS = 2, 64
TOTAL = PROCS * CONNS
# 20 ms between posts per connection: light enough for 2 CPUs with 256 connections a host.
ARGS = ["--size", "4K", "--depth", "2", "--pace-us", "20000", "--idle-us", "200",
        "--gap-list-ms", "-1"]


def assert_all_verified(results: list) -> None:
    """Every driver of the fleet exited 0 with every message once, whole and in order."""
    for pair in results:
        for r in pair:
            rep = r.report
            assert r.returncode == 0 and r.ok, (rep.get("failure"), rep.get("errors"),
                                                r.stderr[-3000:])
            assert rep["corrupt_messages"] == rep["missing_messages"] == 0
            assert rep["duplicated_messages"] == rep["reordered_messages"] == 0


def traffic(lab: Lab, d: Daemon) -> dict[str, dict]:
    """NIC -> its census counts, from `linkguard-cli status --json` on the daemon's host."""
    out = run_cli(lab, d.host, d.grpc_ro_socket, "status", "--json")
    assert out.returncode in (0, 1, 2), out.stderr  # any NIC state; the call itself worked
    return {n["name"]: n["traffic"] for n in json.loads(out.stdout)["nics"]}


def shows(lab: Lab, d: Daemon, fleet: Fleet, want: dict[str, dict[str, int]], what: str) -> None:
    """Waits until every count in `want` (NIC -> role -> connections) is what the CLI shows."""
    seen: dict[str, dict] = {}

    def match() -> bool:
        seen.update(traffic(lab, d))
        return all(seen.get(nic, {}).get(role) == n for nic, roles in want.items()
                   for role, n in roles.items())

    assert fleet.wait(match, WAIT_S), (what, seen, fleet.warnings[:5])


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_status_jobs_and_drain_wait_follow_a_cut(lab: Lab, daemons: Daemons,
                                                 transport: str) -> None:
    d = {h: daemons.start(lab, h, *DAEMON_ARGS) for h in ("a", "b")}
    env = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0", **TRANSPORTS[transport],
           "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"}  # the fleet reads the moves
    fleet = Fleet(lab, PROCS, CONNS, 10 * WAIT_S, ARGS, env=env,
                  server_env={"LINKGUARD_SHM": str(d["b"].shm_path),
                              "LINKGUARD_VERDICT_SOCKET": str(d["b"].verdict_socket)},
                  client_env={"LINKGUARD_SHM": str(d["a"].shm_path),
                              "LINKGUARD_VERDICT_SOCKET": str(d["a"].verdict_socket)})
    a = d["a"]
    try:
        shows(lab, a, fleet, {"rail0": {"primary": TOTAL, "processes": PROCS},
                              "rail1": {"standing": TOTAL, "backup": 0}}, "all on rail0")
        cut = lab.cut("a", 0)
        shows(lab, a, fleet, {"rail0": {"primary": 0, "backup": 0, "away": TOTAL},
                              "rail1": {"backup": TOTAL}}, "all moved to rail1")
        assert len(fleet.wait_all("failover", cut, WAIT_S)) == TOTAL
        jobs = json.loads(run_cli(lab, "a", a.grpc_ro_socket, "jobs", "--json").stdout)
        assert sorted(j["on_backup"] for j in jobs) == [CONNS] * PROCS, jobs
        assert all(j["failovers"] >= CONNS for j in jobs), jobs
        restore = lab.restore("a", 0)
        assert len(fleet.wait_all("reintegration", restore, WAIT_S)) == TOTAL
        shows(lab, a, fleet, {"rail0": {"primary": TOTAL, "away": 0},
                              "rail1": {"backup": 0}}, "all back on rail0")
        # A technician's drain: returns once nothing is left on rail0.
        drained = run_cli(lab, "a", a.grpc_socket, "drain", "rail0", "--reason", "swap optic",
                          "--wait", "--wait-timeout", str(WAIT_S))
        assert drained.returncode == 0, describe(drained)
        assert "no connection left on it" in drained.stdout, drained.stdout
        left = traffic(lab, a)["rail0"]
        assert left["primary"] + left["backup"] == 0, left
        assert run_cli(lab, "a", a.grpc_socket, "undrain", "rail0").returncode == 0
        shows(lab, a, fleet, {"rail0": {"primary": TOTAL}}, "back on rail0 after undrain")
        results = fleet.finish()
    finally:
        fleet.kill()
    assert_all_verified(results)
