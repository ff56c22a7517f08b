"""A gray NIC only a job can see, shown to operators (issue #12): one TCP flow of a connection
stalls (nftables drops it at the switch; carrier up, every other flow fine, so no daemon sees a
thing), the plugin's progress watchdog fails the path over and reports the NIC stalled to its
host's daemon, and that host's `linkguard-cli status`, event history and /metrics show it while
the NIC stays UP. The read-only pod mount is in test_kubernetes_mounts.py.
"""
from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest
from daemon_fixture import Daemon, Daemons
from ops_helpers import http_get, poll, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import build_plugin, lab_starter, start_stream_pair
from linkguard_lab.lab import Lab
from linkguardd.states import NicState

pytestmark = pytest.mark.lab

METRICS = "127.0.0.1:9846"  # each lab host has its own loopback
DAEMON_ARGS = ("--interfaces", "rail0,rail1", "--hold-down-ms", "300", "--metrics-address",
               METRICS)
PLUGIN_ENV = {"LINKGUARD_REJOIN_MS": "300", "LINKGUARD_REJOIN_TIMEOUT_MS": "1000"}
ARGS = ["--bidir", "--conns", "1", "--size", "262144", "--depth", "8", "--verbose"]
_PORTS = re.compile(r"send conn (?P<id>[0-9a-f]+) on dev 0: 2 path\(s\).*local ports: primary "
                    r"ctrl \d+ data (?P<data>[\d,]+)")
WAIT_S = 20.0


def gray_nics(lab: Lab, d: Daemon) -> dict[str, list[dict]]:
    """NIC -> its plugin verdicts, from `linkguard-cli status --json` on the daemon's host."""
    out = run_cli(lab, d.host, d.grpc_ro_socket, "status", "--json")
    return {n["name"]: n["plugin_verdicts"] for n in json.loads(out.stdout)["nics"]
            if n["plugin_verdicts"]}


def stream_pair(lab: Lab, d: dict[str, Daemon], port: int):
    """A driver pair streaming both ways, each plugin pointed at its host's daemon."""
    return start_stream_pair(
        lab_starter(lab, "b"), lab_starter(lab, "a"), f"{lab.mgmt_address('b')}:{port}",
        duration_s=60, args=ARGS, env=PLUGIN_ENV, timeout=90,
        server_env={"LINKGUARD_SHM": str(d["b"].shm_path),
                    "LINKGUARD_VERDICT_SOCKET": str(d["b"].verdict_socket)},
        client_env={"LINKGUARD_SHM": str(d["a"].shm_path),
                    "LINKGUARD_VERDICT_SOCKET": str(d["a"].verdict_socket)})


def test_a_stall_only_the_job_sees_shows_in_status_events_and_metrics(
        lab: Lab, daemons: Daemons) -> None:
    build_plugin()
    d = {h: daemons.start(lab, h, *DAEMON_ARGS) for h in ("a", "b")}
    pair = stream_pair(lab, d, 7300)
    try:
        found = poll(lambda: [m for ln in pair.stderr_lines() if (m := _PORTS.search(ln.text))],
                     WAIT_S, "a send connection's local ports", interval_s=0.05)
        assert gray_nics(lab, d["a"]) == gray_nics(lab, d["b"]) == {}
        lab.stall("a", 0, int(found[0]["data"].split(",")[0]))
        try:
            # The receiver's watchdog (host b) or the sender's (host a) judges it: whichever
            # host's plugin did, its daemon shows its own rail0 gray.
            reported = poll(lambda: {h: g for h in d if (g := gray_nics(lab, d[h]))}, WAIT_S,
                            "a daemon showing rail0 reported gray")
            assert lab.carrier("a", 0)
        finally:
            lab.unstall("a", 0)
        pids = {p.pid for p in pair.procs.values()}
        for host, nics in reported.items():
            assert list(nics) == ["rail0"], nics
            (verdict,) = nics["rail0"]
            assert verdict["verdict"] == "stalled" and verdict["pid"] in pids, verdict
            assert verdict["path"] == "primary" and verdict["for_ms"] > 0, verdict
            assert re.fullmatch(r"198\.18\.\d+\.\d+:\d+", verdict["peer"]), verdict
            show(lab, d[host])
    finally:
        for proc in pair.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)  # a clean end; only the processes we started
        pair.wait(timeout=60)


def show(lab: Lab, d: Daemon) -> None:
    """What an operator of that host sees: status, the event, the metrics; rail0 still UP."""
    table = run_cli(lab, d.host, d.grpc_ro_socket, "status", "rail0")
    assert table.returncode == 0, table.stderr  # UP: a job's word is no state change
    assert re.search(r"rail0 GRAY \(reported by jobs, state unchanged\): stalled for \d+ ms "
                     r"\(pid \d+ uid 0, conn [0-9a-f]{16}, primary path to 198\.18\.", table.stdout)
    events = run_cli(lab, d.host, d.grpc_ro_socket, "events", "--output", "json")
    notes = [e for e in map(json.loads, events.stdout.splitlines())
             if e["reason"] == "PLUGIN_VERDICT"]
    assert [(e["nic"], e["old_state"], e["new_state"]) for e in notes] == [
        ("rail0", "UP", "UP")], events.stdout
    scrape = http_get(lab, d.host, f"http://{METRICS}/metrics")
    assert re.search(r'linkguard_nic_plugin_gray_reporters\{device="rail0"\} 1\.0', scrape)
    assert re.search(r'linkguard_plugin_verdicts_total\{device="rail0",verdict="stalled"\} '
                     r'[1-9]', scrape)
    assert d.nic("rail0").state == NicState.UP


def test_a_lossy_link_the_job_leaves_is_shown_lossy(lab: Lab, daemons: Daemons) -> None:
    """rail0 drops 3 % of its frames (carrier up, the daemons see nothing): the sending plugin's
    goodput health leaves it and reports the NIC lossy, with the share it measured."""
    build_plugin()
    d = {h: daemons.start(lab, h, *DAEMON_ARGS) for h in ("a", "b")}
    pair = stream_pair(lab, d, 7310)
    try:
        poll(lambda: [ln for ln in pair.stderr_lines() if _PORTS.search(ln.text)], WAIT_S,
             "the connections to be up", interval_s=0.05)
        lab.lossy("a", 0, 3)
        try:
            reported = poll(lambda: {h: v for h in d for v in gray_nics(lab, d[h]).get(
                "rail0", []) if v["verdict"] == "lossy"}, WAIT_S, "rail0 reported lossy")
            assert lab.carrier("a", 0) and d["a"].nic("rail0").state == NicState.UP
        finally:
            lab.unlossy("a", 0)
        for verdict in reported.values():
            assert verdict["pid"] in {p.pid for p in pair.procs.values()}, verdict
            assert verdict["path"] == "primary" and verdict["loss_ppm"] >= 10000, verdict
    finally:
        for proc in pair.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)  # a clean end; only the processes we started
        pair.wait(timeout=60)
