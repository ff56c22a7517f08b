"""Operator surfaces against a live linkguardd in the lab: linkguard-cli over the gRPC socket,
a real Prometheus server scraping /metrics, and `promtool check metrics` on a live scrape.

The daemon is the installed entry point, started in lab host "a" by daemon_fixture (its own shm
file, API socket and config), with /metrics on the namespace's loopback; every client (CLI,
curl, Prometheus) runs inside the same namespace, as it would on the host. Faults come from the
lab. Every wait is bounded; nothing asserts on how long the machine took.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_fixture import Daemon, Daemons
from ops_helpers import (
    PROMETHEUS,
    PROMTOOL,
    LineReader,
    Prometheus,
    clean_env,
    cli_argv,
    describe,
    http_get,
    poll,
    run_cli,
    stop_pid,
)

from linkguard_lab.lab import Lab
from linkguardd.states import NicState

pytestmark = pytest.mark.lab

HOLD_DOWN_MS = 300
WAIT_S = 5.0  # anything event-driven (a transition takes well under 1 ms here)
METRICS = "127.0.0.1:9846"  # inside host a's namespace: nothing is exposed
PROM_WAIT_S = 30.0  # Prometheus start-up + a 1 s scrape interval, on a loaded machine
EXIT_OK, EXIT_NOT_UP, EXIT_UNREACHABLE, EXIT_REFUSED = 0, 1, 3, 6

_ROW = re.compile(r"^(?P<nic>rail\d+)\s+(?P<state>[A-Z]+)\s+(?P<reason>[a-z_]+)\s+"
                  r"(?P<backup>\S+)\s+(?P<carrier>yes|no|absent)\b")
_SEQ = re.compile(r"\s#(\d+)\s")  # an event line's sequence number


def start_daemon(lab: Lab, daemons: Daemons, metrics: bool = False) -> Daemon:
    args = ["--interfaces", "rail0,rail1", "--hold-down-ms", str(HOLD_DOWN_MS)]
    if metrics:
        args += ["--metrics-address", METRICS]  # after the fixture's "": the last one counts
    return daemons.start(lab, "a", *args)


def cli(lab: Lab, d: Daemon, *args: str, rc: int | None = EXIT_OK
        ) -> subprocess.CompletedProcess[str]:
    """linkguard-cli in host a against daemon `d`; asserts exit status `rc` (unless None)."""
    proc = run_cli(lab, d.host, d.grpc_socket, *args)
    if rc is not None:
        assert proc.returncode == rc, f"expected exit {rc}:\n{describe(proc)}"
    return proc


def table(text: str) -> dict[str, dict[str, str]]:
    """The rows of `status`' table: nic -> {state, reason, backup, carrier}."""
    rows = {m["nic"]: m.groupdict() for line in text.splitlines() if (m := _ROW.match(line))}
    assert rows, f"no NIC rows in:\n{text}"
    return rows


def status_json(lab: Lab, d: Daemon, rc: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(cli(lab, d, "status", "--json", rc=rc).stdout)
    return data


def nic_states(lab: Lab, d: Daemon) -> dict[str, str]:
    return {n["name"]: n["state"] for n in status_json(lab, d)["nics"]}


def scrape(lab: Lab, accept: str | None = None) -> str:
    return http_get(lab, "a", f"http://{METRICS}/metrics",
                    headers={"Accept": accept} if accept else None)


# ---- linkguard-cli ---------------------------------------------------------------------------
def test_cli_status_drain_undrain_events(lab: Lab, daemons: Daemons) -> None:
    d = start_daemon(lab, daemons)

    ok = cli(lab, d, "status", rc=EXIT_OK)
    assert f"pid {d.pid}" in ok.stdout.splitlines()[0]
    rows = table(ok.stdout)
    assert {n: (r["state"], r["carrier"]) for n, r in rows.items()} == {
        "rail0": ("UP", "yes"), "rail1": ("UP", "yes")}
    assert "not UP" not in ok.stdout

    lab.cut("a", 0)
    d.wait_state("rail0", NicState.DOWN, WAIT_S)
    down = cli(lab, d, "status", rc=EXIT_NOT_UP)
    rows = table(down.stdout)
    assert rows["rail0"]["state"] == "DOWN" and rows["rail0"]["reason"] == "carrier_lost"
    assert rows["rail0"]["carrier"] == "no" and rows["rail0"]["backup"] == "rail1"
    assert rows["rail1"]["state"] == "UP"
    assert "1 of 2 NICs not UP: rail0" in down.stdout
    # --json parses and agrees with the table (same exit status: scripts can use either)
    data = status_json(lab, d, rc=EXIT_NOT_UP)
    assert data["all_up"] is False and data["daemon"]["pid"] == d.pid
    nics = {n["name"]: n for n in data["nics"]}
    assert {n: v["state"] for n, v in nics.items()} == {n: r["state"] for n, r in rows.items()}
    assert (nics["rail0"]["reason"], nics["rail0"]["carrier"], nics["rail0"]["backup"]) == (
        "CARRIER_LOST", False, "rail1")
    assert nics["rail1"]["carrier"] is True

    # rail1's backup is down: the drain is refused (traffic would have nowhere to go) ...
    refused = cli(lab, d, "drain", "rail1", "--reason", "swap cable", rc=EXIT_REFUSED)
    assert "refusing to drain rail1: its backup rail0 is DOWN" in refused.stderr
    assert nic_states(lab, d)["rail1"] == "UP"
    # ... unless forced
    drained = cli(lab, d, "drain", "rail1", "--reason", "swap cable", "--force")
    assert drained.stdout.splitlines()[0] == "rail1: DRAINED; traffic moves to rail0"
    nics = {n["name"]: n for n in status_json(lab, d, rc=EXIT_NOT_UP)["nics"]}
    assert (nics["rail1"]["state"], nics["rail1"]["reason"], nics["rail1"]["drain_reason"]) == (
        "DRAINED", "OPERATOR_DRAIN", "swap cable")
    assert "rail1 drained: swap cable" in cli(lab, d, "status", rc=EXIT_NOT_UP).stdout
    # ... and what an NCCL process reads from the shared memory (the plugin's C reader)
    shm = {n["name"]: n for n in d.c_dump()["nics"]}
    assert (shm["rail1"]["state"], shm["rail1"]["state_code"]) == ("DRAINED", NicState.DRAINED)
    assert shm["rail1"]["state_code"] == 4 and shm["rail1"]["reason"] == "OPERATOR_DRAIN"
    assert shm["rail0"]["state"] == "DOWN"

    undrained = cli(lab, d, "undrain", "rail1")
    assert undrained.stdout.startswith("rail1: RECOVERING"), describe(undrained)
    poll(lambda: nic_states(lab, d).get("rail1") == "UP", HOLD_DOWN_MS / 1000 + WAIT_S,
         "rail1 UP after the hold-down")
    assert d.c_nics()["rail1"]["state"] == "UP"

    # events --since 0: every transition, oldest first, the operator's reason kept
    lines = cli(lab, d, "events", "--since", "0", "--json").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    steps = [(e["nic"], e["old_state"], e["new_state"], e["reason"]) for e in events]
    assert sorted(steps[:2]) == [("rail0", "UNKNOWN", "UP", "STARTUP"),
                                 ("rail1", "UNKNOWN", "UP", "STARTUP")]
    assert steps[2:] == [
        ("rail0", "UP", "DOWN", "CARRIER_LOST"),
        ("rail1", "UP", "DRAINED", "OPERATOR_DRAIN"),
        ("rail1", "DRAINED", "RECOVERING", "OPERATOR_UNDRAIN"),
        ("rail1", "RECOVERING", "UP", "HOLDDOWN_EXPIRED"),
    ], steps
    assert events[3]["detail"] == "swap cable"
    # the same history as text, in the same order
    text = cli(lab, d, "events", "--since", "0").stdout.splitlines()
    assert [int(m[1]) if (m := _SEQ.search(line)) else line for line in text] == seqs
    assert "rail1  UP -> DRAINED  operator_drain" in text[3] and "(swap cable)" in text[3]
    # --since skips what came before
    later = cli(lab, d, "events", "--since", str(seqs[3]), "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in later] == seqs[4:]


def test_cli_watch_sees_live_cut(lab: Lab, daemons: Daemons, tmp_path: Path,
                                 request: pytest.FixtureRequest) -> None:
    d = start_daemon(lab, daemons)
    head = max(e["seq"] for e in (json.loads(line) for line in cli(
        lab, d, "events", "--json").stdout.splitlines()))
    # --since HEAD: nothing between here and the subscription can be lost
    stderr_path = tmp_path / "watch.stderr"
    with stderr_path.open("w") as stderr:  # a file: nothing has to drain it
        proc = lab.popen("a", cli_argv(d.grpc_socket, "watch", "--json", "--count", "2",
                                       "--since", str(head)),
                         stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                         text=True, env=clean_env())
    request.addfinalizer(lambda: stop_pid(proc))
    out = LineReader(proc.stdout)  # type: ignore[arg-type]

    # A first event proves the stream is established (it arrives through the stream, after the
    # daemon subscribed it); the cut that follows can then only arrive live.
    cli(lab, d, "drain", "rail1", "--reason", "watch marker")
    marker = json.loads(out.next_line(WAIT_S + 10, "the drain event"))
    assert (marker["nic"], marker["new_state"], marker["seq"]) == ("rail1", "DRAINED", head + 1)

    lab.cut("a", 0)
    live = json.loads(out.next_line(WAIT_S, "a live event for the cut of rail0"))
    assert (live["nic"], live["old_state"], live["new_state"], live["reason"]) == (
        "rail0", "UP", "DOWN", "CARRIER_LOST")
    assert live["seq"] == head + 2 and live["detection_seconds"] > 0
    rc = proc.wait(timeout=WAIT_S)  # --count 2: it exits by itself
    assert rc == EXIT_OK, f"watch exited {rc}: {stderr_path.read_text()}"


def test_cli_dump_dom_and_unreachable(lab: Lab, daemons: Daemons, tmp_path: Path) -> None:
    d = start_daemon(lab, daemons)

    dump = json.loads(cli(lab, d, "dump").stdout)
    assert dump["settings"]["hold_down_ms"] == HOLD_DOWN_MS
    assert list(dump["settings"]["interfaces"]) == ["rail0", "rail1"]
    assert dump["settings"]["shm_path"] == str(d.shm_path)
    assert {n["name"]: n["state"] for n in dump["nics"]} == {"rail0": "UP", "rail1": "UP"}
    assert dump["backups"] == {"rail0": "rail1", "rail1": "rail0"}
    assert [e["seq"] for e in dump["events"]] == [1, 2]

    modules = json.loads(cli(lab, d, "dom", "--json").stdout)  # veth: no module cage
    assert [(m["nic"], m["status"]) for m in modules] == [("rail0", "no_module"),
                                                          ("rail1", "no_module")]

    # no such socket
    missing = tmp_path / "missing.sock"
    proc = run_cli(lab, "a", missing, "status")
    assert proc.returncode == EXIT_UNREACHABLE, describe(proc)
    assert f"cannot reach linkguardd at {missing}" in proc.stderr, describe(proc)
    assert "--socket PATH" in proc.stderr and proc.stdout == ""
    # a socket nobody serves (a daemon that was killed)
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(stale))
    proc = run_cli(lab, "a", stale, "status")
    assert proc.returncode == EXIT_UNREACHABLE, describe(proc)
    assert f"cannot reach linkguardd at {stale}" in proc.stderr, describe(proc)
    # a daemon that accepts nothing (stopped: a hung host): exit 3 within --timeout, not a hang
    os.kill(d.pid, signal.SIGSTOP)
    try:
        for args in (["status"], ["watch"]):
            proc = run_cli(lab, "a", d.grpc_socket, "--timeout", "1", *args)
            assert proc.returncode == EXIT_UNREACHABLE, describe(proc)
            assert f"cannot reach linkguardd at {d.grpc_socket}: no " in proc.stderr, \
                describe(proc)
    finally:
        os.kill(d.pid, signal.SIGCONT)
    # ... and it carries on afterwards, and still stops cleanly
    assert cli(lab, d, "status").returncode == EXIT_OK
    d.stop()


# ---- Prometheus ------------------------------------------------------------------------------
@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[list[Prometheus]]:
    """Prometheus servers a test started; stopped by PID at teardown (before the lab goes)."""
    if not Path(PROMETHEUS).exists():
        pytest.skip(f"{PROMETHEUS} missing (apt-get install prometheus)")
    started: list[Prometheus] = []
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def test_prometheus_sees_cut(lab: Lab, daemons: Daemons, tmp_path: Path,
                             prometheus_factory: list[Prometheus]) -> None:
    start_daemon(lab, daemons, metrics=True)
    prom = Prometheus(lab, "a", tmp_path / "prometheus", targets=[METRICS])
    prometheus_factory.append(prom)
    prom.start()

    query = 'linkguard_nic_state{device="rail0",linkguard_nic_state="down"}'

    def value() -> str | None:
        result = prom.query(query)
        assert len(result) <= 1, result
        return result[0]["value"][1] if result else None

    # scraped before the cut: the series exists and says "not down"
    assert poll(value, PROM_WAIT_S, f"{query} scraped") == "0", prom.targets_health()
    assert prom.targets_health() == [(f"http://{METRICS}/metrics", "up", "")]

    lab.cut("a", 0)
    poll(lambda: value() == "1", PROM_WAIT_S, f"{query} == 1 after the cut")
    # the whole state set agrees: exactly one state of rail0 is 1
    current = prom.query('linkguard_nic_state{device="rail0"} == 1')
    assert [r["metric"]["linkguard_nic_state"] for r in current] == ["down"], current
    assert prom.query('linkguard_nic_carrier{device="rail0"}')[0]["value"][1] == "0"


# ---- promtool --------------------------------------------------------------------------------
def test_promtool_check_metrics_live_scrape(lab: Lab, daemons: Daemons) -> None:
    if not Path(PROMTOOL).exists():
        pytest.skip(f"{PROMTOOL} missing (apt-get install prometheus)")
    d = start_daemon(lab, daemons, metrics=True)
    # a scrape with more than the start-up state in it: DOWN, DRAINED, a latency observed
    lab.cut("a", 0)
    d.wait_state("rail0", NicState.DOWN, WAIT_S)
    cli(lab, d, "drain", "rail1", "--reason", "promtool", "--force")  # its backup is DOWN

    body = scrape(lab)
    assert 'linkguard_nic_state{device="rail0",linkguard_nic_state="down"} 1.0' in body
    assert 'linkguard_nic_state{device="rail1",linkguard_nic_state="drained"} 1.0' in body
    assert "linkguard_detection_latency_seconds_count" in body
    # what Prometheus asks for first: the same data as OpenMetrics, terminated exactly once
    om = scrape(lab, accept="application/openmetrics-text; version=1.0.0")
    assert om.endswith("\n# EOF\n") and om.count("# EOF") == 1, om[-200:]
    assert 'linkguard_nic_state{device="rail0",linkguard_nic_state="down"} 1.0' in om
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                           text=True, timeout=30, check=False)
    assert (check.returncode, check.stdout, check.stderr) == (0, "", ""), describe(check)
