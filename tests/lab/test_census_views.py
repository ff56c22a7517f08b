"""Jobs' connection census (issue 29) through a live linkguardd in the lab: census datagrams
as a plugin sends them (a heartbeat thread stands in for the plugin's monitor: the real plugin's
test comes with it), a real cut of rail0, and what operators see: `linkguard-cli status`,
`jobs`, `drain --wait`, and /metrics. Every wait is bounded; nothing asserts on durations."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_fixture import Daemon, Daemons
from ops_helpers import clean_env, cli_argv, describe, http_get, poll, run_cli, stop_pid

from linkguard_lab.lab import Lab
from linkguardd.census import wire
from linkguardd.facts import NicCensus
from linkguardd.states import NicState

pytestmark = pytest.mark.lab

HOLD_DOWN_MS = 300
WAIT_S = 10.0
METRICS = "127.0.0.1:9846"  # inside host a's namespace
HEARTBEAT_S = 0.5  # the plugin sends one a second; twice as often keeps a loaded host safe
MAX_BEATS = 600  # bounds the sender: 5 minutes at most


class CensusSender:
    """Sends the census it is given to `path` now and every HEARTBEAT_S, from this process
    (alive, so the daemon keeps it), until stop(): what a plugin process does."""

    def __init__(self, path: Path, job: str) -> None:
        self.path, self.job = str(path), job
        self.seq = 0
        self._nics: tuple[NicCensus, ...] = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def set(self, *nics: NicCensus) -> int:
        """The new census, sent at once (F_CHANGE); its seq."""
        with self._lock:
            self._nics = nics
            return self._send(wire.F_CHANGE)

    def _send(self, flags: int) -> int:
        self.seq += 1
        self._sock.sendto(wire.encode(self._nics, job=self.job, seq=self.seq, flags=flags),
                          self.path)
        return self.seq

    def _beat(self) -> None:
        for _ in range(MAX_BEATS):
            if self._stop.wait(HEARTBEAT_S):
                return
            with self._lock:
                if self._nics:
                    self._send(0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        with self._lock:
            self._nics = ()
            self._send(wire.F_BYE)
        self._sock.close()


def cli(lab: Lab, d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(lab, d.host, d.grpc_socket, *args)


def traffic(lab: Lab, d: Daemon) -> dict[str, dict[str, Any]]:
    out = cli(lab, d, "status", "-o", "json")
    return {n["name"]: n["traffic"] for n in json.loads(out.stdout)["nics"]}


def test_status_jobs_metrics_and_drain_wait_follow_the_census(lab: Lab, daemons: Daemons) -> None:
    d = daemons.start(lab, "a", "--interfaces", "rail0,rail1", "--hold-down-ms",
                      str(HOLD_DOWN_MS), "--metrics-address", METRICS)
    sender = CensusSender(d.verdict_socket, job="4242")
    try:
        sender.set(NicCensus("rail0", primary=64), NicCensus("rail1", standing=64))
        poll(lambda: traffic(lab, d)["rail0"]["primary"] == 64, WAIT_S, "64 on rail0")

        lab.cut("a", 0)  # the plugin fails its connections over and says so
        d.wait_state("rail0", NicState.DOWN, WAIT_S)
        sender.set(NicCensus("rail0", away=64, failovers=64), NicCensus("rail1", backup=64))
        poll(lambda: traffic(lab, d)["rail1"]["backup"] == 64, WAIT_S, "64 on the backup")
        status = cli(lab, d, "status")
        assert status.returncode == 1, describe(status)
        assert "rail0 DOWN: no connection on it" in status.stdout
        jobs = cli(lab, d, "jobs", "-o", "json")
        (job,) = json.loads(jobs.stdout)
        assert (job["job"], job["connections"], job["on_backup"], job["failovers"]) == (
            "4242", 64, 64, 64), jobs.stdout
        scrape = http_get(lab, "a", f"http://{METRICS}/metrics")
        for line in ('linkguard_plugin_connections{device="rail0",role="away"} 64.0',
                     'linkguard_plugin_connections{device="rail1",role="backup"} 64.0',
                     'linkguard_plugin_failovers_total{device="rail0"} 64.0',
                     "linkguard_plugin_processes 1.0"):
            assert line in scrape, line

        lab.restore("a", 0)
        d.wait_state("rail0", NicState.UP, HOLD_DOWN_MS / 1000 + WAIT_S)
        # rail1 carries 64 on its backup path: draining it waits until they are back on rail0
        waiting = lab.popen("a", cli_argv(d.grpc_socket, "drain", "rail1", "--reason",
                                          "swap optic", "--wait", "--wait-timeout",
                                          str(WAIT_S * 3)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=clean_env())
        try:
            d.wait_state("rail1", NicState.DRAINED, WAIT_S)
            sender.set(NicCensus("rail0", primary=64, failovers=64, reintegrations=64),
                       NicCensus("rail1"))
            out, _ = waiting.communicate(timeout=WAIT_S * 4)
        finally:
            stop_pid(waiting)
        assert waiting.returncode == 0, out
        assert "rail1: 64 connections of 1 process will move to rail0" in out
        assert "rail1: no connection left on it after" in out
    finally:
        sender.stop()
    poll(lambda: "linkguard_plugin_processes 0.0" in http_get(lab, "a",
                                                             f"http://{METRICS}/metrics"),
         WAIT_S, "the process forgotten at its BYE")
