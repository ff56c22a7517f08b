"""The two "ranks" of the check, one per lab host: real torch/NCCL ranks, or the CPU stand-in.

Both backends have the same surface, so nccl_check.py runs one flow for either:
  start_loop()      the verified traffic loop, one process per host (a: rank 0, b: rank 1)
  progress()        iterations completed so far (the slower rank's)
  running()         whether both are still alive
  marks()           a position per host: plugin lines at or after it came later
  summary(host)     nccl_log.summarize() of that host's plugin/NCCL lines
  stop(), wait(s)   end the loop together; per-host results
  bench(transport)  bandwidth rows per size, through linkguard or the baseline
TorchRanks runs nccl_rank.py under torch with NCCL's INFO log in a file per host and phase.
DriverRanks (--dry-run) runs lg_nccl_driver, the project's NCCL stand-in, through the same
plugin: no GPU and no torch, but the same lab, daemons, environment, cut and log parsing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from nccl_log import NcclLine, read_log, summarize
from nccl_rank import MIB, parse_sizes

from bench.plugin_driver import (
    LGTCP_SO,
    LINKGUARD_SO,
    StreamPair,
    lab_starter,
    run_pair,
    start_stream_pair,
)
from linkguard_lab.lab import Lab
from linkguard_lab.timeline import parse_plugin_line, parse_progress

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "nccl_rank.py"
HOSTS = ("a", "b")  # rank 0 in a, rank 1 in b
PAIRS = "rail0:rail1"  # one NCCL device: rail0 primary, rail1 its standing backup
MASTER_PORT = {"failover": 29510, "linkguard": 29511, "socket": 29512}


def shm_path(lab: Lab, host: str) -> str:
    return f"/dev/shm/{lab.prefix}-{host}"  # the per-host file of linkguard_lab.demo.HostDaemon


def nccl_env(lab: Lab, host: str, transport: str, log_file: Path) -> dict[str, str]:
    """NCCL's environment of one rank. linkguard: the plugin by path, NCCL_NET so that NCCL
    cannot fall back to its own transports, bootstrap on the management network; socket:
    NCCL's built-in transport on rail0 (bootstrap there too)."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
           "NCCL_DEBUG_FILE": str(log_file), "NCCL_HOSTID": f"linkguard-gpu-check-{host}",
           "NCCL_IB_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    if transport == "socket":
        env.update(NCCL_NET="Socket", NCCL_SOCKET_IFNAME="rail0")
    else:
        env.update(NCCL_NET="linkguard", NCCL_NET_PLUGIN=str(LINKGUARD_SO),
                   NCCL_SOCKET_IFNAME="mgmt0", LINKGUARD_SHM=shm_path(lab, host),
                   LINKGUARD_PAIRS=PAIRS)
    return env


def _base_env() -> dict[str, str]:
    """The caller's environment without what must not leak into a rank: NCCL/linkguard
    settings, and PYTHONPATH (the daemon's carried wheels must not shadow torch's packages)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("NCCL_", "LINKGUARD", "LGTCP")) and k != "PYTHONPATH"}


class TorchRanks:
    kind = "torch"

    def __init__(self, lab: Lab, work: Path, elements: int, max_s: float,
                 python: str = sys.executable) -> None:
        self.lab, self.work, self.python = lab, work, python
        self.elements, self.max_s = elements, max_s
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.progress_seen = {h: 0 for h in HOSTS}
        self.phase = ""
        self._threads: list[threading.Thread] = []

    def log(self, phase: str, host: str) -> Path:
        return self.work / f"nccl-{phase}-{host}.log"

    def _out(self, phase: str, host: str) -> Path:
        return self.work / f"rank-{phase}-{host}.json"

    def _start(self, phase: str, transport: str, args: list[str]) -> None:
        self.phase = phase
        self.progress_seen = {h: 0 for h in HOSTS}
        master = f"{self.lab.mgmt_address('a')}:{MASTER_PORT[phase]}"
        for rank, host in enumerate(HOSTS):
            env = {**_base_env(), **nccl_env(self.lab, host, transport, self.log(phase, host))}
            argv = [self.python, str(RANK_SCRIPT), "--rank", str(rank), "--world", "2",
                    "--master", master, "--out", str(self._out(phase, host)), *args]
            stdout = (self.work / f"rank-{phase}-{host}.out").open("w")
            proc = self.lab.popen(host, argv, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=stdout, text=True)
            stdout.close()
            self.procs[host] = proc
            t = threading.Thread(target=self._read, args=(host, proc), daemon=True)
            t.start()
            self._threads.append(t)

    def _read(self, host: str, proc: subprocess.Popen[str]) -> None:
        with (self.work / f"rank-{self.phase}-{host}.progress").open("w") as keep:
            for line in iter(proc.stdout.readline, ""):  # type: ignore[union-attr]
                keep.write(line)
                parts = line.split()
                if len(parts) >= 3 and parts[:2] == ["lg-rank:", "iter"]:
                    self.progress_seen[host] = int(parts[2])

    def start_loop(self) -> None:
        stop = self.work / "stop-failover"
        with contextlib.suppress(FileNotFoundError):
            stop.unlink()
        self._start("failover", "linkguard",
                    ["--mode", "loop", "--elements", str(self.elements), "--stop-file",
                     str(stop), "--max-s", str(self.max_s)])

    def progress(self) -> int:
        return min(self.progress_seen.values())

    def running(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def marks(self) -> dict[str, int]:
        return {h: (p.stat().st_size if (p := self.log(self.phase, h)).exists() else 0)
                for h in HOSTS}

    def summary(self, host: str, phase: str = "failover") -> dict[str, Any]:
        return summarize(read_log(self.log(phase, host)))

    def stop(self) -> None:
        (self.work / "stop-failover").touch()

    def wait(self, timeout_s: float) -> dict[str, dict[str, Any]]:
        results = {}
        for host, proc in self.procs.items():
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()  # only the rank we started, by its PID
                rc = proc.wait()
            results[host] = self._result(self.phase, host, rc)
        for t in self._threads:
            t.join(timeout=5)
        self.procs, self._threads = {}, []
        return results

    def _result(self, phase: str, host: str, rc: int) -> dict[str, Any]:
        path = self._out(phase, host)
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
            "ok": False, "exception": "the rank wrote no result (killed, or it crashed)"}
        data["returncode"] = rc
        data.pop("iters", None)  # kept in the work folder's rank-*.json
        return data

    def iteration_times(self, host: str) -> list[list[float]]:
        path = self._out("failover", host)
        return json.loads(path.read_text()).get("iters", []) if path.exists() else []

    def bench(self, transport: str, sizes: str, budget_mib: int, timeout_s: float
              ) -> dict[str, dict[str, Any]]:
        self._start(transport, transport, ["--mode", "bench", "--sizes", sizes,
                                           "--budget-mib", str(budget_mib)])
        return self.wait(timeout_s)

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()  # by PID
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def artifacts(self) -> list[Path]:
        return sorted(self.work.glob("nccl-*.log"))


class DriverRanks:
    """The CPU stand-in: lg_nccl_driver in a (client, rank 0) and b (server, rank 1)."""

    kind = "stand-in"
    ROLE: ClassVar[dict[str, str]] = {"a": "client", "b": "server"}

    def __init__(self, lab: Lab, work: Path, max_s: float) -> None:
        self.lab, self.work, self.max_s = lab, work, max_s
        self.pair: StreamPair | None = None
        self.completions = {"client": 0, "server": 0}
        self.lock = threading.Lock()

    def _on_line(self, line: Any) -> None:
        p = parse_progress(line.text)
        if p is not None and "completions" in p:
            with self.lock:
                self.completions[line.role] = int(p["completions"])

    def start_loop(self) -> None:
        env = {"LINKGUARD_PAIRS": PAIRS, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"}
        self.pair = start_stream_pair(
            lab_starter(self.lab, "b"), lab_starter(self.lab, "a"),
            f"{self.lab.mgmt_address('b')}:7000", self.max_s,
            ["--bidir", "--size", "256K", "--depth", "8", "--progress-ms", "100",
             "--timestamps", "--idle-us", "50"], env=env,
            server_env={"LINKGUARD_SHM": shm_path(self.lab, "b")},
            client_env={"LINKGUARD_SHM": shm_path(self.lab, "a")},
            timeout=self.max_s + 30, on_line=self._on_line)

    def progress(self) -> int:
        with self.lock:
            return min(self.completions.values())

    def running(self) -> bool:
        return self.pair is not None and all(p.poll() is None for p in self.pair.procs.values())

    def marks(self) -> dict[str, int]:
        now = time.monotonic_ns()
        return {h: now for h in HOSTS}

    def summary(self, host: str, phase: str = "failover") -> dict[str, Any]:
        """The plugin's lines of the loop's driver in that host, positioned at the plugin's own
        time stamps (the bandwidth runs keep none)."""
        lines: list[NcclLine] = []
        if phase != "failover" or self.pair is None:
            return summarize(lines)
        for sl in self.pair.stderr_lines(self.ROLE[host]):
            pl = parse_plugin_line(sl.text)
            if pl is not None:
                lines.append(NcclLine(pl.when_ns or sl.read_ns, host, 0, 0, pl.level,
                                      f"NET/linkguard: {pl.msg}"))
        return summarize(lines)

    def stop(self) -> None:
        assert self.pair is not None
        for proc in self.pair.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)  # the drivers we started, by PID

    def wait(self, timeout_s: float) -> dict[str, dict[str, Any]]:
        assert self.pair is not None
        server, client = self.pair.wait(timeout=timeout_s)
        (self.work / "driver-failover.txt").write_text(
            "\n".join(f"{ln.role}: {ln.text}" for ln in self.pair.stderr_lines()))
        return {"a": _driver_result(client), "b": _driver_result(server)}

    def bench(self, transport: str, sizes: str, budget_mib: int, timeout_s: float
              ) -> dict[str, dict[str, Any]]:
        """One-way throughput per size, linkguard or lgtcp (its TCP transport alone) on rail0."""
        plugin, env = (LGTCP_SO, {"LGTCP_IFS": "rail0"}) if transport == "socket" else \
            (LINKGUARD_SO, {"LINKGUARD_PAIRS": PAIRS})
        rows, ok, errors = [], True, []
        for i, size in enumerate(parse_sizes(sizes)):
            srv, cli = run_pair(lab_starter(self.lab, "b"), lab_starter(self.lab, "a"),
                                f"{self.lab.mgmt_address('b')}:{7100 + i}",
                                ["--size", str(size), "--depth", "8", "--bytes",
                                 str(budget_mib * MIB)], env=env, plugin=plugin,
                                timeout=timeout_s)
            ok = ok and srv.ok and cli.ok
            if not (srv.ok and cli.ok):
                errors.append(f"{size} B: {srv.report.get('failure')} {cli.stderr[-300:]}")
            gbs = float(srv.report.get("gbps", 0.0)) / 8
            rows.append({"bytes": size, "busbw_gbs": gbs, "algbw_gbs": gbs,
                         "wrong_elements": int(srv.report.get("corrupt_messages", 0))})
        result = {"ok": ok, "exception": "; ".join(errors) or None, "rows": rows}
        return {"a": result, "b": result}

    def kill(self) -> None:
        if self.pair is not None:
            self.pair.kill()

    def iteration_times(self, host: str) -> list[list[float]]:
        return []

    def artifacts(self) -> list[Path]:
        return sorted(self.work.glob("driver-*.txt"))


def _driver_result(r: Any) -> dict[str, Any]:
    rep = r.report
    wrong = sum(int(rep.get(k, 0) or 0) for k in (
        "corrupt_messages", "missing_messages", "duplicated_messages", "reordered_messages",
        "unwritten_messages", "size_mismatches"))
    problems = [str(rep["failure"])] if rep.get("failure") else []
    problems += [f"{e['call']} returned {e['code']}" for e in rep.get("errors", [])]
    if not rep:
        problems.append(f"no report (exit {r.returncode}): {r.stderr[-300:]}")
    return {"ok": r.ok, "iterations": int(rep.get("completions", 0) or 0),
            "wrong_elements": wrong, "exception": "; ".join(problems) or None,
            "returncode": r.returncode}
