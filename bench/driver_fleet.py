"""Many lg_nccl_driver pairs between lab hosts a and b at once, and what their plugins log.

Shared by bench/scale.py and tests/lab/test_scale.py. `procs` pairs, each one client process in
host a sending to one server process in host b over `conns` connections (stream mode, every
byte verified, every connection progressed by the process's one polling thread, as NCCL's proxy
thread does). The plugin's lines of every process are read as they come and indexed per
connection: the sender's failover, its rebuilt primary path (the connection has its standby
again) and its return to the primary. Every process is stopped by its PID.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.plugin_driver import (
    LINKGUARD_SO,
    DriverResult,
    StreamLine,
    StreamPair,
    lab_starter,
    start_stream_pair,
)
from bench.proc_usage import thread_states
from linkguard_lab.lab import Lab
from linkguard_lab.timeline import parse_plugin_line

BASE_PORT = 7400  # pair i exchanges handles on b's management address, port BASE_PORT + i
# The sender's line when a path of a connection was rebuilt (plugin/src/proto/failover.c).
_REBUILT = re.compile(r"^send conn (?P<id>[0-9a-f]+): (?P<slot>primary|backup) path on NIC "
                      r"\S+ rebuilt")
# The sender's line when an idle standby moves to re-spread the backups after a return.
_RESPREAD = re.compile(r"^send conn (?P<id>[0-9a-f]+): idle standby backup path moves from NIC ")
_PHASE = re.compile(r"^lg_nccl_driver: (?P<what>connected|traffic) t=(?P<t>\d+\.\d+)")


@dataclass(frozen=True)
class ConnEvent:
    kind: str  # "failover", "reintegration" (sender's lines), "rebuilt" (primary path),
    #            "rebuilt-backup" (the backup path: a spread backup moved, issue 28),
    #            "respread" (an idle standby moves to re-spread the backups after a return)
    pair: int
    conn: str  # the plugin's connection id (hex)
    t_ns: int


class Fleet:
    """`procs` driver pairs with `conns` connections each, started at once and left running."""

    def __init__(self, lab: Lab, procs: int, conns: int, duration_s: float,
                 args: Sequence[str], env: dict[str, str], server_env: dict[str, str],
                 client_env: dict[str, str], gap_dir: Path | None = None,
                 plugin: Path = LINKGUARD_SO,
                 pair_args: Sequence[Sequence[str]] = ()) -> None:
        """`pair_args[i]`, where given, is added to pair i's arguments (e.g. its --dev)."""
        self.lab, self.procs, self.conns = lab, procs, conns
        self.pairs: list[StreamPair] = []
        self.events: list[ConnEvent] = []
        self.phases: dict[tuple[int, str, str], int] = {}  # (pair, role, what) -> ns
        self.warnings: list[str] = []
        self.stuck: list[dict[str, Any]] = []  # drivers that did not exit when told (finish)
        self._lock = threading.Lock()
        try:
            for i in range(procs):
                per_role: dict[str, list[str]] = {"server_args": [], "client_args": []}
                if gap_dir is not None:
                    per_role = {f"{r}_args": ["--gap-file", str(gap_dir / f"gaps-{i}-{r}")]
                                for r in ("server", "client")}
                self.pairs.append(start_stream_pair(
                    lab_starter(lab, "b"), lab_starter(lab, "a"),
                    f"{lab.mgmt_address('b')}:{BASE_PORT + i}", duration_s,
                    ["--conns", str(conns), *args,
                     *(pair_args[i] if i < len(pair_args) else ())], env=env, plugin=plugin,
                    server_env=server_env, client_env=client_env, timeout=duration_s + 120,
                    on_line=self._reader(i), **per_role))
        except BaseException:
            self.kill()
            raise

    def _reader(self, pair: int) -> Callable[[StreamLine], None]:
        def on_line(line: StreamLine) -> None:
            if m := _PHASE.match(line.text):
                with self._lock:
                    self.phases[(pair, line.role, m["what"])] = int(float(m["t"]) * 1e9)
                return
            pl = parse_plugin_line(line.text)
            if pl is None:
                return
            when = pl.when_ns or line.read_ns
            if pl.kind == "warn":
                with self._lock:
                    self.warnings.append(f"{line.role} {pair}: {pl.msg}")
            if line.role != "client":  # the sender decides: its lines describe the connection
                return
            kind, conn = None, None
            if pl.kind in ("failover", "reintegration") and (pl.conn or "").startswith("send"):
                kind, conn = pl.kind, (pl.conn or "").split()[1]
            elif m := _REBUILT.match(pl.msg):
                kind = "rebuilt" if m["slot"] == "primary" else "rebuilt-backup"
                conn = m["id"]
            elif m := _RESPREAD.match(pl.msg):
                kind, conn = "respread", m["id"]
            if kind and conn:
                with self._lock:
                    self.events.append(ConnEvent(kind, pair, conn, when))
        return on_line

    # --- what the processes said -------------------------------------------------------
    def pids(self, role: str) -> list[int]:
        """The PIDs of one side's drivers (`ip netns exec` execs: the driver's own)."""
        return [p.procs[role].pid for p in self.pairs]

    def phase(self, what: str) -> list[int] | None:
        """When every process logged `what` ("connected", "traffic"), or None until then."""
        with self._lock:
            got = [self.phases.get((i, r, what)) for i in range(self.procs)
                   for r in ("server", "client")]
        return None if None in got else [t for t in got if t is not None]

    def conn_times(self, kind: str, since_ns: int) -> dict[tuple[int, str], int]:
        """(pair, connection) -> its first `kind` line at or after `since_ns`."""
        out: dict[tuple[int, str], int] = {}
        with self._lock:
            for e in self.events:
                if e.kind == kind and e.t_ns >= since_ns:
                    out.setdefault((e.pair, e.conn), e.t_ns)
        return out

    def total(self) -> int:
        return self.procs * self.conns

    def running(self) -> bool:
        return all(p.running() for p in self.pairs)

    def live(self) -> set[int]:
        """The pairs whose two drivers both still run."""
        return {i for i, p in enumerate(self.pairs)
                if all(proc.poll() is None for proc in p.procs.values())}

    def wait(self, pred: Callable[[], Any], timeout_s: float, period_s: float = 0.05) -> Any:
        """Poll pred() until it is truthy (returned), a driver exits, or the time is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = pred()
            if got or time.monotonic() >= deadline or not self.running():
                return got
            time.sleep(period_s)

    def wait_all(self, kind: str, since_ns: int, timeout_s: float) -> dict[tuple[int, str], int]:
        """Until every connection of every pair still running logged `kind` since `since_ns`,
        no pair runs any more, or the time is up; returns what was logged (all pairs)."""
        deadline = time.monotonic() + timeout_s
        while True:
            live, got = self.live(), self.conn_times(kind, since_ns)
            per_pair = [sum(1 for pair, _ in got if pair == i) for i in live]
            if all(n >= self.conns for n in per_pair) or time.monotonic() >= deadline:
                return got
            time.sleep(0.05)

    # --- the end -----------------------------------------------------------------------
    def finish(self, timeout_s: float = 60) -> list[tuple[DriverResult, DriverResult]]:
        """SIGUSR1 to every driver (a clean end of a timed run), then both reports of each
        pair: [(server, client), ...]. A driver still running after `timeout_s` is described
        in `stuck` (its threads' states; with gdb on PATH, their stacks), then killed."""
        for p in self.pairs:
            for proc in p.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGUSR1)  # the drivers we started, by PID
        deadline = time.monotonic() + timeout_s
        procs = [(i, role, proc) for i, p in enumerate(self.pairs)
                 for role, proc in p.procs.items()]
        while any(proc.poll() is None for _, _, proc in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for i, role, proc in procs:
            if proc.poll() is None:
                self.stuck.append({"pair": i, "role": role, "threads": thread_states(proc.pid),
                                   "stacks": gdb_stacks(proc.pid)})
        return [p.wait(1.0) for p in self.pairs]

    def kill(self) -> None:
        for p in self.pairs:
            p.kill()


def gdb_stacks(pid: int, frames: int = 12) -> str | None:
    """Every thread's backtrace of a running process, where gdb is installed (not a
    dependency: a diagnosis of a hang, taken before the process is killed)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    try:
        proc = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex",
                               f"thread apply all bt {frames}"], capture_output=True,
                              text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "gdb timed out"
    return "\n".join(ln for ln in proc.stdout.splitlines()
                     if ln.startswith(("Thread ", "#")))[:20000]
