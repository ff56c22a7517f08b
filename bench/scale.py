"""Failover at scale: many connections in many processes per host, one daemon-driven cut.

    python -m bench.scale [--quick] [--procs 1,2,8] [--conns 1,16,64,256] [--trials 2]
                          [--rate 20000] [--size 16K] [--json out.json]

For every (processes per host, connections per process) of the matrix (by default 1, 2, 8 x 1,
16, 64, 256, and 8 x 32, a cell of issue 11's goals), a throw-away 2-host x 2-rail lab (prefix
lgsc*), linkguardd in both hosts (failover_gap's --hold-down-ms 300 --flap-penalty 0) and
`procs` pairs of lg_nccl_driver (bench/driver_fleet.py): each client in
host a sends to its server in host b over `conns` connections through
libnccl-net-linkguard.so, device 0 (rail0 primary, rail1 standby), every byte verified, every
connection of a process progressed by its one polling thread as NCCL's proxy thread does. Each
connection posts one message every pace_us (the host's --rate messages/s shared by all its
connections, at most one every 2 ms each): a fixed load on these 2 CPUs whatever the matrix
cell. Drivers sleep --idle-us 200 after a pass without progress instead of spinning (16
spinning processes would starve the daemons). Per cell:

  1. connected and idle (the driver's --idle-s, ended by SIGUSR2): descriptors, threads and
     resident memory of every driver (/proc/PID), then the CPU of the plugin's own threads
     (named lg-*: the monitor, the progress workers) over 3 s with nothing posted;
  2. traffic; the plugin threads' CPU over 2 s of it;
  3. each trial: cut a's rail0 at the switch, wait until every connection's sender logged its
     failover, 1 s on the standby, restore, wait until every connection's sender logged its
     primary path rebuilt (it has its standby again) and its return to the primary, 2 s;
  4. SIGUSR1: the drivers stop cleanly and report; every process is stopped by its PID and
     the lab removed, whatever happened.

Per connection (either end's completions, from the drivers' gap files, every gap of at least
half a pace listed) and per trial: its longest gap overlapping [cut, last failover line +
50 ms], and its longest gap in a control stretch just before the cut, as long (at least
300 ms; where the cut's window is longer than the traffic before it, the control holds all of
that traffic), that ended before it. p50 / p99 / max are over all connections of all trials.
A connection with no listed gap in a window counts as half a pace (the shortest listed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench.plugin_driver as pd
from bench.driver_fleet import Fleet
from bench.failover_gap import DAEMON_ARGS, freeze_build, stats
from bench.lab_iperf import machine
from bench.plugin_driver import DriverResult, build_plugin
from bench.proc_usage import cpu_shares, footprint
from bench.scale_gaps import Window, comm_conns, per_connection, window_maxima
from bench.scale_report import GOAL_CELLS, goals, table
from linkguard_lab import demo
from linkguard_lab.demo import PAIRS, HostDaemon, driver_env, start_daemons
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.timeline import first_event

PROCS = (1, 2, 8)
CONNS = (1, 16, 64, 256)
QUICK = ((1, 1), (1, 16), (2, 1), (2, 16))
MAX_PER_HOST = 2048  # connections per host: 8 x 256
DEPTH = 4
PACE_MIN_US = 2000.0
IDLE_US = 200
IDLE_MEASURE_S = 3.0
WARM_S = 3.0  # traffic before the first cut; the plugin threads' CPU is read in its last 2 s
TRAFFIC_MEASURE_S = 2.0
HOLD_S = 1.0  # on the standby before the restore
SETTLE_S = 2.0  # after a trial: the next trial's control stretch
FAIL_WAIT_S = 30.0
BACK_WAIT_S = 45.0
UP_WAIT_S = 10.0  # restore -> the daemon's UP (its hold-down is 300 ms)
MARGIN_NS = 50_000_000
MIN_CONTROL_NS = 300_000_000


@dataclass(frozen=True)
class Cell:
    procs: int
    conns: int

    @property
    def per_host(self) -> int:
        return self.procs * self.conns

    def pace_us(self, rate: float) -> float:
        return max(PACE_MIN_US, self.per_host / rate * 1e6)

    @property
    def setup_s(self) -> float:
        """How long all drivers may take to connect."""
        return 60 + self.per_host * 0.05

    def bound_s(self, trials: int) -> float:
        """The longest the drivers may run: every wait of measure() at its bound, and a
        minute. Their own --duration-s and --timeout: a harness that dies without its
        clean-up leaves nothing running for long."""
        per_trial = FAIL_WAIT_S + HOLD_S + UP_WAIT_S + BACK_WAIT_S + 1 + SETTLE_S
        return self.setup_s + 1 + IDLE_MEASURE_S + 10 + WARM_S + trials * per_trial + 60


def run_cell(cell: Cell, trials: int, rate: float, size: str, build: dict[str, Any],
             log: Callable[[str], None]) -> dict[str, Any]:
    pace = cell.pace_us(rate)
    list_ms = max(1.0, pace / 2e3)
    out: dict[str, Any] = {"procs": cell.procs, "conns": cell.conns, "pace_us": pace,
                           "list_ms": list_ms, "size": size, "trials": []}
    gap_dir = Path(tempfile.mkdtemp(prefix="gaps-", dir=build["dir"]))
    results: list[tuple[DriverResult, DriverResult]] = []
    t0 = time.monotonic()
    try:
        with Lab(unique_prefix("lgsc"), 2, 2) as lab:
            lab.up()
            daemons = start_daemons(lab, DAEMON_ARGS)
            fleet = None
            try:
                args = ["--size", size, "--depth", str(DEPTH), "--pace-us", f"{pace:.0f}",
                        "--idle-us", str(IDLE_US), "--idle-s", f"{cell.setup_s + 30:.0f}",
                        "--timestamps",
                        "--gap-list-ms", f"{list_ms:g}", "--top-gaps", "5"]
                fleet = Fleet(lab, cell.procs, cell.conns, cell.bound_s(trials), args,
                              env={"LINKGUARD_PAIRS": PAIRS}, server_env=driver_env(lab, "b"),
                              client_env=driver_env(lab, "a"), gap_dir=gap_dir,
                              plugin=Path(build["plugin"]))
                measure(out, fleet, cell.setup_s, daemons[0], trials, log)
                results = fleet.finish()
                out["stuck"] = fleet.stuck
                out["plugin_warnings"] = {"count": len(fleet.warnings),
                                          "first": fleet.warnings[:10]}
                for st in fleet.stuck:
                    log(f"  the {st['role']} of pair {st['pair']} did not exit when told: "
                        f"{[(t['comm'], t['wchan']) for t in st['threads']]}")
            finally:
                if fleet is not None:
                    fleet.kill()
                for d in daemons:
                    d.stop()
        analyse(out, results, gap_dir)
    finally:
        shutil.rmtree(gap_dir, ignore_errors=True)
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


def measure(out: dict[str, Any], fleet: Fleet, setup_s: float, daemon_a: HostDaemon,
            trials: int, log: Callable[[str], None]) -> None:
    t = time.monotonic()
    if not fleet.wait(lambda: fleet.phase("connected"), setup_s):
        out["failure"] = f"not every driver connected within {setup_s:g} s"
        return
    out["connect_s"] = round(time.monotonic() - t, 2)
    time.sleep(1.0)
    pids = {"a": fleet.pids("client"), "b": fleet.pids("server")}
    out["footprint"] = {host: [asdict(footprint(p)) for p in ps] for host, ps in pids.items()}
    out["cpu_idle"] = cpu_shares(pids, IDLE_MEASURE_S)
    for p in fleet.pairs:
        for proc in p.procs.values():
            proc.send_signal(signal.SIGUSR2)  # the drivers we started, by PID: traffic
    if not fleet.wait(lambda: fleet.phase("traffic"), 10):
        out["failure"] = "the traffic did not start"
        return
    time.sleep(WARM_S - TRAFFIC_MEASURE_S)
    out["cpu_traffic"] = cpu_shares(pids, TRAFFIC_MEASURE_S)
    for i in range(trials):
        if not fleet.live():
            out["failure"] = f"every driver pair had exited before trial {i + 1}"
            return
        tr = trial(fleet, daemon_a)
        out["trials"].append(tr)
        log(f"  trial {i + 1}/{trials}: switched {tr['switched']}, standby back "
            f"{tr['rebuilt']}, on primary {tr['back']} of {fleet.total()}")
        time.sleep(SETTLE_S)


def trial(fleet: Fleet, daemon_a: HostDaemon) -> dict[str, Any]:
    lab = fleet.lab
    events = daemon_a.new_events()
    cut = lab.cut("a", 0)
    fleet.wait_all("failover", cut, FAIL_WAIT_S)
    time.sleep(HOLD_S)
    restore = lab.restore("a", 0)
    fo = {k: v for k, v in fleet.conn_times("failover", cut).items() if v < restore}
    deadline = time.monotonic() + UP_WAIT_S
    while not (up := first_event(events, nic="rail0", new="UP", after_ns=restore, host="a")):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
        events += daemon_a.new_events()
    # One deadline for both: a connection not rebuilt by then will not return either.
    back_by = time.monotonic() + BACK_WAIT_S
    rb = fleet.wait_all("rebuilt", restore, BACK_WAIT_S)
    bk = fleet.wait_all("reintegration", restore, max(1.0, back_by - time.monotonic()))
    down = first_event(events, nic="rail0", new="DOWN", after_ns=cut, host="a")
    return {"cut_ns": cut, "restore_ns": restore, "down_ns": down.time_ns if down else None,
            "up_ns": up.time_ns if up else None, "pairs_alive": len(fleet.live()),
            "switched": len(fo), "last_failover_ns": max(fo.values(), default=None),
            "rebuilt": len(rb), "last_rebuilt_ns": max(rb.values(), default=None),
            "back": len(bk), "last_back_ns": max(bk.values(), default=None)}


def analyse(out: dict[str, Any], results: list[tuple[DriverResult, DriverResult]],
            gap_dir: Path) -> None:
    procs, conns, total = out["procs"], out["conns"], out["procs"] * out["conns"]
    reports = [(s.report, c.report) for s, c in results]
    out["lossless"] = bool(results) and all(
        r.ok and not r.report.get("corrupt_messages") and not r.report.get("missing_messages")
        for pair in results for r in pair)
    out["driver_failures"] = [
        {"pair": i, "role": role, "failure": r.report.get("failure"),
         "errors": r.report.get("errors", [])[:4], "exit": r.returncode}
        for i, pair in enumerate(results) for role, r in zip(("server", "client"), pair,
                                                             strict=True) if not r.ok][:8]
    out["gbps"] = round(sum(float(c.get("gbps") or 0) for _, c in reports), 3)
    windows: list[Window] = []
    for t in out["trials"]:
        end = (t["last_failover_ns"] + MARGIN_NS if t["last_failover_ns"]
               else t["restore_ns"])
        span = max(end - t["cut_ns"], MIN_CONTROL_NS)
        windows += [Window(t["cut_ns"], end),
                    Window(t["cut_ns"] - span, t["cut_ns"], ends_by_ns=t["cut_ns"])]
    sources = [(i, gap_dir / f"gaps-{i}-{role}", comm_conns(rep))
               for i, pair in enumerate(reports) for role, rep in zip(("server", "client"),
                                                                     pair, strict=True)]
    sources = [s for s in sources if s[1].exists()]
    maxima = window_maxima(sources, windows)
    keys = [(i, c) for i in range(procs) for c in range(conns)]
    fault = [v for m in maxima[0::2] for v in per_connection(m, keys, out["list_ms"])]
    control = [v for m in maxima[1::2] for v in per_connection(m, keys, out["list_ms"])]
    out["fault_gap_ms"], out["control_gap_ms"] = stats(fault), stats(control)
    out["standby_s"] = _after_up(out["trials"], "rebuilt", total)
    out["back_s"] = _after_up(out["trials"], "back", total)
    out["switch_s"] = max((round((t["last_failover_ns"] - t["cut_ns"]) / 1e9, 3)
                           for t in out["trials"] if t["last_failover_ns"]), default=None)


def _after_up(trials: list[dict[str, Any]], what: str, total: int) -> float | None:
    """The longest time from the daemon's UP to the last connection's `what` line, over the
    trials; None when a trial missed a connection or an UP (then it did not happen in time)."""
    worst = 0.0
    for t in trials:
        last = t[f"last_{what}_ns"]
        if t[what] < total or last is None or t["up_ns"] is None:
            return None
        worst = max(worst, (last - t["up_ns"]) / 1e9)
    return round(worst, 3) if trials else None


# --- main ------------------------------------------------------------------------------------

def parse_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: a comma list of integers, not {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{what}: positive integers, not {text!r}")
    return values


def cells_of(a: argparse.Namespace) -> list[Cell]:
    """The matrix: --procs x --conns; by default also the goal cells it lacks (8 x 32)."""
    if a.quick:
        return [Cell(p, n) for p, n in QUICK]
    cells = [Cell(p, n) for p in a.procs or PROCS for n in a.conns or CONNS]
    if not a.procs and not a.conns:
        cells += [Cell(p, n) for p, n in GOAL_CELLS if Cell(p, n) not in cells]
        cells.sort(key=lambda c: (c.procs, c.conns))
    big = [c for c in cells if c.per_host > MAX_PER_HOST or c.conns > 512]
    if big:
        raise SystemExit(f"bench.scale: at most 512 connections per process and "
                         f"{MAX_PER_HOST} per host (asked: {big[0].procs} x {big[0].conns})")
    return cells


def main() -> None:
    demo.unwind_on_sigterm()  # a SIGTERM tears the lab, daemons and drivers down too
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a development subset: 1 and 2 processes x 1 and 16 connections, "
                         "one trial (~2 min)")
    ap.add_argument("--procs", type=lambda s: parse_list(s, "--procs"),
                    help="processes per host, a comma list (default 1,2,8)")
    ap.add_argument("--conns", type=lambda s: parse_list(s, "--conns"),
                    help="connections per process (default 1,16,64,256, and 8 x 32)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--rate", type=float, default=20000.0,
                    help="messages per second per host, shared by all its connections")
    ap.add_argument("--size", default="16K")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-build", action="store_true", help="use plugin/build as it is")
    ap.add_argument("--plugin", type=Path,
                    help="measure this libnccl-net-linkguard.so instead (another commit's "
                         "build: the baseline of a change), with this tree's driver")
    a = ap.parse_args()
    if not 1 <= a.trials <= 10 or not 100 <= a.rate <= 1e6:
        ap.error("--trials: 1..10; --rate: 100..1000000")
    trials = 1 if a.quick else a.trials
    cells = cells_of(a)
    if a.plugin is not None and not a.plugin.is_file():
        ap.error(f"--plugin: no such file: {a.plugin}")
    if not a.no_build:
        build_plugin()
    if a.plugin is not None:
        pd.LINKGUARD_SO = a.plugin  # freeze_build copies it like its own
    build = freeze_build()
    build["plugin_given"] = str(a.plugin) if a.plugin else None
    results: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
                               "build": build, "daemon_args": DAEMON_ARGS, "rate": a.rate,
                               "trials": trials, "cells": []}
    try:
        for cell in cells:
            print(f"== {cell.procs} x {cell.conns} (pace {cell.pace_us(a.rate):.0f} us)",
                  file=sys.stderr, flush=True)
            res = run_cell(cell, trials, a.rate, a.size, build,
                           lambda s: print(s, file=sys.stderr, flush=True))
            results["cells"].append(res)
            print(json.dumps({k: res.get(k) for k in (
                "procs", "conns", "lossless", "fault_gap_ms", "control_gap_ms", "standby_s",
                "back_s", "seconds", "failure")}), file=sys.stderr, flush=True)
            if a.json:  # after each cell: a long run keeps what it measured so far
                a.json.write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(build["dir"], ignore_errors=True)  # copies and gap files
    print(table(results["cells"]))
    print()
    for line in goals(results["cells"]):
        print(f"- {line}")


if __name__ == "__main__":
    main()
