"""Helpers for the operator-surface lab tests: linkguard-cli and HTTP clients run inside a lab
host, a line reader for long-running commands, and a Prometheus server in a host's namespace.

Everything that waits is bounded; every process started here is stopped by its PID.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from linkguard_lab.lab import Lab

LINKGUARD_CLI = Path(sys.executable).parent / "linkguard-cli"  # the installed entry point
PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package
PROMTOOL = "/usr/bin/promtool"
CLI_TIMEOUT_S = 30.0  # one CLI run: python start-up + one RPC; generous for loaded CI
STOP_TIMEOUT_S = 10.0


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without LINKGUARD* (a developer's LINKGUARD_SOCKET must not change which
    daemon the CLI talks to), without colour, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINKGUARD")}
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def poll(pred: Callable[[], Any], timeout_s: float, what: str,
         interval_s: float = 0.2) -> Any:
    """Call `pred` until it returns something truthy (returned); AssertionError on timeout.
    The last value is in the message, so a failure says what was seen instead."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; "
                                 f"last seen: {last!r}")
        time.sleep(interval_s)


def cli_argv(socket_path: Path | str, *args: str) -> list[str]:
    return [str(LINKGUARD_CLI), "--socket", str(socket_path), *args]


def run_cli(lab: Lab, host: str, socket_path: Path | str, *args: str,
            timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """linkguard-cli --socket PATH ARGS inside `host`'s network namespace, as an operator on
    that host runs it."""
    return lab.run(host, cli_argv(socket_path, *args), timeout=timeout_s, env=clean_env())


@contextlib.contextmanager
def open_files(wanted: int) -> Iterator[None]:
    """This test process may hold `wanted` descriptors (root may raise its hard limit)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(wanted, before[0]), max(wanted, before[1])))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def flood(path: str, count: int) -> list[socket.socket]:
    """`count` idle connections to a unix socket, as a hostile local reader holds them (those
    the daemon closes or never accepts included); the caller closes them."""
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(0.2)  # a full backlog makes connect() wait: count it and go on
        with contextlib.suppress(OSError):
            sock.connect(path)
        held.append(sock)
    return held


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed command's whole story for an assertion message."""
    return (f"{' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")


def http_get(lab: Lab, host: str, url: str, params: dict[str, str] | None = None,
             headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> str:
    """GET `url` from inside `host` (the daemon and Prometheus listen on the namespace's own
    loopback) and return the body; AssertionError on a transport or HTTP failure. curl if it is
    installed, else Python's urllib."""
    if params:
        url += "?" + urllib.parse.urlencode(params)
    headers = headers or {}
    if shutil.which("curl"):
        argv = ["curl", "--silent", "--show-error", "--fail", "--max-time", f"{timeout_s:g}"]
        for key, value in headers.items():
            argv += ["--header", f"{key}: {value}"]
        argv.append(url)
    else:
        code = ("import sys, urllib.request as u; "
                "r = u.Request(sys.argv[1], headers=dict(a.split(': ', 1) for a in sys.argv[3:])); "
                "sys.stdout.write(u.urlopen(r, timeout=float(sys.argv[2])).read().decode())")
        argv = [sys.executable, "-c", code, url, f"{timeout_s:g}",
                *(f"{k}: {v}" for k, v in headers.items())]
    proc = lab.run(host, argv, timeout=timeout_s + 10)
    assert proc.returncode == 0, f"GET {url} in host {host} failed:\n{describe(proc)}"
    return str(proc.stdout)


class LineReader:
    """Reads a child's stdout on a thread, so the test can wait for a line with a deadline
    (a plain readline() on a pipe would block forever if the line never comes)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self.lines.put(line.rstrip("\n"))
        finally:
            self.lines.put(None)  # end of file

    def next_line(self, timeout_s: float, what: str) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no output within {timeout_s:g} s waiting for {what}") from None
        assert line is not None, f"the command ended its output before {what}"
        return line


def stop_pid(proc: subprocess.Popen[Any], timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM the process by its PID (SIGKILL after `timeout_s`); its exit status."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout_s)
    return proc.returncode


@dataclass
class Prometheus:
    """A Prometheus server inside a lab host, scraping `targets` every second. It listens on
    the namespace's loopback only, and keeps its data, config and log under `workdir`."""

    lab: Lab
    host: str
    workdir: Path
    targets: list[str]
    listen: str = "127.0.0.1:9090"
    job: str = "linkguard"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.listen}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def config(self) -> str:
        # JSON is YAML: no hand-written indentation to get wrong.
        return json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": self.job, "scrape_interval": "1s",
                                "scrape_timeout": "1s",
                                "static_configs": [{"targets": self.targets}]}],
        }, indent=2)

    def start(self, timeout_s: float = 30.0) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config())
        argv = [PROMETHEUS, f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.listen}", "--log.level=warn"]
        with self.log_path.open("wb") as log:
            # ip netns exec execs: this PID is Prometheus itself; lab.down() kills it too.
            self.proc = self.lab.popen(self.host, argv, stdout=log, stderr=log,
                                       stdin=subprocess.DEVNULL)
        poll(self._ready, timeout_s, f"Prometheus in host {self.host} to become ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode} during "
                                 f"start:\n{self.log()}")
        if shutil.which("curl"):
            argv = ["curl", "--silent", "--fail", "--max-time", "2", f"{self.url}/-/ready"]
        else:
            code = "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)"
            argv = [sys.executable, "-c", code, f"{self.url}/-/ready"]
        return self.lab.run(self.host, argv, timeout=15).returncode == 0

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; the `data` of a successful answer."""
        body = json.loads(http_get(self.lab, self.host, f"{self.url}/api/v1/{path}", params))
        assert body.get("status") == "success", f"Prometheus /api/v1/{path}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_health(self) -> list[tuple[str, str, str]]:
        """(scrape URL, health, last error) of every active target."""
        return [(t["scrapeUrl"], t["health"], t["lastError"])
                for t in self.api("targets")["activeTargets"]]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc)
