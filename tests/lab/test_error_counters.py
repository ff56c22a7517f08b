"""The counters that predict gray links, end to end: the real linkguardd in a lab host, its RDMA
counters from a copy of the fixture sysfs tree (tests/fixtures/sys: no RDMA NIC here) mapped onto
the lab's rail0, its PHY monitor asking the kernel about real veths.

One error burst on the fake port: rail0 DEGRADED naming the counter and its rate (status,
events, the log line), `linkguard-cli status rail0` showing the counter, then UP again after the
clean window; a counter reset afterwards raises no alarm. A veth answers FEC_GET with
EOPNOTSUPP and STATS_GET with an empty eth-phy group, which the daemon takes as no data.
"""
from __future__ import annotations

import asyncio
import errno
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_fixture import Daemon, Daemons
from ops_helpers import describe, poll, run_cli

from linkguard_lab.lab import Lab
from linkguardd.monitors.ethtool_stats import EthtoolStats
from linkguardd.monitors.phy import PhyMonitor

pytestmark = pytest.mark.lab

FIXTURE_SYS = Path(__file__).parents[1] / "fixtures" / "sys"
WAIT_S = 15.0  # a few 0.2 s polls on a loaded machine
# Longer than a CLI call on a loaded machine: the checks below see DEGRADED while errors flow.
CLEAN_WINDOW_MS = 5000


def test_a_veth_has_no_fec_and_no_phy_statistics(lab: Lab) -> None:
    nl = EthtoolStats(lab.ns("a"))
    try:
        with pytest.raises(OSError) as raised:
            nl.fec_get("rail0")
        assert raised.value.errno == errno.EOPNOTSUPP
        assert nl.phy_get("rail0") == {}  # the kernel took the request: an empty group
        assert nl.read("rail0") == {}  # neither: an answer, not an error
        with pytest.raises(OSError) as raised:
            nl.phy_get("nosuch0")
        assert raised.value.errno == errno.ENODEV
        assert nl.read("nosuch0") is None
    finally:
        nl.close()
    mon = PhyMonitor(["rail0", "rail1"], netns=lab.ns("a"))
    facts: list[object] = []

    async def one_poll() -> None:
        await mon.start(facts.append)  # the first poll runs before start() returns
        await mon.stop()

    asyncio.run(one_poll())
    assert facts == [] and mon.health.success
    assert mon.supported == {"rail0": False, "rail1": False}


def fake_tree(tmp_path: Path) -> Path:
    """The fixture tree with mlx5_0 port 1 (ACTIVE) mapped onto rail0 through its RoCE GID
    table (gid_attrs/ndevs/0, which the monitors prefer to the PCI function's netdevs)."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE_SYS, root, symlinks=True)
    ndevs = root / "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs"
    ndevs.mkdir(parents=True)
    (ndevs / "0").write_text("rail0\n")
    return root


def status(lab: Lab, d: Daemon, *args: str) -> dict[str, Any]:
    proc = run_cli(lab, d.host, d.grpc_socket, "status", "--json", *args)
    assert proc.returncode in (0, 1), describe(proc)
    return {n["name"]: n for n in json.loads(proc.stdout)["nics"]}


def test_an_error_burst_degrades_the_nic_until_a_clean_window(lab: Lab, daemons: Daemons,
                                                               tmp_path: Path) -> None:
    root = fake_tree(tmp_path)
    port = root / "class/infiniband/mlx5_0/ports/1"
    d = daemons.start(lab, "a", "--interfaces", "rail0,rail1", "--sysfs-root", str(root),
                      "--stats-interval-s", "0.2", "--hold-down-ms", "200",
                      "--error-rate-clean-window-ms", str(CLEAN_WINDOW_MS))
    poll(lambda: status(lab, d)["rail0"]["counters"].get("symbol_error") == 12, WAIT_S,
         "rail0's RDMA counters sampled")
    assert status(lab, d)["rail0"]["state"] == "UP"

    errors = [12]

    def burst() -> None:
        """Thousands more symbol errors: the link keeps failing while the test looks at it."""
        errors[0] += 5000
        (port / "counters/symbol_error").write_text(f"{errors[0]}\n")

    burst()
    poll(lambda: [t for t in d.transitions("rail0") if t["to"] == "DEGRADED"], WAIT_S,
         "rail0 DEGRADED in the log")
    burst()
    rail0 = status(lab, d)["rail0"]
    assert rail0["state"] == "DEGRADED", rail0
    assert rail0["reason"] == "ERROR_RATE" and rail0["counters_over"] == ["symbol_error"]
    assert rail0["counter_rates"]["symbol_error"] > 10
    assert status(lab, d)["rail1"]["state"] == "UP"  # not mapped to any RDMA port

    burst()
    table = run_cli(lab, d.host, d.grpc_socket, "status", "rail0")
    assert table.returncode == 1, describe(table)
    line = next(ln for ln in table.stdout.splitlines() if ln.strip().startswith("symbol_error"))
    assert line.split()[1].isdigit() and int(line.split()[1]) > 5012, table.stdout
    assert "/s" in line and "! over its limit" in line, table.stdout

    events = run_cli(lab, d.host, d.grpc_socket, "events", "--json")
    degraded = [e for e in map(json.loads, events.stdout.splitlines())
                if e["new_state"] == "DEGRADED"]
    assert len(degraded) == 1 and degraded[0]["detail"].startswith("symbol_error ")
    assert degraded[0]["detail"].endswith("/s > 10/s"), degraded[0]
    [logged] = [t for t in d.transitions("rail0") if t["to"] == "DEGRADED"]
    assert logged["reason"] == "ERROR_RATE" and logged["detail"] == degraded[0]["detail"]

    # No new errors: the clean window passes, then the hold-down, then UP.
    poll(lambda: status(lab, d)["rail0"]["state"] == "UP", WAIT_S, "rail0 UP again")
    assert [t["to"] for t in d.transitions("rail0")][-3:] == ["DEGRADED", "RECOVERING", "UP"]

    # A reset (perfquery -R) reads lower than before: a new baseline, no alarm.
    seen = len(d.transitions())
    (port / "counters/symbol_error").write_text("0\n")
    (port / "hw_counters/packet_seq_err").unlink()  # a counter that goes away: fine too
    poll(lambda: status(lab, d)["rail0"]["counters"]["symbol_error"] == 0, WAIT_S,
         "the reset sampled")
    # A rate lasts one sample window (the next clean one reads 0), which a loaded machine's
    # slow polls can miss: one error a second keeps it up, and a window (>= 0.5 s) of L s
    # holds at most floor(L) + 1 of them, at most 2/s, far under the 10/s limit.
    trickle = {"n": 0, "at": 0.0}

    def rate_after_reset() -> bool:
        if time.monotonic() - trickle["at"] >= 1.0:
            trickle["n"] += 1
            trickle["at"] = time.monotonic()
            (port / "counters/symbol_error").write_text(f"{trickle['n']}\n")
        n = status(lab, d)["rail0"]
        rate = n["counter_rates"].get("symbol_error", 0.0)
        return 1 <= n["counters"]["symbol_error"] <= trickle["n"] and 0 < rate <= 10

    poll(rate_after_reset, WAIT_S, "a rate from the new baseline")
    assert status(lab, d)["rail0"]["state"] == "UP" and len(d.transitions()) == seen

    dump = run_cli(lab, d.host, d.grpc_socket, "dump")
    monitors = json.loads(dump.stdout)["monitors"]
    assert monitors["phy"]["success"] and monitors["rdma_counters"]["success"], monitors
