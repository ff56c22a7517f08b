"""Many connections at once: 64 over 2 driver processes per host survive a cut and a restore.

linkguardd in both hosts; two lg_nccl_driver pairs (bench/driver_fleet.py), each a client in
host a sending to a server in host b over 32 connections through libnccl-net-linkguard.so on
dev 0 (rail0 primary, rail1 standby), every connection progressed by its process's one
polling thread and every byte verified; on linkguard's own TCP transport and in wrap mode over
the standalone build of it. a's rail0 is cut at the switch and restored. Passes
only if every connection's sender logged its failover, then its primary path rebuilt (its
standby again) and its return to the primary, every connection carried traffic after its
return, rail0 carries the data again, no plugin WARN, and every driver exits 0 with nothing
lost, duplicated, reordered or corrupted. Every wait is bounded; nothing is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from daemon_fixture import Daemons

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.driver_fleet import Fleet
from bench.plugin_driver import LGTCP_SO, build_plugin
from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

PROCS, CONNS = 2, 32
TOTAL = PROCS * CONNS
DAEMON_ARGS = ("--interfaces", "rail0,rail1", "--hold-down-ms", "300")
# 10 ms between posts per connection: 6,400 messages/s per host, light enough for 2 CPUs.
ARGS = ["--size", "16K", "--depth", "4", "--pace-us", "10000", "--idle-us", "200",
        "--timestamps", "--gap-list-ms", "-1"]
WAIT_S = 60.0  # bounds, not expectations: a loaded machine is slow
# linkguard's own TCP transport, and wrap mode over the standalone build of it (as over an RDMA
# plugin): each path's data through the inner plugin's comms.
TRANSPORTS = {
    "native": {},
    "wrap": {"LINKGUARD_INNER": str(LGTCP_SO), "LGTCP_IFS": "rail0,rail1"},
}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_64_connections_survive_a_cut_and_a_restore(lab: Lab, daemons: Daemons,
                                                    transport: str) -> None:
    d = {h: daemons.start(lab, h, *DAEMON_ARGS) for h in ("a", "b")}
    log = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"}
    env = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0", **TRANSPORTS[transport]}
    fleet = Fleet(lab, PROCS, CONNS, 10 * WAIT_S, ARGS, env=env,
                  server_env={"LINKGUARD_SHM": str(d["b"].shm_path), **log},
                  client_env={"LINKGUARD_SHM": str(d["a"].shm_path), **log})
    try:
        assert fleet.wait(lambda: lab.tx_bytes("a", 0) > 4 << 20, WAIT_S), fleet.warnings
        cut = lab.cut("a", 0)
        switched = fleet.wait_all("failover", cut, WAIT_S)
        assert len(switched) == TOTAL, (len(switched), fleet.warnings[:5])
        assert len({pair for pair, _ in switched}) == PROCS
        restore = lab.restore("a", 0)
        rebuilt = fleet.wait_all("rebuilt", restore, WAIT_S)
        assert len(rebuilt) == TOTAL, (len(rebuilt), fleet.warnings[:5])
        back = fleet.wait_all("reintegration", restore, WAIT_S)
        assert set(back) == set(switched), (len(back), fleet.warnings[:5])
        last_back = max(back.values())
        # Back on rail0: it carries the data again, rail1 (now the standby) next to nothing.
        r0, r1 = lab.tx_bytes("a", 0), lab.tx_bytes("a", 1)
        fleet.wait(lambda: lab.tx_bytes("a", 0) - r0 > 2 << 20, WAIT_S)
        on, off = lab.tx_bytes("a", 0) - r0, lab.tx_bytes("a", 1) - r1
        assert on > 2 << 20 and off < on / 10, (on, off)
        results = fleet.finish()
    finally:
        fleet.kill()
    for server, client in results:
        for r in (server, client):
            rep = r.report
            assert r.returncode == 0 and r.ok, (rep.get("failure"), rep.get("errors"),
                                                r.stderr[-3000:])
            assert rep["errors"] == [] and rep["corrupt_messages"] == 0
            assert rep["missing_messages"] == 0 and rep["size_mismatches"] == 0
            assert rep["duplicated_messages"] == rep["reordered_messages"] == 0
            assert len(rep["comms"]) == CONNS
            # Every connection moved verified messages after every connection was back.
            assert all(c["last_ns"] > last_back for c in rep["comms"]), rep["comms"][:3]
        sent = [c["completed"] for c in client.report["comms"]]
        assert server.report["peer_final_counts"] == sent
    assert fleet.warnings == []
