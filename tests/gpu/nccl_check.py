"""The real-NCCL check of linkguard; tests/gpu/run_nccl_check.sh runs it (see its header).

    python3 tests/gpu/nccl_check.py --out DIR [--dry-run] [--prefix lggXXXX] [--work DIR] ...

Phases, each bounded in time, all inside one overall limit (--timeout-s):
  lab        2 hosts x 2 rails (veth and a bridge per rail, 198.18.0.0/15 only inside), no
             nftables rules (only cuts are needed)
  daemons    one linkguardd per host, each with its own shm file (linkguard_lab.demo)
  failover   the verified all-reduce loop in a (rank 0) and b (rank 1); in a, the rail under
             the device NCCL connected through (its log says which; rail0 for the stand-in)
             is cut at the switch mid-loop, held down --fault-s, restored; the loop runs on
             until both plugins have switched back (or a bound), then the ranks stop together
  bandwidth  linkguard, then the baseline, each over the sizes
  teardown   always, also on SIGTERM or an error: ranks, daemons, namespaces
Writes DIR/result.json (schema in result.py), the failover phase's NCCL logs and
DIR/logs.tar.gz (every NCCL log, the ranks' and daemons' output). Exit status 0: pass,
1: fail, 2: bad arguments or a missing build.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (str(REPO), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from nccl_log import count_switches, cut_rail
from nccl_rank import DEFAULT_SIZES, MIB, parse_sizes
from ranks import DriverRanks, TorchRanks
from result import (
    bandwidth_section,
    failover_section,
    new_result,
    summary_lines,
    validate,
)

from bench.plugin_driver import DRIVER, LGTCP_SO, LINKGUARD_SO
from linkguard_lab.demo import SHM_DUMP, HostDaemon, start_daemons, unwind_on_sigterm
from linkguard_lab.errors import LabError
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.netns import require_root
from linkguard_lab.timeline import ShmEvent, first_event
from linkguard_lab.topology import check_prefix

WARM_ITERS = 20  # loop iterations both ranks must finish before the cut
INIT_TIMEOUT_S = 120.0  # CUDA context and NCCL init of both ranks, first iterations
BACK_TIMEOUT_S = 30.0  # after the hold-down: both plugins back on the restored rail
TAIL_S = 2.0
BENCH_TIMEOUT_S = 150.0  # one transport's sweep, init included
POLL_S = 0.1
# What comes back from a device run: result.json, the failover phase's two NCCL logs,
# logs.tar.gz, and console.log (run_nccl_check.sh): 5 files, under the 8 that travel back.


class ArgError(Exception):
    pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for result.json and the logs")
    p.add_argument("--work", default="", help="scratch folder (default: a fresh one in /tmp)")
    p.add_argument("--prefix", default="", help="lab prefix (default: a fresh lggXXXX)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU, no torch: lg_nccl_driver stands in for the ranks")
    p.add_argument("--steady-s", type=float, default=3.0, help="loop time before the cut")
    p.add_argument("--fault-s", type=float, default=5.0, help="how long rail0 stays cut")
    p.add_argument("--hold-down-ms", type=int, default=1000, help="the daemons' hold-down")
    p.add_argument("--elements", type=int, default=4 * MIB, help="loop: float32 elements")
    p.add_argument("--sizes", default="", help=f"bandwidth sizes (default {DEFAULT_SIZES}; "
                   "dry run 1M,4M)")
    p.add_argument("--budget-mib", type=int, default=None,
                   help="bandwidth: MiB moved per size (default 1024; dry run 32)")
    p.add_argument("--timeout-s", type=float, default=390.0, help="limit of the whole run")
    try:
        a = p.parse_args(argv)
    except SystemExit as exc:
        if exc.code == 0:  # --help
            raise
        raise ArgError("see the usage above") from exc
    a.sizes = a.sizes or ("1M,4M" if a.dry_run else DEFAULT_SIZES)
    if a.budget_mib is None:
        a.budget_mib = 32 if a.dry_run else 1024
    problems = []
    for name, lo, hi in (("steady_s", 0, 60), ("fault_s", 1, 60), ("hold_down_ms", 0, 30000),
                         ("timeout_s", 60, 3600), ("elements", 2, 1 << 28),
                         ("budget_mib", 1, 1 << 16)):
        if not lo <= getattr(a, name) <= hi:
            problems.append(f"--{name.replace('_', '-')} {getattr(a, name)}: must be "
                            f"{lo}..{hi}")
    try:
        parse_sizes(a.sizes)
        if a.prefix:
            check_prefix(a.prefix)
    except (ValueError, LabError) as exc:
        problems.append(str(exc))
    if problems:
        raise ArgError("; ".join(problems))
    return a


def missing_builds(dry_run: bool) -> list[str]:
    need = [LINKGUARD_SO, SHM_DUMP] + ([DRIVER, LGTCP_SO] if dry_run else [])
    return [str(p) for p in need if not p.exists()]


class Clock:
    """The run's overall deadline; every wait is bounded by it as well as by its own limit."""

    def __init__(self, limit_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline = self.t0 + limit_s

    def left(self, cap: float) -> float:
        return max(0.0, min(cap, self.deadline - time.monotonic()))


class DaemonWatch:
    """Polls every daemon's shm events (through the plugin's C reader) while a phase runs."""

    def __init__(self, daemons: list[HostDaemon]) -> None:
        self.daemons = daemons
        self.events: list[ShmEvent] = []

    def poll(self) -> None:
        for d in self.daemons:
            self.events += d.new_events()

    def until(self, seconds: float, done: Callable[[], bool] = lambda: False,
              alive: Callable[[], bool] = lambda: True) -> bool:
        """Poll for `seconds` at most; True as soon as done() holds (False: time ran out or
        alive() turned false)."""
        deadline = time.monotonic() + seconds
        while True:
            self.poll()
            if done():
                return True
            if time.monotonic() >= deadline or not alive():
                return False
            time.sleep(POLL_S)


def failover_phase(a: argparse.Namespace, lab: Lab, ranks: Any, watch: DaemonWatch,
                   clock: Clock) -> tuple[dict[str, Any], list[str]]:
    mode = "dry-run" if a.dry_run else "gpu"
    ranks.start_loop()
    try:
        if not watch.until(clock.left(INIT_TIMEOUT_S), lambda: ranks.progress() >= WARM_ITERS,
                           ranks.running):
            raise LabError(f"the ranks did not complete {WARM_ITERS} iterations "
                           f"(running: {ranks.running()})")
        watch.until(clock.left(a.steady_s), alive=ranks.running)
        # The rail under NCCL's device (the stand-in drives device 0: rail0).
        rail = cut_rail(ranks.summary("a"))
        rail = 0 if rail is None else rail
        cut_marks, cut_ns, cut_iter = ranks.marks(), lab.cut("a", rail), ranks.progress()
        print(f"cut a rail{rail} at iteration {cut_iter}", flush=True)
        watch.until(clock.left(a.fault_s), alive=ranks.running)
        restore_marks, restore_ns = ranks.marks(), lab.restore("a", rail)
        restore_iter = ranks.progress()
        print(f"restored a rail{rail} at iteration {restore_iter}", flush=True)

        def back() -> bool:
            return all(count_switches(ranks.summary(h)["switches"], "reintegrated",
                                      after=restore_marks[h]) for h in ("a", "b"))

        watch.until(clock.left(a.hold_down_ms / 1e3 + BACK_TIMEOUT_S), back, ranks.running)
        watch.until(clock.left(TAIL_S), alive=ranks.running)
    finally:
        ranks.stop()
    results = ranks.wait(clock.left(60.0) + 5)
    logs = {h: ranks.summary(h) for h in ("a", "b")}
    section, failures = failover_section(mode, results, logs, cut_marks, restore_marks)
    down = first_event(watch.events, nic=f"rail{rail}", new="DOWN", after_ns=cut_ns, host="a")
    up = first_event(watch.events, nic=f"rail{rail}", new="UP", after_ns=restore_ns, host="a")
    section.update(
        cut_rail=rail, cut_at_iteration=cut_iter, restore_at_iteration=restore_iter,
        daemon={"down": down and {"reason": down.reason, "ms_after_cut":
                                  (down.time_ns - cut_ns) / 1e6},
                "up": up and {"reason": up.reason, "ms_after_restore":
                              (up.time_ns - restore_ns) / 1e6}},
        max_iteration_ms=iteration_maxima(ranks.iteration_times("a"), cut_ns, restore_ns))
    return section, failures


def iteration_maxima(iters: list[list[float]], cut_ns: int, restore_ns: int
                     ) -> dict[str, float | None] | None:
    """The longest iteration before the cut, during the fault, after the restore (ms), from
    [start s, duration ms] rows on CLOCK_MONOTONIC; None without rows (the stand-in)."""
    if not iters:
        return None
    spans = {"before_cut": (0.0, cut_ns / 1e9), "fault": (cut_ns / 1e9, restore_ns / 1e9),
             "after_restore": (restore_ns / 1e9, float("inf"))}
    return {k: max((ms for t, ms in iters if lo <= t + ms / 1e3 and t < hi), default=None)
            for k, (lo, hi) in spans.items()}


def bandwidth_phase(a: argparse.Namespace, ranks: Any, clock: Clock
                    ) -> tuple[dict[str, Any], list[str]]:
    runs, logs = {}, {}
    for transport in ("linkguard", "socket"):
        runs[transport] = ranks.bench(transport, a.sizes, a.budget_mib,
                                      clock.left(BENCH_TIMEOUT_S))
        logs[transport] = {h: ranks.summary(h, transport) for h in ("a", "b")}
    return bandwidth_section("dry-run" if a.dry_run else "gpu", runs, logs)


def environment(a: argparse.Namespace, ranks: Any, rank_a: dict[str, Any]) -> dict[str, Any]:
    env = {"backend": ranks.kind, "python": sys.version.split()[0],
           "kernel": os.uname().release}
    for key in ("torch", "nccl", "cuda", "gpu"):
        if rank_a.get(key):
            env[key] = rank_a[key]
    # Set by run_nccl_check.sh: the commit, where the plugin, wheels and lab tools came from.
    for var in ("LG_GPU_COMMIT", "LG_GPU_PLUGIN", "LG_GPU_WHEELS", "LG_GPU_TOOLS"):
        if os.environ.get(var):
            env[var[7:].lower()] = os.environ[var]
    return env


def run(a: argparse.Namespace) -> dict[str, Any]:
    clock = Clock(a.timeout_s)
    out, work = Path(a.out), Path(a.work or tempfile.mkdtemp(prefix="lg-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    result = new_result("dry-run" if a.dry_run else "gpu",
                        datetime.now(UTC).isoformat(timespec="seconds"))
    lab = Lab(a.prefix or unique_prefix("lgg"), 2, 2, blackhole_rules=False)
    result["lab"] = {"prefix": lab.prefix, "torn_down": False}
    daemons: list[HostDaemon] = []
    max_s = a.steady_s + a.fault_s + a.hold_down_ms / 1e3 + BACK_TIMEOUT_S + TAIL_S + 30
    ranks: Any = (DriverRanks(lab, work, max_s) if a.dry_run else TorchRanks(
        lab, work, a.elements, max_s, os.environ.get("LG_GPU_RANK_PYTHON") or sys.executable))
    phase = "lab"
    try:
        lab.up()
        phase = "daemons"
        daemons = start_daemons(lab, ["--hold-down-ms", str(a.hold_down_ms)])
        phase = "failover"
        result["failover"], failures = failover_phase(a, lab, ranks, DaemonWatch(daemons), clock)
        result["failures"] += failures
        result["environment"] = environment(a, ranks, result["failover"]["ranks"].get("a", {}))
        phase = "bandwidth"
        result["bandwidth"], failures = bandwidth_phase(a, ranks, clock)
        result["failures"] += failures
    except (Exception, KeyboardInterrupt, SystemExit) as exc:  # noqa: BLE001 - the result says
        result["failures"].append(f"{phase}: {type(exc).__name__}: {exc}")
    finally:
        result["failures"] += teardown(lab, daemons, ranks, work)
        result["lab"]["torn_down"] = not lab.existing_namespaces()
        if not result["lab"]["torn_down"]:
            result["failures"].append(f"teardown: lab {lab.prefix} still has namespaces")
        result["environment"] = result["environment"] or environment(a, ranks, {})
        finish(result, out, work, clock)
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    return result


def teardown(lab: Lab, daemons: list[HostDaemon], ranks: Any, work: Path) -> list[str]:
    """Ranks, then daemons (their logs kept in `work`), then the namespaces; every step runs
    even when one before it fails. Returns what went wrong."""
    problems = []
    steps: list[tuple[str, Callable[[], None]]] = [("ranks", ranks.kill)]
    for d in daemons:
        def stop(d: HostDaemon = d) -> None:
            for name in ("stdout.log", "stderr.log"):
                if (d.workdir / name).exists():
                    shutil.copy(d.workdir / name, work / f"daemon-{d.host}-{name}")
            d.stop()
        steps.append((f"daemon {d.host}", stop))
    steps.append(("lab", lab.down))
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - go on with the rest, then report
            problems.append(f"teardown: {what}: {type(exc).__name__}: {exc}")
    return problems


def finish(result: dict[str, Any], out: Path, work: Path, clock: Clock) -> None:
    result["duration_s"] = round(time.monotonic() - clock.t0, 1)
    result["ok"] = not result["failures"] and result["failover"] is not None \
        and result["bandwidth"] is not None
    for name in ("nccl-failover-a.log", "nccl-failover-b.log"):
        if (work / name).exists():
            shutil.copy(work / name, out / name)
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="logs")
    result["artifacts"] = sorted({p.name for p in out.iterdir()} | {"result.json"})
    problems = validate(result)
    if problems:
        result["ok"] = False
        result["failures"] += [f"result schema: {p}" for p in problems]
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
        require_root()
    except (ArgError, LabError) as exc:
        print(f"nccl_check: {exc}", file=sys.stderr)
        return 2
    missing = missing_builds(a.dry_run)
    if missing:
        print(f"nccl_check: not built: {', '.join(missing)} (run make -C plugin)",
              file=sys.stderr)
        return 2
    previous = unwind_on_sigterm()
    try:
        result = run(a)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for line in summary_lines(result):
        print(line, flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
