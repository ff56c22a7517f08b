"""Run plugin/build/lg_nccl_driver as a server/client pair and collect both JSON reports.

Shared by the plugin's unit tests (both ends in this namespace, over loopback), its lab tests
and bench/plugin_bw.py (ends on two lab hosts, handles exchanged over the management network).
A runner is any callable that starts argv with an environment and returns a Popen: plain
subprocess.Popen here, lab.popen(host, ...) in the lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "plugin" / "build"
DRIVER = BUILD / "lg_nccl_driver"
LINKGUARD_SO = BUILD / "libnccl-net-linkguard.so"
LGTCP_SO = BUILD / "libnccl-net-lgtcp.so"
# Every exported plugin version, newest first (NCCL's loader order).
VERSIONS = (12, 11, 10, 9, 8)

Starter = Callable[[list[str], dict[str, str]], subprocess.Popen]


def build_plugin() -> None:
    """make -C plugin (a no-op when up to date)."""
    subprocess.run(["make", "-s", "-C", str(REPO / "plugin")], check=True,
                   capture_output=True, text=True, timeout=600)


def local_starter(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def lab_starter(lab: Any, host: str) -> Starter:
    def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        return lab.popen(host, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    return start


@dataclass
class DriverResult:
    report: dict[str, Any]
    returncode: int
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.report.get("ok"))


def _finish(proc: subprocess.Popen, timeout: float) -> DriverResult:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # only the process we started, by its PID
        out, err = proc.communicate()
        err += "\n[killed: no exit within the harness timeout]"
    lines = [line for line in (out or "").splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    return DriverResult(report, proc.returncode, err or "")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a loopback driver pair's handle exchange)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_pair(server: Starter, client: Starter, mgmt: str, args: Sequence[str] = (),
             env: dict[str, str] | None = None, plugin: Path = LINKGUARD_SO,
             timeout: float = 120.0, server_prefix: Sequence[str] = (),
             client_args: Sequence[str] = (), server_args: Sequence[str] = (),
             ) -> tuple[DriverResult, DriverResult]:
    """Server first (it listens on `mgmt`), then the client; both with the same `args`.
    `server_prefix` wraps the server (e.g. valgrind). Returns (server, client)."""
    full_env = dict(os.environ, **(env or {}))
    common = ["--plugin", str(plugin), "--mgmt", mgmt, "--timeout", f"{timeout:g}", *args]
    srv = server([*server_prefix, str(DRIVER), "--role", "server", *common, *server_args],
                 full_env)
    time.sleep(0.05)
    cli = client([str(DRIVER), "--role", "client", *common, *client_args], full_env)
    grace = timeout + 30
    c = _finish(cli, grace)
    s = _finish(srv, grace)
    return s, c


def props(env: dict[str, str], plugin: Path = LINKGUARD_SO, version: int = 0,
          run: Callable[..., subprocess.CompletedProcess] | None = None
          ) -> tuple[dict[str, Any], subprocess.CompletedProcess]:
    """lg_nccl_driver --props: init + devices + getProperties as JSON."""
    argv = [str(DRIVER), "--props", "--plugin", str(plugin)]
    if version:
        argv += ["--version", str(version)]
    runner = run or (lambda a, **kw: subprocess.run(a, check=False, **kw))
    proc = runner(argv, env=dict(os.environ, **env), capture_output=True, text=True,
                  timeout=60)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), proc


# --- stream mode (lg_nccl_driver --duration-s): a pair running in the background -------------

PROGRESS_RE = r"lg_nccl_driver: (progress|stopping|end) (.*)"


@dataclass
class StreamLine:
    """One stderr line of a running driver, with the CLOCK_MONOTONIC ns it was read at."""

    role: str  # "server" or "client"
    read_ns: int
    text: str


class StreamPair:
    """A server/client pair of lg_nccl_driver in stream mode, started and left running.

    Both processes' stderr is read line by line on threads (kept in `lines`, and handed to
    `on_line` as they come: progress lines, the plugin's log with --timestamps); stdout (the
    JSON report, which can be large with a gap list) is drained on threads too, so neither
    pipe can block the drivers. `wait()` returns (server, client) DriverResults; `kill()` ends
    both (only these processes, by their PIDs)."""

    def __init__(self, server: subprocess.Popen, client: subprocess.Popen,
                 on_line: Callable[[StreamLine], None] | None = None) -> None:
        self.procs = {"server": server, "client": client}
        self.lines: list[StreamLine] = []
        self._out: dict[str, list[str]] = {"server": [], "client": []}
        self._lock = threading.Lock()
        self._on_line = on_line
        self.callback_errors: list[str] = []
        self._threads = []
        for role, proc in self.procs.items():
            for stream, fn in ((proc.stderr, self._read_err), (proc.stdout, self._read_out)):
                t = threading.Thread(target=fn, args=(role, stream), daemon=True)
                t.start()
                self._threads.append(t)

    def _read_err(self, role: str, stream: Any) -> None:
        for text in iter(stream.readline, ""):
            line = StreamLine(role, time.monotonic_ns(), text.rstrip("\n"))
            with self._lock:
                self.lines.append(line)
            if self._on_line is not None:
                try:
                    self._on_line(line)
                except Exception as exc:  # noqa: BLE001 - a display callback must not stop
                    self.callback_errors.append(repr(exc))  # the reader: keep it for later

    def _read_out(self, role: str, stream: Any) -> None:
        for text in iter(stream.readline, ""):
            self._out[role].append(text)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def stderr_lines(self, role: str | None = None) -> list[StreamLine]:
        with self._lock:
            return [ln for ln in self.lines if role in (None, ln.role)]

    def wait(self, timeout: float) -> tuple[DriverResult, DriverResult]:
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()  # only the process we started, by its PID
                proc.wait()
        for t in self._threads:
            t.join(timeout=10)
        results = []
        for role in ("server", "client"):
            proc = self.procs[role]
            lines = [ln for ln in self._out[role] if ln.startswith("{")]
            report = json.loads(lines[-1]) if lines else {}
            err = "\n".join(ln.text for ln in self.stderr_lines(role))
            results.append(DriverResult(report, proc.returncode, err))
        return results[0], results[1]

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()  # by PID: only what this pair started
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                proc.wait(timeout=10)


def start_stream_pair(server: Starter, client: Starter, mgmt: str, duration_s: float,
                      args: Sequence[str] = (), env: dict[str, str] | None = None,
                      plugin: Path = LINKGUARD_SO, timeout: float | None = None,
                      server_env: dict[str, str] | None = None,
                      client_env: dict[str, str] | None = None,
                      on_line: Callable[[StreamLine], None] | None = None,
                      server_args: Sequence[str] = (), client_args: Sequence[str] = (),
                      ) -> StreamPair:
    """Starts `lg_nccl_driver --duration-s duration_s` as server then client (same `args`),
    each with `env` plus its own `server_env` / `client_env` (e.g. LINKGUARD_SHM per host),
    and returns at once. `timeout` (default duration + 30 s) bounds the drivers themselves.
    The caller's LINKGUARD*, LGTCP* and NCCL_* variables are not inherited: a run is
    described by its arguments alone."""
    limit = timeout if timeout is not None else duration_s + 30
    common = ["--plugin", str(plugin), "--mgmt", mgmt, "--timeout", f"{limit:g}",
              "--duration-s", f"{duration_s:g}", *args]
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("LINKGUARD", "LGTCP", "NCCL_"))}
    base.update(env or {})
    srv = server([str(DRIVER), "--role", "server", *common, *server_args],
                 {**base, **(server_env or {})})
    time.sleep(0.05)
    try:
        cli = client([str(DRIVER), "--role", "client", *common, *client_args],
                     {**base, **(client_env or {})})
    except BaseException:
        srv.kill()
        srv.wait()
        raise
    return StreamPair(srv, cli, on_line)


def gaps_overlapping(report: dict[str, Any], start_ns: int, end_ns: int,
                     comms: Sequence[int] | None = None) -> list[tuple[int, int, int, bool]]:
    """Gaps of a stream report's list (each at least its `list_min_ms`) that overlap
    [start_ns, end_ns], as (comm, start_ns, end_ns, open), optionally only those `comms`."""
    out = []
    for entry in report.get("gaps", {}).get("list", []):
        comm, s, e = entry[0], entry[1], entry[2]
        if comms is not None and comm not in comms:
            continue
        if s <= end_ns and e >= start_ns:
            out.append((comm, s, e, len(entry) > 3 and bool(entry[3])))
    return out
