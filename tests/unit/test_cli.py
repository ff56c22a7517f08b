"""linkguard-cli against the real gRPC API over a FakeDaemon: a table of (argv -> exit status,
output fragment), the flows that need more than one call, and golden outputs."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result
from fake_daemon import IDENTITY, FakeDaemon, ServedFake, all_up_nics, short_socket_dir

from linkguard_cli import main as cli_main
from linkguard_cli.main import DEFAULT_RO_SOCKET, DEFAULT_SOCKET, cli
from linkguardd.settings import Settings
from linkguardd.states import NicState, Reason

WAIT_S = 30
Golden = Callable[[str, str], None]  # the `golden` fixture of tests/conftest.py


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event times print in local time; pin it so fragments and goldens are stable."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def served(fake: FakeDaemon) -> Iterator[ServedFake]:
    with ServedFake(fake) as s:
        yield s


def sockets(served: ServedFake) -> list[str]:
    return ["--socket", served.socket_path, "--ro-socket", served.ro_socket_path]


def run(served: ServedFake | None, *argv: str, color: bool = False,
        env: dict[str, str] | None = None) -> Result:
    args = [*sockets(served), *argv] if served else list(argv)
    return CliRunner().invoke(cli, args, color=color, env=env)


ROWS = [  # argv, exit status, fragment of the output (stdout and stderr)
    (["--version"], 0, "linkguard-cli 0.1.0"),
    (["status"], 1, "rail2  DOWN"),
    (["status"], 1, "2 of 3 NICs not UP: rail1, rail2"),
    (["status", "--json"], 1, '"all_up": false'),
    (["status", "-o", "json"], 1, '"all_up": false'),
    (["status", "-o", "wide"], 1, "FLAP PENALTY  SINCE"),
    (["status", "-o", "yaml"], 2, "Invalid value for '-o'"),
    (["status", "rail0"], 0, "rail0  UP"),
    (["status", "rail0", "rail2"], 1, "1 of 2 NICs not UP: rail2"),
    (["status", "eth9"], 2, "no NIC named 'eth9'; monitored NICs: rail0, rail1, rail2"),
    (["status", "-o", "json", "rail1"], 1, '"name": "rail1"'),
    (["status", "rail1"], 1, "symbol_error                3402        25.0/s  ! over its limit"),
    (["status", "-o", "json", "rail1"], 1, '"counters_over": [\n        "symbol_error"'),
    (["status", "rail2"], 1, "  rx_crc_errors     0\n"),  # not judged: no rate shown
    (["dom"], 0, "rail1: QSFP28 (SFF-8636), FS QSFP28-SR4-100G, serial FS2231A0043"),
    (["dom", "rail1"], 0, "0.0800 mW / -10.97 dBm ! low warning"),
    (["dom", "rail2"], 0, "rail2: no module"),
    (["dom", "--json", "rail2"], 0, '"status": "no_module"'),
    (["dom", "eth9"], 2, "no NIC named 'eth9'; monitored NICs: rail0, rail1, rail2"),
    (["drain", "rail0"], 2, "Missing option '--reason'"),
    (["drain", "eth9", "--reason", "x"], 2, "no NIC named 'eth9'"),
    (["drain", "rail0", "--reason", " "], 2, "a drain needs a reason"),
    (["drain", "rail0", "--reason", "a\x07b"], 2, "printable"),
    (["drain", "", "--reason", "x"], 2, "the NIC name is empty"),
    (["undrain"], 2, "Missing argument 'NIC'"),
    (["undrain", "eth9"], 2, "no NIC named 'eth9'"),
    (["events"], 0, "no events"),
    (["events", "--since", "-1"], 2, "Invalid value for '--since'"),
    (["events", "--since", "99"], 2, "there is no event #99 yet: the newest is #0"),
    (["watch", "--since", "99"], 2, "there is no event #99 yet"),
    (["watch", "--count", "0"], 2, "Invalid value for '--count'"),
    (["dump"], 0, '"grpc_socket": "/run/linkguard/linkguard.sock"'),
    (["health"], 0, "alive, heartbeat 42 ms ago"),  # NICs down do not make it unhealthy
    (["health", "--max-heartbeat-age", "-1"], 2, "Invalid value for '--max-heartbeat-age'"),
    (["frobnicate"], 2, "No such command 'frobnicate'"),
    (["--timeout", "0", "status"], 2, "Invalid value for '--timeout'"),
    (["--help"], 0, "drain"),
    (["drain", "rail0", "--reason", "swap optic"], 6,
     "refusing to drain rail0: its backup rail1 is DEGRADED (dom_warning)"),
    (["drain", "rail0", "--reason", "swap optic", "--force"], 0,
     "rail0: DRAINED; traffic moves to rail1"),
    (["drain", "rail2", "--reason", "swap optic"], 0, "rail2: DRAINED; traffic moves to rail0"),
    (["undrain", "rail1"], 0, "rail1: RECOVERING; UP again once the link has been healthy"),
    (["drain", "rail2", "--reason", "x"], 0, "rail2: no job's plugin reports a connection"),
    (["drain", "rail2", "--reason", "x", "--wait-timeout", "-1"], 2,
     "Invalid value for '--wait-timeout'"),
    (["--help"], 0, "8   drain --wait: connections still on the NIC at the timeout"),
    (["jobs"], 0, "no job's NCCL plugin reports its connections"),
    (["jobs", "-o", "json"], 0, "[]"),
    (["jobs", "-o", "yaml"], 2, "Invalid value for '-o'"),
]


@pytest.mark.parametrize("argv, status, fragment", ROWS, ids=[" ".join(r[0]) for r in ROWS])
def test_cli_table(served: ServedFake, argv: list[str], status: int, fragment: str) -> None:
    result = run(served, *argv)
    assert fragment in result.output, result.output
    assert result.exit_code == status, result.output


UNREACHABLE_ROWS = [
    (["status"], "no such socket"),
    (["dom", "rail0"], "no such socket"),
    (["drain", "rail0", "--reason", "x"], "no such socket"),
    (["watch"], "no such socket"),
    (["health"], "no such socket"),
]


@pytest.mark.parametrize("argv, why", UNREACHABLE_ROWS, ids=[r[0][0] for r in UNREACHABLE_ROWS])
def test_unreachable_daemon_is_exit_3_with_what_to_try(argv: list[str], why: str) -> None:
    path = os.path.join(short_socket_dir(), "absent.sock")
    result = run(None, "--socket", path, *argv)
    assert result.exit_code == 3
    assert f"cannot reach linkguardd at {path}: {why}" in result.output
    assert "systemctl status linkguardd" in result.output and "ls -l" in result.output


def test_a_socket_nobody_serves_is_exit_3() -> None:
    path = os.path.join(short_socket_dir(), "stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)  # a file left by a killed daemon: connect() is refused
    result = run(None, "--socket", path, "--timeout", "2", "status")
    assert result.exit_code == 3 and f"cannot reach linkguardd at {path}" in result.output


def test_socket_from_the_environment(served: ServedFake) -> None:
    result = CliRunner().invoke(cli, ["status"], env={"LINKGUARD_SOCKET": served.socket_path})
    assert result.exit_code == 1 and "rail0" in result.output


def test_default_sockets_are_the_daemons() -> None:
    assert (Settings().grpc_socket, Settings().grpc_ro_socket) == (DEFAULT_SOCKET,
                                                                   DEFAULT_RO_SOCKET)


def test_reads_use_the_read_only_socket_and_drains_the_admin_one(served: ServedFake) -> None:
    absent = os.path.join(short_socket_dir(), "absent.sock")
    reads = CliRunner().invoke(cli, ["--socket", absent, "--ro-socket", served.ro_socket_path,
                                     "status"])
    assert reads.exit_code == 1 and "rail0" in reads.output
    drains = CliRunner().invoke(cli, ["--socket", absent, "--ro-socket", served.ro_socket_path,
                                      "drain", "rail2", "--reason", "x"])
    assert drains.exit_code == 3 and f"cannot reach linkguardd at {absent}" in drains.output


def test_the_admin_socket_serves_reads_when_the_read_only_one_is_unusable(
        served: ServedFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "DEFAULT_RO_SOCKET", "/nonexistent/linkguard-ro.sock")
    ctx = cli.make_context("linkguard-cli", ["--socket", served.socket_path, "status"])
    assert cli_main.read_socket(ctx, served.socket_path, "/nonexistent/ro.sock") == \
        served.socket_path  # an explicit --socket serves everything
    ctx = cli.make_context("linkguard-cli", ["status"])
    assert cli_main.read_socket(ctx, served.socket_path, "/nonexistent/ro.sock") == \
        served.socket_path  # an admin outside the reader group still reads
    assert cli_main.read_socket(ctx, served.socket_path, served.ro_socket_path) == \
        served.ro_socket_path


def test_a_drain_on_the_read_only_socket_is_exit_4(fake: FakeDaemon, served: ServedFake) -> None:
    result = CliRunner().invoke(cli, ["--socket", served.ro_socket_path, "drain", "rail2",
                                      "--reason", "x"])
    assert result.exit_code == 4 and "not served on the read-only socket" in result.output
    assert fake.nic("rail2").state == NicState.DOWN


# --- exit statuses through the real entry point (run() is what the console script calls) -------
def test_a_crash_of_the_cli_is_never_exit_1(served: ServedFake, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("a bug")

    assert cli_main.run([*sockets(served), "status"]) == 1  # a NIC is down: 1
    monkeypatch.setattr(cli_main.render, "status_table", broken)
    assert cli_main.run([*sockets(served), "status"]) == 70
    err = capsys.readouterr().err
    assert "internal error (ValueError: a bug)" in err and "not a NIC state" in err
    assert "Traceback" in err


def test_entry_point_exit_statuses(served: ServedFake, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = os.path.join(short_socket_dir(), "absent.sock")
    assert cli_main.run(["--socket", absent, "status"]) == 3
    assert cli_main.run([*sockets(served), "status", "--bogus"]) == 2
    assert cli_main.run([*sockets(served), "dom", "rail0"]) == 0
    assert cli_main.run(["--version"]) == 0

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main.Client, "status", interrupted)
    assert cli_main.run([*sockets(served), "status"]) == 130


def test_shell_completion_offers_the_daemons_nic_names(served: ServedFake) -> None:
    env = {"_LINKGUARD_CLI_COMPLETE": "bash_complete", "COMP_CWORD": "4",
           "COMP_WORDS": f"linkguard-cli --ro-socket {served.ro_socket_path} drain ra"}
    result = CliRunner().invoke(cli, [], prog_name="linkguard-cli", env=env)
    assert result.output.split() == ["plain,rail0", "plain,rail1", "plain,rail2"]
    env["COMP_WORDS"] = "linkguard-cli --ro-socket /nonexistent.sock status r"
    env["COMP_CWORD"] = "4"
    assert CliRunner().invoke(cli, [], prog_name="linkguard-cli", env=env).output.split() == []


def test_a_stale_heartbeat_is_called_out(fake: FakeDaemon, served: ServedFake) -> None:
    fake.heartbeat_age = 5.0
    assert "heartbeat 5000 ms ago STALE" in run(served, "status").output


def test_health_is_5_when_the_heartbeat_is_stale(fake: FakeDaemon, served: ServedFake) -> None:
    fake.heartbeat_age = 1.5
    result = run(served, "health")
    assert result.exit_code == 5
    assert "heartbeat 1.500 s old (limit 1 s): its loop is stalled" in result.output
    assert run(served, "health", "--max-heartbeat-age", "2").exit_code == 0


def test_status_is_0_when_every_nic_is_up() -> None:
    with ServedFake(FakeDaemon(all_up_nics())) as served:
        result = run(served, "status")
    assert result.exit_code == 0, result.output
    assert "not UP" not in result.output


def test_status_turns_1_when_a_nic_goes_down() -> None:
    fake = FakeDaemon(all_up_nics())
    with ServedFake(fake) as served:
        assert run(served, "status").exit_code == 0
        fake.inject_down("rail1")
        result = run(served, "status")
    assert result.exit_code == 1 and "1 of 3 NICs not UP: rail1" in result.output


def test_drain_then_status_shows_drained_and_undrain_recovers(fake: FakeDaemon,
                                                             served: ServedFake) -> None:
    result = run(served, "drain", "rail1", "--reason", "swap optic, ticket 1234")
    assert result.exit_code == 0 and "undo with: linkguard-cli undrain rail1" in result.output
    assert fake.nic("rail1").state == NicState.DRAINED
    status = run(served, "status")
    assert "rail1  DRAINED" in status.output
    assert "rail1 drained: swap optic, ticket 1234" in status.output
    result = run(served, "undrain", "rail1")
    assert result.exit_code == 0 and "rail1: RECOVERING" in result.output
    events = run(served, "events")
    assert "#1  rail1  DEGRADED -> DRAINED  operator_drain  (swap optic, ticket 1234)" in \
        events.output
    assert "#2  rail1  DRAINED -> RECOVERING  operator_undrain" in events.output


def test_events_since_and_json(fake: FakeDaemon, served: ServedFake) -> None:
    fake.inject_down("rail0")
    fake.inject_up("rail0")
    result = run(served, "events", "--since", "1")
    assert result.exit_code == 0
    assert result.output == ("2023-11-15T00:13:22.000+00:00  #2  rail0  DOWN -> UP  "
                             "holddown_expired\n")
    result = run(served, "events", "--json", "--limit", "1")
    assert '"seq": 2' in result.output and '"new_state": "UP"' in result.output


def test_events_reports_history_lost(fake: FakeDaemon, served: ServedFake) -> None:
    for _ in range(3):
        fake.inject_down("rail0")
    fake.forget_history_through(2)
    result = run(served, "events", "--since", "1")
    assert "1 events after #1 are no longer in the daemon's history" in result.output
    assert "#3  rail0" in result.output


class CliThread:
    """`linkguard-cli watch` runs until events or the daemon end it: run it on a thread."""

    def __init__(self, served: ServedFake, *argv: str) -> None:
        self.result: Result | None = None
        self.thread = threading.Thread(target=self._run, args=(served, argv), daemon=True)
        self.thread.start()

    def _run(self, served: ServedFake, argv: tuple[str, ...]) -> None:
        self.result = run(served, *argv)

    def join(self) -> Result:
        self.thread.join(WAIT_S)
        assert self.result is not None, "the command did not end"
        return self.result


def wait_for_subscriber(fake: FakeDaemon) -> None:
    ready = threading.Event()
    for _ in range(WAIT_S * 100):
        if fake.subscriber_count():
            return
        ready.wait(0.01)
    pytest.fail("watch never subscribed")


def test_watch_replays_history_then_prints_live_events(fake: FakeDaemon,
                                                       served: ServedFake) -> None:
    fake.inject_down("rail0", detection_ns=412_000)
    fake.inject_up("rail0")
    watch = CliThread(served, "watch", "--since", "0", "--count", "3")
    wait_for_subscriber(fake)
    fake.inject_down("rail1", detection_ns=95_000)
    result = watch.join()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split("  ")[1] for line in lines] == ["#1", "#2", "#3"]
    assert lines[0].endswith("rail0  UP -> DOWN  carrier_lost  detected in 412 µs")
    assert lines[2].endswith("rail1  DEGRADED -> DOWN  carrier_lost  detected in 95 µs")


def test_watch_says_how_to_resume_when_the_daemon_stops(fake: FakeDaemon) -> None:
    served = ServedFake(fake).__enter__()
    try:
        fake.inject_down("rail0")
        watch = CliThread(served, "watch", "--since", "0", "--json")
        wait_for_subscriber(fake)
        served.stop_server(grace=0.1)
        result = watch.join()
    finally:
        served.__exit__(None, None, None)
    assert result.exit_code == 3
    assert "linkguardd closed the stream; resume with `linkguard-cli watch --since" in \
        result.output


def test_watch_resumes_by_itself_when_its_reader_fell_behind(
        fake: FakeDaemon, served: ServedFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30, finding 3: whatever reads our output stalls, the daemon cuts the stream off
    (RESOURCE_EXHAUSTED), and watch picks up after the last event it printed: every event
    once, in order."""
    printing, release = threading.Event(), threading.Event()
    printed: list[int] = []

    def slow_print(event: object, output: str) -> None:
        printing.set()
        release.wait(WAIT_S)  # the first print blocks, as on a full pipe
        printed.append(event.seq)  # type: ignore[attr-defined]

    monkeypatch.setattr(cli_main, "_print_event", slow_print)
    fake.inject_down("rail0")
    watch = CliThread(served, "watch", "--since", "0")
    assert printing.wait(WAIT_S)
    total = 1
    while fake.subscriber_count() and total < 50 * 1024:  # until the daemon cuts it off
        total = fake.inject_down("rail0").seq
    assert not fake.subscriber_count(), f"not cut off after {total} unread events"
    release.set()
    pause = threading.Event()  # never set: a bounded poll
    for _ in range(WAIT_S * 100):
        if len(printed) >= total:
            break
        pause.wait(0.01)
    served.stop_server(grace=0.1)  # ends the watch (exit 3, "resume with")
    result = watch.join()
    assert "fell behind the daemon's events; resuming after #" in result.output, result.output
    assert printed == list(range(1, total + 1))


def test_colour_only_on_a_terminal(served: ServedFake) -> None:
    assert "\x1b[" not in run(served, "status").output
    assert "\x1b[32m" in run(served, "status", color=True).output  # UP in green
    no_color = run(served, "status", color=True, env={"NO_COLOR": "1"})
    assert "\x1b[" not in no_color.output


# --- golden outputs (pytest --update-golden rewrites them) ---------------------------------------
def test_golden_status_table(served: ServedFake, golden: Golden) -> None:
    golden("status.txt", run(served, "status").output)


def test_golden_status_wide(served: ServedFake, golden: Golden) -> None:
    golden("status-wide.txt", run(served, "status", "-o", "wide").output)


def test_golden_status_of_one_nic(served: ServedFake, golden: Golden) -> None:
    golden("status-nic.txt", run(served, "status", "rail1").output)


def test_golden_status_json(served: ServedFake, golden: Golden) -> None:
    golden("status.json", run(served, "status", "--json").output)


def test_golden_dom(served: ServedFake, golden: Golden) -> None:
    golden("dom.txt", run(served, "dom").output)


# --- a daemon's answers are not trusted (issue 30, finding 7) ---------------------------------
ESC = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"  # OSC 52 (clipboard), then clear the screen


def test_escape_sequences_from_the_daemon_never_reach_the_terminal(fake: FakeDaemon) -> None:
    nics = [dataclasses.replace(n, name=n.name + ("\x1b[1m" if n.name == "rail2" else ""),
                                drain_reason="swap" + ESC, state=NicState.DRAINED)
            for n in fake.nics()]
    hostile = FakeDaemon(nics)
    hostile.inject_state(nics[0].name, NicState.DOWN, Reason.CARRIER_LOST, "cut" + ESC)
    identity = dataclasses.replace(IDENTITY, hostname="node" + ESC, version="1" + ESC)
    with ServedFake(hostile, identity=identity) as served:
        outputs = {" ".join(argv): run(served, *argv).output for argv in (
            ["status"], ["status", "-o", "wide"], ["status", "rail0"], ["events"],
            ["events", "-o", "wide"], ["status", "--json"], ["events", "-o", "json"], ["dump"],
            ["status", "nope"])}
    for argv, output in outputs.items():
        assert "\x1b" not in output and "\x07" not in output, (argv, output)
    assert "swap\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J" in outputs["status rail0"]
    assert "rail2\\x1b[1m" in outputs["status"] and "cut\\x1b]52" in outputs["events"]


@pytest.mark.parametrize("age", [math.nan, -0.5, math.inf])
def test_a_nonsense_heartbeat_age_is_stale_not_alive(fake: FakeDaemon, served: ServedFake,
                                                     age: float) -> None:
    fake.heartbeat_age = age
    result = run(served, "health")
    assert result.exit_code == 5 and "alive" not in result.output, result.output


def test_no_nics_is_its_own_exit_status() -> None:
    empty = FakeDaemon()
    empty._nics.clear()  # a daemon configured with no NIC, or whose NICs all vanished
    with ServedFake(empty) as served:
        result = run(served, "status")
        as_json = run(served, "status", "--json")
    assert result.exit_code == as_json.exit_code == 7, result.output
    assert "monitors no NIC" in result.output


def test_an_event_without_a_real_time_is_printed_not_a_crash(fake: FakeDaemon,
                                                             served: ServedFake) -> None:
    for when in (math.nan, math.inf, 1e300):
        event = fake.inject_down("rail0")
        fake._history[-1] = dataclasses.replace(event, time_unix=when)
    table, as_json = run(served, "events"), run(served, "events", "-o", "json")
    assert table.exit_code == as_json.exit_code == 0, table.output + as_json.output
    assert "(invalid time nan)" in table.output and "(invalid time inf)" in table.output
    assert [json.loads(line)["time_unix"] for line in as_json.output.splitlines()] == [
        None, None, 1e300]
