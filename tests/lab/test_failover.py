"""Lossless failover between two lab hosts: continuous traffic through the plugin while links
die, go silent, flap, are drained and come back.

linkguardd runs in both hosts (its shm file given to each driver as LINKGUARD_SHM, so the
devices come from its table: dev 0 = rail0 primary, rail1 backup). lg_nccl_driver runs in
stream mode (--duration-s, ended early with SIGUSR1 once the story is told), both directions
(--bidir: every fault is on the sender's side for one direction and on the receiver's side for
the other), two connections each way, every byte verified by the driver. A test passes only if
no plugin call returned an error and no message was lost, duplicated, reordered or corrupted;
the failover and the way back are read from the plugin's INFO lines (--verbose) and from the
NICs' own byte counters. Sized to keep the file under ~3 minutes.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_fixture import Daemon, Daemons, wait_for
from ops_helpers import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import (
    LGTCP_SO,
    DriverResult,
    StreamPair,
    build_plugin,
    lab_starter,
    start_stream_pair,
)
from linkguard_lab.lab import Lab
from linkguardd.states import NicState

pytestmark = pytest.mark.lab

HOLD_DOWN_MS = 300
DAEMON_ARGS = ("--interfaces", "rail0,rail1", "--hold-down-ms", str(HOLD_DOWN_MS))
CONNS = 2
# Per process: CONNS send and CONNS receive connections, all on dev 0.
PER_ROLE = 2 * CONNS
DEAD_TIMEOUT_MS = 3000
PLUGIN_ENV = {
    "LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0",  # only without a daemon
    "LINKGUARD_REJOIN_MS": "300",
    "LINKGUARD_REJOIN_TIMEOUT_MS": "1000",
    "LINKGUARD_DEAD_TIMEOUT_MS": str(DEAD_TIMEOUT_MS),
}
PROGRESS_MS = 200  # the drivers' completion counter, read by Run.finish
ARGS = ["--bidir", "--conns", str(CONNS), "--size", "262144", "--depth", "8", "--verbose",
        "--timestamps", "--gap-list-ms", "-1", "--progress-ms", str(PROGRESS_MS)]
# Every wait is on its condition (a log line, a byte counter, a state); the deadline only
# bounds a failure, so it is generous: a loaded 2-core machine takes seconds for what is
# milliseconds on an idle one. How fast is bench/failover_gap.py's business.
WAIT_S = 60.0
# Longer than any test here: the plugin's own silence detection (default 300 ms) stays out of
# a test whose switch must come from the daemon, however long a loaded machine stalls a peer.
NO_SILENCE_MS = 600000  # LINKGUARD_SILENT_TIMEOUT_MS' upper bound (params.def)
MIN_COMPLETIONS = 1000

_LINE = re.compile(r"(?P<kind>send|recv) conn (?P<id>[0-9a-f]+): (?P<what>failover|reintegrated|"
                   r"switched): .*?switch took (?P<ms>[\d.]+) ms")


# Every scenario runs twice: on linkguard's own TCP transport, and in wrap mode with the
# standalone build of that transport as the inner plugin (its own sockets, its own
# connect/accept, closed to fence a path), the way an RDMA plugin would be wrapped.
TRANSPORTS = {
    "native": {},
    "wrap": {"LINKGUARD_INNER": str(LGTCP_SO), "LGTCP_IFS": "rail0,rail1"},
}
_transport: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


@pytest.fixture(scope="module", autouse=True, params=list(TRANSPORTS))
def transport(request: pytest.FixtureRequest) -> str:
    _transport.clear()
    _transport.update(TRANSPORTS[request.param])
    return request.param


class Run:
    """Daemons in both hosts and a driver pair streaming between them."""

    def __init__(self, lab: Lab, daemons: Daemons, daemon_args: tuple[str, ...] = DAEMON_ARGS,
                 env: dict[str, str] | None = None, port: int = 7100,
                 server_dev: int = 0) -> None:
        self.lab = lab
        self.d = {h: daemons.start(lab, h, *daemon_args) for h in ("a", "b")}
        self.pair: StreamPair = start_stream_pair(
            lab_starter(lab, "b"), lab_starter(lab, "a"), f"{lab.mgmt_address('b')}:{port}",
            duration_s=600, args=ARGS, env={**PLUGIN_ENV, **_transport, **(env or {})},
            server_env={"LINKGUARD_SHM": str(self.d["b"].shm_path)},
            client_env={"LINKGUARD_SHM": str(self.d["a"].shm_path)}, timeout=630,
            server_args=["--dev", str(server_dev)])
        self.wait_traffic()

    # --- what the plugin said ----------------------------------------------------------
    def switches(self, what: str, since: int = 0) -> dict[str, list[float]]:
        """Switch lines of each role (server = host b, client = host a) read after `since`
        (monotonic ns): role -> the 'switch took' ms of each."""
        out: dict[str, list[float]] = {"server": [], "client": []}
        for ln in self.pair.stderr_lines():
            m = _LINE.search(ln.text)
            if m and m["what"] == what and ln.read_ns >= since:
                out[ln.role].append(float(m["ms"]))
        return out

    def wait_switches(self, what: str, since: int, n: int = PER_ROLE,
                      timeout_s: float = WAIT_S) -> dict[str, list[float]]:
        """Until every connection of both processes logged `what` after `since`."""
        def done() -> dict[str, list[float]] | None:
            got = self.switches(what, since)
            return got if all(len(v) >= n for v in got.values()) else None
        return self.wait(done, timeout_s, f"{n} '{what}' lines per process")

    def lines(self, pattern: str, since: int = 0) -> list[str]:
        rx = re.compile(pattern)
        return [ln.text for ln in self.pair.stderr_lines() if ln.read_ns >= since
                and rx.search(ln.text)]

    def wait(self, pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            got = pred()
            if got:
                return got
            if not self.pair.running():
                raise AssertionError(f"drivers ended while waiting for {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out ({timeout_s:g} s) waiting for {what}:\n"
                                     f"{self.tail()}")
            time.sleep(0.02)

    def tail(self, n: int = 120) -> str:
        return "\n".join(f"{ln.role}: {ln.text}" for ln in self.pair.stderr_lines()[-n:])

    # --- traffic -------------------------------------------------------------------------
    def wait_traffic(self, timeout_s: float = WAIT_S) -> None:
        """Connected, and messages completing."""
        self.wait(lambda: self.lab.tx_bytes("a", 0) > 20 << 20, timeout_s, "traffic on rail0")

    def carries(self, rail: int, seconds: float = 1.0, host: str = "a") -> tuple[int, int]:
        """Bytes `host` sent on `rail` and on the other rail during `seconds`."""
        other = 1 - rail
        before = self.lab.tx_bytes(host, rail), self.lab.tx_bytes(host, other)
        time.sleep(seconds)
        return self.lab.tx_bytes(host, rail) - before[0], self.lab.tx_bytes(host, other) - before[1]

    def assert_on(self, rail: int, timeout_s: float = WAIT_S, host: str = "a") -> None:
        """`host`'s traffic settles on `rail` (both directions switch; a loaded machine is
        slow)."""
        deadline = time.monotonic() + timeout_s
        on, off = self.carries(rail, host=host)
        while not (on > 1 << 20 and off < on / 20) and time.monotonic() < deadline:
            on, off = self.carries(rail, host=host)
        # Which rail carries the data, not how fast: a loaded 2-core machine may move little.
        assert on > 1 << 20 and off < on / 20, (host, rail, on, off, self.tail())

    def away_and_back(self, fault: Callable[[], Any], repair: Callable[[], Any]) -> None:
        """`fault` moves every connection to the backup rail, `repair` brings them back."""
        t = stamp()
        fault()
        self.wait_switches("failover", t)
        self.assert_on(1)
        t = stamp()
        repair()
        self.wait_switches("reintegrated", t)
        self.assert_on(0)

    def completions(self, role: str) -> int:
        """The completion counter of `role`'s last progress line (0 before the first)."""
        got = [ln.text for ln in self.pair.stderr_lines(role) if "lg_nccl_driver: progress " in
               ln.text]
        m = re.search(r" completions=(\d+)", got[-1]) if got else None
        return int(m[1]) if m else 0

    def finish(self, expect_error: bool = False,
               warn_ok: str | None = None) -> tuple[DriverResult, DriverResult]:
        """End both drivers early (SIGUSR1: a clean end) and check what they report: no
        WARN but those matching `warn_ok`."""
        if not expect_error:  # enough traffic to mean something, however slow the machine
            self.wait(lambda: all(self.completions(r) > MIN_COMPLETIONS
                                  for r in ("server", "client")),
                      WAIT_S, f"{MIN_COMPLETIONS} completions per driver")
        for proc in self.pair.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)  # only the processes this run started
        srv, cli = self.pair.wait(timeout=60)
        if not expect_error:
            for r in (srv, cli):
                rep = r.report
                assert r.ok, (rep.get("failure"), rep.get("errors"), r.stderr[-3000:])
                assert rep["errors"] == [] and rep["corrupt_messages"] == 0
                assert rep["missing_messages"] == 0 and rep["size_mismatches"] == 0
                assert rep["completions"] > MIN_COMPLETIONS
                warns = [ln for ln in r.stderr.splitlines() if "[plugin WARN" in ln
                         and not (warn_ok and re.search(warn_ok, ln))]
                assert not warns, (warns, r.stderr[-3000:])
        return srv, cli


def stamp() -> int:
    return time.monotonic_ns()


# ---- carrier loss, admin down, silent loss ---------------------------------------------------

@pytest.mark.parametrize("host", ["a", "b"], ids=["cut-client-side", "cut-server-side"])
def test_cut_then_restore(lab: Lab, daemons: Daemons, host: str, transport: str) -> None:
    """A switch-port cut on one host (sender's side for one direction, receiver's side for the
    other): the daemon that sees the carrier loss moves every connection; the restore brings
    them back. (Within milliseconds on an idle host: bench/failover_gap.py measures it.)"""
    run = Run(lab, daemons, env={"LINKGUARD_SILENT_TIMEOUT_MS": str(NO_SILENCE_MS)})
    t = stamp()
    lab.cut(host, 0)
    run.wait_switches("failover", t)
    run.assert_on(1)
    # Silence cannot have found it: a daemon did, ours or (in its heartbeat) the peer's.
    assert run.lines(r"failover: .*\((its )?daemon\)", t), run.lines(r"conn \w+: failover: ", t)
    t = stamp()
    lab.restore(host, 0)
    run.wait_switches("reintegrated", t)
    run.assert_on(0)
    if transport == "wrap":  # the backup left behind gets a fresh inner comm, on both sides
        run.wait(lambda: len(run.lines(r"backup path on NIC rail1 \(gen \d+\): inner 'lgtcp' "
                                       r"(send|recv) comm #1 ready", t)) >= 2 * PER_ROLE,
                 WAIT_S, "fresh inner comms on the backup paths")
    run.finish()


def test_cross_rail_cut_then_restore_on_a_routed_fabric(lab_factory, daemons: Daemons) -> None:
    """NCCL's cross-NIC rings on a fabric that routes between its rails (test_cross_rail.py):
    a's dev 0 (rail0, backup rail1) against b's dev 1 (rail1, backup rail0), so every path
    joins two rails through the switch's router. Cutting a's rail0 moves every connection onto
    the other pair of rails (a's rail1, b's rail0); the restore brings them back."""
    lab = lab_factory(routed=True)
    run = Run(lab, daemons, server_dev=1)
    run.assert_on(1, host="b")  # b's data leaves on its rail1, towards a's rail0
    t = stamp()
    lab.cut("a", 0)
    run.wait_switches("failover", t)
    run.assert_on(1)
    run.assert_on(0, host="b")
    t = stamp()
    lab.restore("a", 0)
    run.wait_switches("reintegrated", t)
    run.assert_on(0)
    run.assert_on(1, host="b")
    run.finish()


def test_nicdown_then_nicup(lab: Lab, daemons: Daemons) -> None:
    run = Run(lab, daemons)
    run.away_and_back(lambda: lab.nicdown("a", 0), lambda: lab.nicup("a", 0))
    run.finish()


def test_blackhole_is_found_by_silence(lab: Lab, daemons: Daemons) -> None:
    """Packets dropped, carrier up, no daemon event: the silent-path timeout finds it."""
    run = Run(lab, daemons)
    t = stamp()
    lab.blackhole("a", 0)
    run.wait_switches("failover", t)
    assert run.d["a"].nic("rail0").state == NicState.UP  # no daemon saw anything
    # Found by silence: the sender's own, or the receiver's, which it declares to the sender.
    assert run.lines(r"failover: .*(no data and no heartbeat for \d+ ms|declared failed by "
                     r"the peer)", t), run.lines(r"send conn .*failover: ", t)
    run.assert_on(1)
    t = stamp()
    lab.unblackhole("a", 0)
    run.wait_switches("reintegrated", t)  # rebuilt once packets pass again
    run.assert_on(0)
    run.finish()


def test_silent_standby_is_rebuilt(lab: Lab, daemons: Daemons) -> None:
    """The standby rail goes silent (blackholed, carrier up) while traffic runs on the
    primary: the standby is declared lost and rebuilt once packets pass again, without
    disturbing the traffic; then the primary's loss still fails over onto it."""
    run = Run(lab, daemons)
    t = stamp()
    lab.blackhole("a", 1)
    run.wait(lambda: len(run.lines(r"standby backup path on NIC rail1 .*lost \(standby: no "
                                   r"heartbeat for \d+ ms", t)) >= 1, WAIT_S,
             "a standby declared lost for silence")
    run.assert_on(0)
    assert not run.lines(r"failover: ", t)  # the data never moved
    t = stamp()
    lab.unblackhole("a", 1)
    run.wait(lambda: all(len([ln for ln in run.pair.stderr_lines() if ln.role == role and
                              ln.read_ns >= t and "backup path on NIC rail1 rebuilt" in ln.text])
                         >= PER_ROLE for role in ("server", "client")),
             WAIT_S, "every standby rebuilt")  # rebuild attempts back off while packets drop
    run.away_and_back(lambda: lab.cut("a", 0), lambda: lab.restore("a", 0))
    run.finish()


def test_flap_twenty_times(lab: Lab, daemons: Daemons) -> None:
    """20 quick flaps of a's rail0: damping keeps the NIC out while it flaps (traffic stays on
    the backup); once the penalty decays, traffic comes back. Nothing lost on the way."""
    damping = ("--flap-half-life-ms", "400", "--flap-penalty", "1000",
               "--flap-suppress-threshold", "2000", "--flap-reuse-threshold", "750",
               "--flap-max-penalty", "6000")
    run = Run(lab, daemons, daemon_args=DAEMON_ARGS + damping)
    t = stamp()
    lab.flap("a", 0, count=20, period_ms=250)  # closer bounces merge in link-watch under load
    run.wait(lambda: run.switches("failover", t)["client"], WAIT_S, "a failover off rail0")
    # Held out by damping: read from the daemon's log, not from the state after the flaps (the
    # penalty decays below reuse about a second after the last one, which a loaded machine can
    # sleep through).
    wait_for(lambda: [x for x in run.d["a"].transitions("rail0") if x["to"] == "DOWN" and
                      "suppressed for" in x.get("detail", "")], WAIT_S, "rail0 suppressed")
    run.d["a"].c_wait_state("rail0", NicState.UP, timeout_s=WAIT_S)
    # Counted since the first flap: one stamped after UP could miss a plugin quicker than this
    # process; an early one (a bounce that outlasted the hold-down) is caught by assert_on.
    run.wait_switches("reintegrated", t)
    run.assert_on(0)
    run.finish()


# ---- operator, daemon lifecycle ----------------------------------------------------------------

def test_drain_and_undrain_through_the_cli(lab: Lab, daemons: Daemons) -> None:
    """A drain is a graceful move: the sender stops at a message boundary and lets what is in
    flight land before switching, so nothing is sent twice (the drain's time bound is raised
    from its default, 100 ms, so that a loaded test machine cannot run out of it)."""
    run = Run(lab, daemons, env={"LINKGUARD_QUIESCE_MS": "3000"})
    da: Daemon = run.d["a"]
    t = stamp()
    proc = run_cli(lab, "a", da.grpc_socket, "drain", "rail0", "--reason", "lab test")
    assert proc.returncode == 0, proc.stderr
    run.wait_switches("failover", t)
    sends = run.lines(r"send conn \w+: failover: .*DRAINED", t)
    assert len(sends) >= CONNS, run.tail()
    assert all("replaying 0 message(s)" in s for s in sends), sends
    run.assert_on(1)
    t = stamp()
    proc = run_cli(lab, "a", da.grpc_socket, "undrain", "rail0")
    assert proc.returncode == 0, proc.stderr
    run.wait_switches("reintegrated", t)
    run.assert_on(0)
    run.finish()


def test_daemon_killed_and_restarted(lab: Lab, daemons: Daemons) -> None:
    """No daemon: the plugin says so once and fails over on its own (here: silence after a
    cut); a restarted daemon is picked up again and drives the way back."""
    run = Run(lab, daemons)
    da = run.d["a"]
    os.kill(da.pid, signal.SIGKILL)  # the daemon this test started, by PID
    assert da.proc is not None
    da.proc.wait(timeout=10)
    run.wait(lambda: run.lines(r"no daemon \(heartbeat stale\)"), WAIT_S, "the plugin's no-daemon line")
    t = stamp()
    lab.cut("a", 0)
    run.wait_switches("failover", t)
    run.assert_on(1)
    da.close_reader()
    da.start()  # same host, same shm path: replaces the stale file
    run.wait(lambda: run.lines(r"daemon found \(pid \d+\)", t), WAIT_S, "the plugin's daemon-found line")
    t = stamp()
    lab.restore("a", 0)
    run.wait_switches("reintegrated", t)
    run.assert_on(0)
    assert len(run.lines(r"no daemon \(")) <= 2  # said once per process, not per connection
    run.finish()


def test_backup_down_at_start_is_added_later(lab: Lab, daemons: Daemons) -> None:
    """A backup NIC that is down when the job connects: the connections start on their primary
    alone (a WARN says so), get their backup path as soon as the NIC is back, and from then on
    survive the loss of the primary."""
    lab.cut("a", 1)  # before any connection exists
    run = Run(lab, daemons, env={"LINKGUARD_BACKUP_GRACE_MS": "1000",
                                 "LINKGUARD_REJOIN_MAX_MS": "2000"})
    run.wait(lambda: len(run.lines(r"backup path via NIC rail1 .*runs unprotected")) >= PER_ROLE,
             10, "every connection starting unprotected")
    t = stamp()
    lab.restore("a", 1)
    run.wait(lambda: all(
        len([ln for ln in run.pair.stderr_lines() if ln.role == role and ln.read_ns >= t and
             "built after the start; the connection is protected" in ln.text]) >= PER_ROLE
        for role in ("server", "client")), WAIT_S, "every connection adding its backup path")
    run.away_and_back(lambda: lab.cut("a", 0), lambda: lab.restore("a", 0))
    run.finish(warn_ok=r"backup path via NIC rail1 .* unavailable")


# ---- nothing left -------------------------------------------------------------------------------

def test_both_rails_cut_is_a_clear_bounded_error(lab: Lab, daemons: Daemons) -> None:
    run = Run(lab, daemons)
    t = stamp()
    lab.cut("a", 0)
    lab.cut("a", 1)
    srv, cli = run.pair.wait(timeout=DEAD_TIMEOUT_MS / 1000 + 15)
    took = (time.monotonic_ns() - t) / 1e9
    assert took < DEAD_TIMEOUT_MS / 1000 + 7, took  # + detection, and slack for a loaded host
    # The first process whose plugin call fails tells the other over the management network,
    # which then stops too: at least one reports the plugin's error, neither reports success.
    errors = srv.report.get("errors", []) + cli.report.get("errors", [])
    assert errors, (srv.report, cli.report)
    assert all(e["call"] in ("test", "isend", "irecv") and e["code"] == 6 for e in errors), errors
    for r in (srv, cli):
        assert not r.ok and r.report.get("corrupt_messages", 0) == 0, r.report
    # The WARN names the connection and both NICs, with what became of each path.
    warn = [ln for r in (srv, cli) for ln in r.stderr.splitlines()
            if "WARN" in ln and "no working path for" in ln]
    assert warn, srv.stderr[-3000:] + cli.stderr[-3000:]
    assert re.search(r"(send|recv) conn [0-9a-f]+ on dev 0: no working path for \d+ ms", warn[0])
    assert "primary path on NIC rail0" in warn[0] and "backup path on NIC rail1" in warn[0]


def test_unprotected_connection_with_a_silent_peer_is_a_clear_error(lab: Lab,
                                                                    daemons: Daemons) -> None:
    """Issue #12: no backup path (LINKGUARD_BACKUP=0) and the one rail goes silent (blackholed,
    carrier up, so neither daemon sees anything): a clear error after the dead timeout, never
    a hang."""
    run = Run(lab, daemons, env={"LINKGUARD_BACKUP": "0"})
    lab.blackhole("a", 0)
    try:
        srv, cli = run.pair.wait(timeout=DEAD_TIMEOUT_MS / 1000 + 60)
    finally:
        lab.unblackhole("a", 0)
    errors = srv.report.get("errors", []) + cli.report.get("errors", [])
    assert errors, (srv.report, cli.report)
    assert all(e["call"] in ("test", "isend", "irecv") and e["code"] == 6 for e in errors), errors
    # Found by silence (nothing heard from the peer), by the sender's watchdog when data was in
    # flight (no TCP acknowledgement), by TCP_USER_TIMEOUT on a socket with unacknowledged
    # bytes (the same dead timeout), or in wrap mode by the inner transport's own: whichever
    # comes first, a WARN naming the path and that it had no backup.
    warn = [ln for r in (srv, cli) for ln in r.stderr.splitlines()
            if "[plugin WARN" in ln and "no backup path" in ln]
    assert warn, srv.stderr[-3000:] + cli.stderr[-3000:]
    assert "path on NIC rail0" in warn[0], warn[0]
    assert re.search(r"nothing heard from the peer for|stalled: |timed out|inner", warn[0]), \
        warn[0]


_PORTS = re.compile(r"send conn (?P<id>[0-9a-f]+) on dev 0: 2 path\(s\).*local ports: primary "
                    r"ctrl \d+ data (?P<data>[\d,]+)")


def test_one_stalled_stream_fails_over(lab: Lab, daemons: Daemons, transport: str) -> None:
    """Issue #12: one TCP flow of a connection stalls (nftables drops it at the switch, carrier
    up, every other flow and the control channel fine): the receiver's progress watchdog
    fails the path over, and the connection comes back after the stall ends. Wrap mode's data
    flows are the inner plugin's (docs/failover.md, "One stream stalled")."""
    if transport == "wrap":
        pytest.skip("the lab's inner plugin is lgtcp, whose own watchdog ends its stalled flow "
                    "first; wrap mode's watchdog is tested on a hung inner pair (test_wrap.c)")
    run = Run(lab, daemons)
    found = run.wait(lambda: [m for ln in run.lines("local ports", 0)
                              if (m := _PORTS.search(ln))], WAIT_S, "a send conn's local ports")
    conn, port = found[0]["id"], int(found[0]["data"].split(",")[0])
    t = stamp()
    lab.stall("a", 0, port)
    try:
        run.wait(lambda: run.lines(rf"send conn {conn}: failover: ", t), 10,
                 f"conn {conn} failing over from its stalled stream")
        # Found by the receiver's watchdog, or, on a machine too loaded for it to judge, by the
        # stalled socket's TCP_USER_TIMEOUT (the dead timeout): both are the stall's own.
        assert run.lines(r"stalled: (message #\d+ got no data|data stream \d+: no TCP "
                         r"acknowledgement)|Connection timed out", t), run.tail()
        assert lab.carrier("a", 0) and run.d["a"].nic("rail0").state == NicState.UP
    finally:
        lab.unstall("a", 0)
    run.wait(lambda: run.lines(rf"send conn {conn}: reintegrated: ", t), 15,
             f"conn {conn} back on rail0")
    run.finish(warn_ok=r"stalled")


# What each transport's goodput health calls a gray rail: the TCP transport reads its own data
# sockets' retransmissions (a policer drops what exceeds its rate, so it shows as loss too);
# wrap mode, whose flows are the inner plugin's, judges the completion rate against the path's
# own healthy baseline (docs/failover.md, "A lossy link").
VERDICT = {"native": "lossy", "wrap": "slow"}
VERDICT_LINE = {
    "native": r"path on NIC rail0 .* is lossy: \d+\.\d % of [\d.]+ MB sent were retransmitted",
    "wrap": r"path on NIC rail0 .* is slow: [\d.]+ MB/s completed while backlogged, under \d+ % "
            r"of its baseline of [\d.]+ MB/s",
}
# In wrap mode the inner plugin (lgtcp) has its own progress watchdog, and the faulty rail
# carries the paths' control sessions too: the inner plugin's error, the peer's word or silence
# may end the primary before the rate judge does. Any of them moves the traffic off the
# faulty primary, which is what is certain; which one wins is a figure of bench-gray.


def gray_away_and_back(run: Run, transport: str, fault: Callable[[], Any],
                       undo: Callable[[], Any]) -> None:
    """`fault` (carrier up, the daemons see nothing) moves a sender off rail0, on its goodput
    verdict (native: always; wrap mode: that or whichever of the path's other judges comes
    first); after `undo` and the hold, its traffic comes back; every byte verified."""
    verdict = VERDICT[transport]
    if verdict == "slow":  # held to its own baseline: every send connection learns one first
        def learnt() -> bool:
            roles = [ln.role for ln in run.pair.stderr_lines()
                     if re.search(r"send conn \w+: primary path on NIC rail0: healthy baseline",
                                  ln.text)]
            return all(roles.count(r) >= CONNS for r in ("server", "client"))
        run.wait(learnt, WAIT_S, "every send connection's baseline on rail0")
    reason = rf".*is {verdict} \(" if transport == "native" else ""
    t = stamp()
    fault()
    try:
        moved = run.wait(lambda: run.lines(
            rf"send conn \w+: failover: primary path on NIC rail0 -> {reason}", t),
            60, f"a connection leaving its faulty primary ({verdict}, or in wrap mode any)")
        by_verdict = [line for line in moved if re.search(rf"is {verdict} \(", line)]
        if by_verdict:
            assert run.lines(VERDICT_LINE[transport], t), run.tail()
        if verdict == "slow" and by_verdict:  # the rate, never a loss it did not measure
            assert re.search(r"is slow \([\d.]+ MB/s, \d+ % of its [\d.]+ MB/s baseline\)",
                             by_verdict[0]), by_verdict[0]
            assert "retransmitted" not in by_verdict[0], by_verdict[0]
        assert run.lab.carrier("a", 0) and run.d["a"].nic("rail0").state == NicState.UP
    finally:
        undo()
    conn = re.search(r"send conn (\w+):", moved[0])[1]

    def back_on_primary() -> bool:  # its last move, whenever it came, brought it home
        moves = run.lines(rf"send conn {conn}: (?:failover|reintegrated): ", t)
        return bool(moves) and "reintegrated: " in moves[-1]
    run.wait(back_on_primary, 60, f"conn {conn} back on rail0 once the fault ended")
    run.finish()


# Faults whose effect is certain on a loaded machine too. The TCP transport counts its own
# retransmissions, so 2 % loss is 2 % whatever the CPU does. Wrap mode judges the completion
# rate against a baseline the CPU may cap (160-180 MB/s per connection was seen under two busy
# loops), so its faults must collapse the rate, not dent it: 10 % loss, and a policer that
# leaves each of a direction's CONNS send connections well under 25 % of any such baseline.
# The spec's own figures (2 %, 100 MB/s) are measured by bench-gray.
LOSS_PCT = {"native": 2, "wrap": 10}
POLICED_RATE = {"native": "100MB", "wrap": "20MB"}


def test_lossy_primary_moves_to_the_backup_and_back(lab: Lab, daemons: Daemons,
                                                    transport: str) -> None:
    """Issue #12: rail0 drops LOSS_PCT of its frames at the switch: the sender's goodput
    health moves the traffic to rail1 (TCP retransmissions; in wrap mode, the inner plugin's
    completion rate collapsing against its baseline), every byte verified, and after the loss
    ends and the hold runs out the traffic comes back."""
    run = Run(lab, daemons, env={"LINKGUARD_GRAY_HOLD_MS": "1500"})
    gray_away_and_back(run, transport, lambda: lab.lossy("a", 0, LOSS_PCT[transport]),
                       lambda: lab.unlossy("a", 0))


def test_policed_primary_moves_to_the_backup_and_back(lab: Lab, daemons: Daemons,
                                                      transport: str) -> None:
    """Issue #12: rail0 policed to POLICED_RATE each way at the switch: the same, from the
    policer's drops (TCP transport) or from the rate the inner plugin still completes (wrap
    mode: the lab's inner plugin is lgtcp, whose sockets linkguard does not read)."""
    run = Run(lab, daemons, env={"LINKGUARD_GRAY_HOLD_MS": "1500"})
    gray_away_and_back(run, transport, lambda: lab.slow("a", 0, POLICED_RATE[transport]),
                       lambda: lab.unslow("a", 0))
