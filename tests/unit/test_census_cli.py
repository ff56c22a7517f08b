"""The connection census (issue 29) as operators see it, against a real daemon in this process:
the Engine with the real plugin socket monitor and the real gRPC API (what linkguardd's main
wires; links are LinkFacts, not netlink), census datagrams sent from a real unix socket, and
linkguard-cli `status`, `jobs`, `drain` and `drain --wait` (a subprocess for --wait)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Self

import pytest
from click.testing import CliRunner, Result
from fake_daemon import short_socket_dir

from linkguard_cli.main import cli
from linkguardd.api import ApiServer
from linkguardd.census import wire
from linkguardd.core import Core, build_core
from linkguardd.facts import LinkFact, NicCensus
from linkguardd.monitors.plugin_verdicts import PluginVerdictMonitor
from linkguardd.settings import Settings
from linkguardd.states import NicState

WAIT_S = 30
NICS = ("rail0", "rail1")
PAIRS = {"rail0": "rail1", "rail1": "rail0"}
EXIT_NOT_EMPTY = 8


class RealDaemon:
    """`with RealDaemon() as d:` the engine, the verdict/census socket (d.plugin_socket) and
    the API (d.socket_path), on an event loop in a thread; both NICs UP."""

    def __init__(self) -> None:
        directory = short_socket_dir()
        self.plugin_socket = os.path.join(directory, "verdict.sock")
        self.socket_path = os.path.join(directory, "linkguard.sock")
        self.settings = Settings(interfaces=NICS, shm_path=os.path.join(directory, "shm"),
                                 state_dir="", sysfs_root=directory, metrics_address="",
                                 hold_down_ms=0, plugin_verdict_socket=self.plugin_socket)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.core: Core | None = None
        self.api: ApiServer | None = None

    def run(self, make: Callable[[], Any]) -> Any:
        """Run `make()` (a coroutine, or a plain call) on the daemon's loop; its result."""
        async def call() -> Any:
            out = make()
            return await out if asyncio.iscoroutine(out) else out

        future: Future[Any] = asyncio.run_coroutine_threadsafe(call(), self._loop)
        return future.result(timeout=WAIT_S)

    def __enter__(self) -> Self:
        self._thread.start()

        async def start() -> None:
            self.core = build_core(self.settings, list(NICS), PAIRS,
                                   [PluginVerdictMonitor(self.plugin_socket, NICS)])
            engine = self.core.engine
            await engine.start()
            for nic in NICS:
                engine.on_fact(LinkFact(nic, engine.clock(), admin_up=True,
                                        carrier=True, operstate="UP"), "netlink")
            self.api = ApiServer(self.core.view, self.socket_path)
            await self.api.start()

        self.run(start)
        self.wait_for(lambda c: all(c.view.nic(n).state == NicState.UP for n in NICS),
                      "both UP")
        return self

    def wait_for(self, condition: Callable[[Core], bool], what: str) -> None:
        ready = threading.Event()
        for _ in range(WAIT_S * 100):
            if self.run(lambda: condition(self.core)):  # type: ignore[arg-type]
                return
            ready.wait(0.01)
        pytest.fail(f"the daemon never got {what}")

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self.api is not None:
                await self.api.stop(grace=0)
            if self.core is not None:
                await self.core.engine.stop()

        self.run(stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=WAIT_S)
        self._loop.close()

    def send(self, *nics: NicCensus, **header: Any) -> None:
        """One census datagram from this process, as its plugin would send it."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
            tx.sendto(wire.encode(nics, **header), self.plugin_socket)

    def census_taken(self, seq: int) -> None:
        """Wait until the daemon has read the report numbered `seq` (the monitor's loop)."""
        self.wait_for(lambda c: any(p.seq >= seq
                                    for p in c.engine.census.processes(c.engine.clock())),
                      f"census report #{seq}")

    def cli(self, *argv: str) -> Result:
        return CliRunner().invoke(cli, ["--socket", self.socket_path, *argv])


@pytest.fixture
def daemon() -> Iterator[RealDaemon]:
    with RealDaemon() as d:
        yield d


ON_RAIL0 = (NicCensus("rail0", primary=64, failovers=0), NicCensus("rail1", standing=64))
MOVED = (NicCensus("rail0", away=64, failovers=64), NicCensus("rail1", backup=64))


def test_status_shows_each_nics_connections_and_what_is_left_on_a_drained_one(
        daemon: RealDaemon) -> None:
    assert "TRAFFIC" not in daemon.cli("status").output  # no census: no table
    daemon.send(*ON_RAIL0, job="4242", seq=1)
    daemon.census_taken(1)
    result = daemon.cli("status")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = lines.index("TRAFFIC  PROCESSES  PRIMARY  BACKUP  AWAY  STANDING")
    assert lines[head + 1:head + 3] == ["rail0            1       64       0     0         0",
                                        "rail1            1        0       0     0        64"]
    drained = daemon.cli("drain", "rail0", "--reason", "swap optic")
    assert drained.exit_code == 0, drained.output
    assert "rail0: 64 connections of 1 process will move to rail1" in drained.output
    assert "rail0 DRAINED: 64 connections of 1 process still on it" in daemon.cli("status").output
    daemon.send(*MOVED, job="4242", seq=2)
    daemon.census_taken(2)
    result = daemon.cli("status", "-o", "json")
    assert result.exit_code == 1 and "rail0 DRAINED: no connection on it" in \
        daemon.cli("status").output
    traffic = {n["name"]: n["traffic"] for n in json.loads(result.output)["nics"]}
    assert traffic["rail0"] == {"processes": 1, "primary": 0, "backup": 0, "away": 64,
                                "standing": 0, "silent": 0, "failovers": 64,
                                "reintegrations": 0, "failures": {
                                    "no_path": 0, "other": 0, "peer": 0, "timeout": 0}}
    assert traffic["rail1"]["backup"] == 64


def test_jobs_lists_each_job_and_each_process_without_one(daemon: RealDaemon) -> None:
    assert "no job's NCCL plugin reports" in daemon.cli("jobs").output
    daemon.send(*MOVED, job="4242", seq=1)
    daemon.send(NicCensus("rail1", primary=2), seq=1, instance=2)  # pid 0 would key by it
    daemon.census_taken(1)
    result = daemon.cli("jobs")
    assert result.exit_code == 0, result.output
    # both reports come from this process: the second (another instance) replaced the first
    lines = result.output.splitlines()
    assert lines[0].split() == ["JOB", "UIDS", "PROCESSES", "NICS", "CONNECTIONS", "ON",
                                "BACKUP", "FAILOVERS", "FAILURES", "LAST", "REPORT"]
    assert lines[1].split()[:8] == ["pid", str(os.getpid()), str(os.getuid()), "1", "rail1",
                                    "2", "0", "0"]
    daemon.send(*MOVED, job="4242", seq=2, instance=2)
    daemon.census_taken(2)
    (job,) = json.loads(daemon.cli("jobs", "-o", "json").output)
    assert job["job"] == "4242" and job["pids"] == [os.getpid()] and job["on_backup"] == 64
    assert job["failovers"] == 64 and [n["nic"] for n in job["nics"]] == ["rail0", "rail1"]
    assert "1 of 1 jobs have connections on the backup" in daemon.cli("jobs").output


def cli_process(daemon: RealDaemon, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "linkguard_cli.main", "--socket",
                             daemon.socket_path, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_drain_wait_returns_once_the_plugins_report_the_nic_empty(daemon: RealDaemon) -> None:
    daemon.send(*ON_RAIL0, job="4242", seq=1)
    daemon.census_taken(1)
    waiting = cli_process(daemon, "drain", "rail0", "--reason", "swap optic", "--wait",
                          "--wait-timeout", str(WAIT_S))
    try:
        daemon.wait_for(lambda c: c.view.nic("rail0").state == NicState.DRAINED,
                        "rail0 drained")
        daemon.send(*MOVED, job="4242", seq=2)  # what the plugin reports once it moved
        out, _ = waiting.communicate(timeout=WAIT_S)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, out
    assert "rail0: 64 connections of 1 process will move to rail1" in out
    assert "rail0: no connection left on it after" in out


def test_drain_wait_times_out_saying_how_many_remain(daemon: RealDaemon) -> None:
    daemon.send(NicCensus("rail0", primary=60, backup=3), job="4242", seq=1)
    daemon.census_taken(1)
    result = daemon.cli("drain", "rail0", "--reason", "swap optic", "--wait",
                        "--wait-timeout", "0")
    assert result.exit_code == EXIT_NOT_EMPTY, result.output
    assert "rail0: 63 connections of 1 process still on it after" in result.output
    assert "`linkguard-cli jobs` names the jobs" in result.output


def test_drain_without_any_census_says_so_and_wait_returns_at_once(daemon: RealDaemon) -> None:
    result = daemon.cli("drain", "rail1", "--reason", "swap optic", "--wait")
    assert result.exit_code == 0, result.output
    assert "rail1: no job's plugin reports a connection on it" in result.output
    assert "rail1: no connection left on it after" in result.output
