"""lg_nccl_driver's timed mode over loopback (no root): continuous traffic bounded by time and a
message cap, the peers agreeing on exactly how many messages each direction carried, completion
gaps in CLOCK_MONOTONIC, pacing, the progress line, an early clean stop on SIGUSR1, and a
receiver that tells a duplicated, reordered or lost message from a flipped byte."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import (
    build_plugin,
    free_port,
    gaps_overlapping,
    local_starter,
    run_pair,
    start_stream_pair,
)

LOOPBACK = {"LINKGUARD_PAIRS": "lo"}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()



def stream(args: list[str], timeout: float = 60):
    return run_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}", args,
                    env=LOOPBACK, timeout=timeout)


def test_timed_bidirectional_run_agrees_on_counts_and_reports_gaps() -> None:
    t0 = time.monotonic_ns()
    srv, cli = stream(["--duration-s", "0.5", "--bidir", "--size", "1M", "--conns", "2",
                       "--gap-list-ms", "0", "--top-gaps", "5", "--progress-ms", "100"])
    t1 = time.monotonic_ns()
    for r, peer in ((srv, cli), (cli, srv)):
        rep = r.report
        assert r.ok, (rep, r.stderr[-2000:])
        assert rep["mode"] == "duration" and rep["corrupt_messages"] == 0
        assert rep["missing_messages"] == 0 and rep["errors"] == []
        # Every receive completed exactly what the peer's send comm of that connection sent.
        sent = {c["conn"]: c["completed"] for c in peer.report["comms"] if c["send"]}
        assert rep["peer_final_counts"] == [sent[0], sent[1]]
        for c in rep["comms"]:
            assert c["completed"] == c["expected"] > 0
            if not c["send"]:
                assert c["completed"] == sent[c["conn"]]
            assert t0 <= c["first_ns"] <= c["last_ns"] <= t1  # one clock: CLOCK_MONOTONIC
        gaps = rep["gaps"]
        assert gaps["count"] == sum(c["completed"] - 1 for c in rep["comms"])
        assert sum(gaps["histogram_ms"]["counts"]) == gaps["count"]
        # --gap-list-ms 0: every gap, listed or counted as dropped past the list's cap
        assert len(gaps["list"]) + gaps["list_dropped"] == gaps["count"]
        top = [g["ms"] for g in gaps["top"]]
        assert len(top) == 5 and top == sorted(top, reverse=True)
        assert top[0] == pytest.approx(max(c["max_gap_ms"] for c in rep["comms"]), abs=0.002)
        biggest = gaps["top"][0]
        assert gaps_overlapping(rep, biggest["start_ns"], biggest["start_ns"])
        assert "lg_nccl_driver: progress t=" in r.stderr
    total = sum(c["completed"] for c in srv.report["comms"] if not c["send"])
    assert srv.report["bytes_received"] == total * (1 << 20)


def test_message_cap_ends_a_timed_run() -> None:
    srv, cli = stream(["--duration-s", "30", "--count", "200", "--size", "4096"])
    assert srv.ok and cli.ok, (srv.report, cli.report)
    assert srv.report["peer_final_counts"] == [200]
    assert srv.report["comms"][0]["completed"] == 200


def test_pacing_posts_one_message_a_pace_with_room_in_the_window() -> None:
    # Post k is due k paces after the start; once post 0 was due the driver used to post the
    # whole window, so `depth` messages went back to back every `depth` paces (the bench's
    # 4-pace completion gaps). Each send completes after its post: lower bounds only, which a
    # slow machine cannot break (it only posts later).
    pace_ns, n = 40_000_000, 4
    srv, cli = stream(["--duration-s", "30", "--count", str(n), "--depth", str(n), "--size", "4096",
                       "--pace-us", str(pace_ns // 1000), "--gap-list-ms", "0"])
    assert srv.ok and cli.ok, (srv.report, cli.report)
    rep = cli.report
    (comm,) = [c for c in rep["comms"] if c["send"]]
    assert comm["completed"] == n
    ends = sorted(g[2] for g in rep["gaps"]["list"] if g[0] == comm["comm"])
    done = [comm["first_ns"], *ends]
    assert len(done) == n
    for k, t in enumerate(done):
        assert t >= rep["t_start_ns"] + k * pace_ns - 1000, (k, t - rep["t_start_ns"])


def test_sigusr1_stops_a_timed_run_cleanly() -> None:
    pair = start_stream_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}", 120,
                             ["--bidir", "--size", "65536", "--pace-us", "200", "--progress-ms", "100"],
                             env=LOOPBACK)
    try:
        deadline = time.monotonic() + 30
        while not any("progress" in ln.text for ln in pair.lines) and pair.running():
            assert time.monotonic() < deadline, "no progress line"
            time.sleep(0.05)
        assert pair.running()
        for proc in pair.procs.values():
            proc.send_signal(signal.SIGUSR1)  # the drivers this test started
        srv, cli = pair.wait(timeout=60)
    finally:
        pair.kill()
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-2000:])
        assert r.report["seconds"] < 60  # ended by the signal, not by the 120 s duration
        assert all(c["completed"] == c["expected"] > 0 for c in r.report["comms"])


@pytest.mark.parametrize("kind,field", [("byte", None), ("dup", "duplicated_messages"),
                                        ("swap", "reordered_messages"),
                                        ("drop", "reordered_messages")])
def test_receiver_catches_and_names_a_broken_stream(kind: str, field: str | None) -> None:
    srv, _ = stream(["--duration-s", "0.3", "--size", "65536", "--corrupt-kind", kind])
    rep = srv.report
    assert not srv.ok and rep["ok"] is False
    assert rep["corrupt_messages"] >= 1
    if field is None:
        assert rep["duplicated_messages"] == rep["reordered_messages"] == 0
        assert "(corrupt)" in srv.stderr
    else:
        assert rep[field] >= 1
    if kind == "swap":
        assert rep["duplicated_messages"] >= 1  # the earlier message arrives second
    assert rep["unwritten_messages"] == 0


def test_count_mode_report_keeps_its_fields_and_gains_gaps() -> None:
    srv, cli = stream(["--count", "50", "--size", "8192", "--bidir"])
    assert srv.ok and cli.ok
    for key in ("role", "plugin", "version", "device", "speed_mbps", "conns", "size", "depth",
                "count", "bidir", "bytes_sent", "bytes_received", "seconds", "gbps",
                "completions", "max_gap_ms", "corrupt_messages", "size_mismatches",
                "missing_messages", "close_inflight", "rounds", "rounds_ok", "verified", "failure", "errors",
                "rtt_us", "ok"):
        assert key in srv.report, key
    assert srv.report["mode"] == "count" and srv.report["completions"] == 100
    assert srv.report["gaps"]["count"] == 98  # 2 comms x (50 - 1)
