"""Run plugin/build/lg_nccl_driver as a server/client pair and collect both JSON reports.

Shared by the plugin's unit tests (both ends in this namespace, over loopback), its lab tests
and bench/plugin_bw.py (ends on two lab hosts, handles exchanged over the management network).
A runner is any callable that starts argv with an environment and returns a Popen: plain
subprocess.Popen here, lab.popen(host, ...) in the lab.
"""

from __future__ import annotations

import json
import os
import subprocess
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
