"""bench.gray_soak's accounting of the plugin's lines: a switch is a false move (no fault is
injected in the soak), a reintegration is its undo, and each verdict is counted by kind; a
driver's end report gives the soak's verdict on the data."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.gray_soak import count_lines, verdict
from bench.plugin_driver import DriverResult

LINES = [
    "[plugin INFO src/abi/core.c:236] NET/linkguard: send conn 0a1b on dev 0: 2 path(s), ...",
    ("[plugin INFO src/proto/failover.c:470] NET/linkguard: recv conn 77aa: primary path on NIC rail0 "
    "to 198.18.0.1:4000 stalled: message #12 got no data for 512 ms"),
    ("[plugin INFO src/proto/failover.c:700] NET/linkguard: send conn 0a1b: failover: primary path on "
    "NIC rail0 -> backup path on NIC rail1 (peer declared the path failed); epoch 1"),
    ("[plugin INFO src/proto/failover.c:900] NET/linkguard: recv conn 0a1b: failover: primary path on "
    "NIC rail0 -> backup path on NIC rail1 at epoch 1 (asked by the sender)"),
    ("[plugin INFO src/proto/failover.c:420] NET/linkguard: send conn 0a1b: primary path on NIC rail0 to "
    "198.18.0.2:4000 is lossy: 2.4 % of 41.2 MB sent were retransmitted"),
    ("[plugin INFO src/proto/gray.c:39] NET/linkguard: send conn 0c2d: primary path on NIC rail0 to "
    "198.18.0.2:4001 is slow: 45.0 MB/s completed while backlogged, under 50 % of its baseline "
    "of 307.8 MB/s in each of the last 2 windows of 400 ms; held off for 10 s"),
    ("[plugin INFO src/proto/failover.c:700] NET/linkguard: send conn 0a1b: reintegrated: backup path on "
    "NIC rail1 -> primary path on NIC rail0 (primary healthy again); epoch 2"),
]


def test_switches_and_verdicts_are_counted_by_kind() -> None:
    got = count_lines(LINES)
    assert got["switches"] == {"failover": 1, "reintegrated": 1}
    # The receiver's line is the same switch; the reintegration undoes it, not a second move.
    assert got["false_moves"] == 1
    assert got["verdicts"]["stalled"] == 1 and got["verdicts"]["lossy"] == 1
    assert got["verdicts"]["slow"] == 1  # wrap mode's rate judge
    assert got["verdicts"]["silent"] == 0 and got["verdicts"]["no working path"] == 0
    assert len(got["examples"]) == 2


def test_a_quiet_run_has_no_false_move() -> None:
    got = count_lines(LINES[:1])
    assert got["false_moves"] == 0 and got["switches"] == {} and got["examples"] == []


def test_a_driver_verdict_keeps_its_counters_and_fails_on_any_error() -> None:
    clean = {"ok": True, "corrupt_messages": 0, "missing_messages": 0, "errors": []}
    assert verdict(DriverResult(clean, 0, ""))["ok"] is True
    missing = verdict(DriverResult({**clean, "ok": False, "missing_messages": 3}, 1, ""))
    assert missing["ok"] is False and missing["missing_messages"] == 3
    # Killed before its report (no JSON): not ok, and the counters say nothing.
    killed = verdict(DriverResult({}, -9, ""))
    assert killed["ok"] is False and killed["corrupt_messages"] is None
