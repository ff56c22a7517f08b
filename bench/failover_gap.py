"""Traffic gap on a failover, a silent blackhole, a reintegration and a drain.

    python -m bench.failover_gap [--trials 50] [--scenarios cut-sender,cut-receiver,blackhole,drain]
                                 [--size 256K] [--conns 1] [--pace-us 0] [--json out.json]

The gap is what NCCL would feel: the largest interval between two consecutive completions of a
connection (lg_nccl_driver --duration-s, completion times in CLOCK_MONOTONIC ns), around a fault
whose injection is stamped on the same clock.

Each scenario gets a throw-away 2-host x 2-rail lab (prefix lgfg*), linkguardd in both hosts
(--hold-down-ms 300 --flap-penalty 0: every trial is one more flap of rail0, and damping would
keep the NIC out after the second; neither setting is on the path to a failover) and one pair
of drivers: a (client) sends to b (server) through libnccl-net-linkguard.so, device 0 = rail0
primary + rail1 standby, every byte verified, running for the whole scenario. A trial:

  1. a random 0.4-0.8 s of traffic on the primary (faults do not keep step with anything);
  2. the fault, stamped just before its netlink request (or the drain call):
       cut-sender    cut a's rail0 at the switch (a loses carrier)
       cut-receiver  cut b's rail0 at the switch
       blackhole     drop everything through a's rail0 switch port, carrier stays up: no
                     daemon signal, the plugin's own silent-failure timeout has to find it
       drain         Drain rail0 on a through linkguardd's gRPC API with linkguard-cli's own
                     client, called in this process (DRAINED: a graceful move); Undrain
  3. wait (bounded) until the plugin logs the switch, then 0.3 s of traffic on the standby;
  4. the repair (restore / unblackhole / undrain) and a bounded wait for the plugin's
     reintegration line (after the daemon's UP and hold-down), then 0.3 s on the primary.

Per trial the harness reads, from both drivers' reports (gaps of at least 1 ms are listed):
  fault gap   the largest gap overlapping [fault, last connection's failover line + 50 ms]
              ([fault, repair) when the plugin logged no failover); for drain the window
              opens at the daemon's DRAINED, not at the CLI call (a Python process starting
              on these 2 CPUs makes gaps of its own)
  return gap  the largest gap that starts after the repair and overlaps [the daemon's UP
              (the repair itself for a blackhole, which the daemon never saw), last
              reintegration line + 50 ms]
  control     the largest gap in an equal stretch (at least 300 ms) just before the fault,
              with no fault: the machine's own noise
A trial in which no failover line appears is counted and reported as such; a scenario stops
early after --max-missed of them (the connection may be dead: that is the result).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench.plugin_driver as pd
from bench.lab_iperf import machine
from bench.plugin_driver import DriverResult, StreamLine, build_plugin, lab_starter
from bench.plugin_driver import start_stream_pair as start_pair
from linkguard.v1 import linkguard_pb2 as pb
from linkguard_cli.client import Client
from linkguard_lab import demo
from linkguard_lab.demo import PAIRS, HostDaemon, driver_env, start_daemons
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.timeline import (
    Gap,
    PluginLine,
    ShmEvent,
    largest_gap,
    largest_stall,
    parse_plugin_line,
    report_gaps,
    switch_window,
)

LIST_MS = 1.0  # gaps at least this long are listed by the driver; shorter ones count as this
CONTROL_NS = 300_000_000
DAEMON_ARGS = ["--hold-down-ms", "300", "--flap-penalty", "0"]


# --- a private copy of the build ------------------------------------------------------------

def freeze_build() -> dict[str, Any]:
    """Copies the driver, lg_shm_dump and the plugin into a private directory and points the
    harness at the copies: a `make` in the shared tree during a long run (another engineer's
    build) must not swap binaries under it. Returns what was measured: paths, the plugin's
    sha256, the commit, and whether plugin/ had uncommitted changes."""
    tmp = Path(tempfile.mkdtemp(prefix="lgbench-", dir="/tmp"))
    for src in (pd.DRIVER, demo.SHM_DUMP, pd.LINKGUARD_SO, pd.LGTCP_SO):
        shutil.copy2(src, tmp / src.name)
    pd.DRIVER = tmp / pd.DRIVER.name
    demo.SHM_DUMP = tmp / demo.SHM_DUMP.name
    so = tmp / pd.LINKGUARD_SO.name
    git = ["git", "-C", str(pd.REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "plugin"], capture_output=True,
                           text=True, check=False).stdout.strip()
    return {"dir": str(tmp), "plugin": str(so), "inner": str(tmp / pd.LGTCP_SO.name),
            "commit": head,
            "plugin_sha256": hashlib.sha256(so.read_bytes()).hexdigest()[:16],
            "plugin_tree_dirty": bool(dirty)}


# --- watching a run ------------------------------------------------------------------------

class Watcher:
    """Plugin log lines of the running drivers (by role) and the daemons' shm events."""

    def __init__(self, daemons: list[HostDaemon]) -> None:
        self.daemons = daemons
        self.lock = threading.Lock()
        self.plugin: list[PluginLine] = []
        self.events: list[ShmEvent] = []
        self.other: list[StreamLine] = []

    def on_line(self, line: StreamLine) -> None:
        pl = parse_plugin_line(line.text)
        with self.lock:
            if pl is not None:
                pl.role, pl.read_ns = line.role, line.read_ns
                self.plugin.append(pl)
            elif not line.text.startswith("lg_nccl_driver: progress"):
                self.other.append(line)

    def poll(self) -> None:
        for d in self.daemons:
            self.events += d.new_events()

    def lines(self, kind: str, after_ns: int, role: str | None = None) -> list[PluginLine]:
        with self.lock:
            return [p for p in self.plugin if p.kind == kind and (p.when_ns or 0) >= after_ns
                    and role in (None, p.role)]

    def wait(self, pred: Callable[[], Any], timeout_s: float, alive: Callable[[], bool],
             period_s: float = 0.02) -> Any:
        """Poll until pred() is truthy (returned), the drivers die, or the time is up. Each
        turn reads both daemons' events (a process each): a longer period loads the CPUs less."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            got = pred()
            if got or time.monotonic() >= deadline or not alive():
                return got
            time.sleep(period_s)


# --- scenarios -----------------------------------------------------------------------------

@dataclass
class Scenario:
    name: str
    host: str  # where the fault is
    what: str
    fail_wait_s: float  # how long a trial waits for the switch
    inject: Callable[[Lab, dict[str, HostDaemon]], int]
    repair: Callable[[Lab, dict[str, HostDaemon]], int]
    back_wait_s: float = 6.0  # how long a trial waits for the reintegration
    # After the return, wait this long before the next fault. The plugin doubles the delay
    # before rebuilding a path that fails again within 10 s of its rebuild (flap damping of
    # a path it found silent, up to LINKGUARD_REJOIN_MAX_MS): blackhole trials leave 10.5 s.
    cooldown_s: float = 0.0
    window_from_daemon: bool = False  # the gap window opens at the daemon's verdict


def drain_stamped(d: HostDaemon, nic: str, drain: bool, reason: str = "bench") -> int:
    """Drain (or undrain) `nic` through linkguardd's gRPC API with linkguard-cli's own client,
    in this process: a CLI process starting per trial would load these 2 CPUs for ~0.5 s and
    make gaps of its own. Returns the monotonic ns taken just before the call."""
    client = Client(str(d.grpc_socket), timeout=10)
    try:
        t = time.monotonic_ns()
        if drain:
            client.call("Drain", pb.DrainRequest(nic=nic, reason=reason))
        else:
            client.call("Undrain", pb.UndrainRequest(nic=nic))
    finally:
        client.close()
    return t


SCENARIOS = {
    "cut-sender": Scenario("cut-sender", "a", "cut a rail0 (sender's NIC loses carrier)", 5.0,
                           lambda lab, d: lab.cut("a", 0), lambda lab, d: lab.restore("a", 0)),
    "cut-receiver": Scenario("cut-receiver", "b", "cut b rail0 (receiver's NIC loses carrier)",
                             5.0, lambda lab, d: lab.cut("b", 0),
                             lambda lab, d: lab.restore("b", 0)),
    "blackhole": Scenario("blackhole", "a", "blackhole a rail0 (silent: carrier stays up)",
                          8.0, lambda lab, d: lab.blackhole("a", 0),
                          lambda lab, d: lab.unblackhole("a", 0), back_wait_s=35.0,
                          cooldown_s=10.5),
    # Nothing stalls before the daemon publishes DRAINED: the gap is looked for from then on.
    "drain": Scenario("drain", "a", "drain rail0 on a (gRPC Drain, as linkguard-cli), then "
                      "undrain", 8.0, lambda lab, d: drain_stamped(d["a"], "rail0", True),
                      lambda lab, d: drain_stamped(d["a"], "rail0", False),
                      window_from_daemon=True),
}


@dataclass
class Trial:
    index: int
    fault_ns: int
    repair_ns: int = 0
    failover_ns: int | None = None  # first failover line after the fault (plugin's stamp)
    failover_msg: str | None = None
    on_primary: bool = True  # every connection was on its primary path at the fault
    reintegrated_ns: int | None = None
    reintegration_msg: str | None = None
    daemon_fault_ns: int | None = None  # the daemon's DOWN/DRAINED event (time_ns)
    daemon_up_ns: int | None = None
    fault_gap_ms: float | None = None
    fault_stall_ms: float | None = None  # from the fault to the next completion, at most
    return_stall_ms: float | None = None
    return_gap_ms: float | None = None
    control_gap_ms: float | None = None
    fault_gap: dict[str, Any] = field(default_factory=dict)
    return_gap: dict[str, Any] = field(default_factory=dict)


def run_scenario(sc: Scenario, trials: int, size: str, conns: int, pace_us: float,
                 max_missed: int, seed: int, log: Callable[[str], None],
                 plugin: Path | None = None, idle_us: int = 0,
                 workdir: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    per_trial_s = 1.0 + sc.fail_wait_s + 0.3 + 0.3 + sc.back_wait_s + sc.cooldown_s
    bound_s = trials * per_trial_s + 60
    out: dict[str, Any] = {"scenario": sc.name, "what": sc.what, "trials": [], "size": size,
                           "conns": conns, "pace_us": pace_us, "idle_us": idle_us}
    with Lab(unique_prefix("lgfg"), 2, 2) as lab:
        lab.up()
        daemons = start_daemons(lab, DAEMON_ARGS)
        by_host = {d.host: d for d in daemons}
        watch = Watcher(daemons)
        args = ["--size", size, "--depth", "8", "--conns", str(conns), "--timestamps",
                "--gap-list-ms", str(LIST_MS), "--top-gaps", "20"]
        if pace_us:
            args += ["--pace-us", str(pace_us)]
        if idle_us:
            args += ["--idle-us", str(idle_us)]
        pair = None
        per_role: dict[str, list[str]] = {"server_args": [], "client_args": []}
        if workdir is not None:  # every gap >= LIST_MS, uncapped (long runs have many)
            per_role = {f"{role}_args": ["--gap-file", str(workdir / f"gaps-{sc.name}-{role}")]
                        for role in ("server", "client")}
        try:
            pair = start_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                              f"{lab.mgmt_address('b')}:7000", bound_s, args,
                              env={"LINKGUARD_PAIRS": PAIRS, "NCCL_DEBUG": "INFO",
                                   "NCCL_DEBUG_SUBSYS": "NET", **(extra_env or {})},
                              server_env=driver_env(lab, "b"), client_env=driver_env(lab, "a"),
                              timeout=bound_s + 60, on_line=watch.on_line,
                              **({"plugin": plugin} if plugin else {}), **per_role)
            time.sleep(1.0)
            missed = 0
            for i in range(trials):
                if not pair.running():
                    log(f"  {sc.name}: the drivers exited before trial {i}")
                    break
                time.sleep(rng.uniform(0.4, 0.8))
                t = Trial(i, sc.inject(lab, by_host))
                fo = watch.wait(lambda t=t: watch.lines("failover", t.fault_ns - 5_000_000),
                                sc.fail_wait_s, pair.running)
                if fo:
                    t.failover_ns, t.failover_msg = fo[0].when_ns, fo[0].msg
                time.sleep(0.3)
                t.repair_ns = sc.repair(lab, by_host)
                # Back when both sides logged the return (the sender decides, the receiver
                # follows its SWITCH).
                back = watch.wait(lambda t=t: len({p.role for p in watch.lines(
                    "reintegration", t.repair_ns)}) == 2, sc.back_wait_s, pair.running)
                lines = watch.lines("reintegration", t.repair_ns)
                if lines:
                    t.reintegrated_ns, t.reintegration_msg = lines[0].when_ns, lines[0].msg
                time.sleep(0.3 + (sc.cooldown_s if back else 0))
                out["trials"].append(t)
                state = (f"switched +{(t.failover_ns - t.fault_ns) / 1e6:.1f} ms"
                         if t.failover_ns else "NO SWITCH LINE")
                log(f"  {sc.name} trial {i + 1}/{trials}: {state}; "
                    f"{'back' if back else 'NOT BACK'}")
                if not fo:
                    missed += 1
                    if missed >= max_missed:
                        log(f"  {sc.name}: {missed} trials without a switch: stopping")
                        break
            for proc in pair.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGUSR1)  # the drivers we started, by PID
            server, client = pair.wait(timeout=120)
            watch.poll()
        finally:
            if pair is not None:
                pair.kill()
            for d in daemons:
                d.stop()
    analyse(out, server, client, watch, sc)
    return out


def analyse(out: dict[str, Any], server: DriverResult, client: DriverResult, watch: Watcher,
            sc: Scenario) -> None:
    reports = {"server": server.report, "client": client.report}
    gaps: list[Gap] = []
    for role, rep in reports.items():
        gaps += report_gaps(role, rep)
    trials: list[Trial] = out["trials"]
    t_end = max(int(r.get("t_end_ns", 0) or 0) for r in reports.values())
    for k, t in enumerate(trials):
        nxt = trials[k + 1].fault_ns if k + 1 < len(trials) else t_end
        for e in watch.events:
            if e.host != sc.host or e.nic != "rail0":
                continue
            if (e.new in ("DOWN", "DRAINED") and t.fault_ns <= e.time_ns < t.repair_ns
                    and t.daemon_fault_ns is None):
                t.daemon_fault_ns = e.time_ns
            if e.new == "UP" and t.repair_ns <= e.time_ns < nxt and t.daemon_up_ns is None:
                t.daemon_up_ns = e.time_ns
        t.on_primary = on_primary(watch.plugin, t.fault_ns)
        # The switch's gap lies between the fault and the last connection's switch (+50 ms);
        # without a switch line, anywhere before the repair. Likewise for the return, from the
        # repair; its gap starts after the repair (a stall from the fault is the fault's).
        opens = t.daemon_fault_ns if sc.window_from_daemon and t.daemon_fault_ns else t.fault_ns
        w = switch_window(watch.plugin, "failover", opens, t.repair_ns)
        g = largest_gap(gaps, *w)
        t.fault_gap_ms = g.ms if g else LIST_MS
        t.fault_gap = _gap_info(g, t.fault_ns)
        t.fault_stall_ms = largest_stall(gaps, *w) or LIST_MS
        # The return starts with the daemon's UP (after its hold-down) where there is one;
        # before it, the repair itself (for drain: a CLI process starting) is not the return.
        wr = switch_window(watch.plugin, "reintegration", t.daemon_up_ns or t.repair_ns, nxt)
        r = largest_gap([x for x in gaps if t.repair_ns <= x.start_ns < nxt], *wr)
        t.return_gap_ms = r.ms if r else LIST_MS
        t.return_gap = _gap_info(r, t.repair_ns)
        t.return_stall_ms = largest_stall([x for x in gaps if t.repair_ns <= x.start_ns < nxt],
                                          *wr) or LIST_MS
        # Control: the same stretch of time just before the fault, when nothing happened.
        span = max(w[1] - w[0], CONTROL_NS)
        c = largest_gap([x for x in gaps if x.end_ns <= t.fault_ns], t.fault_ns - span,
                        t.fault_ns)
        t.control_gap_ms = c.ms if c else LIST_MS
    out["trials"] = [asdict(t) for t in trials]
    out["driver"] = {role: {k: r.get(k) for k in (
        "ok", "failure", "errors", "corrupt_messages", "missing_messages",
        "duplicated_messages", "reordered_messages", "unwritten_messages", "bytes_received",
        "bytes_sent", "completions", "gbps", "seconds")} for role, r in reports.items()}
    out["driver_ok"] = bool(server.ok and client.ok)
    # A trial measures something only if the traffic was on the primary when it began.
    valid = [t for t in trials if t.on_primary]
    out["switched"] = sum(1 for t in valid if t.failover_ns)
    out["reintegrated"] = sum(1 for t in valid if t.reintegrated_ns)
    out["not_on_primary"] = len(trials) - len(valid)
    out["summary"] = {key: stats([getattr(t, key) for t in valid])
                      for key in ("fault_gap_ms", "return_gap_ms", "control_gap_ms",
                                  "fault_stall_ms", "return_stall_ms")}
    # How many trials went over the 50 ms, and how many control windows did.
    out["over_50ms"] = {key: sum(1 for t in valid if (getattr(t, key) or 0) > 50)
                        for key in ("fault_gap_ms", "return_gap_ms", "control_gap_ms")}
    out["summary"]["switch_line_ms"] = stats([(t.failover_ns - t.fault_ns) / 1e6
                                              for t in valid if t.failover_ns])
    # From the daemon's verdict in shared memory to the plugin's switch line (cut, drain).
    out["summary"]["daemon_to_switch_ms"] = stats([
        (t.failover_ns - t.daemon_fault_ns) / 1e6 for t in valid
        if t.failover_ns and t.daemon_fault_ns])
    out["plugin_warnings"] = [p.msg for p in watch.plugin if p.kind == "warn"][:20]
    out["switch_lines"] = [[p.when_ns, p.role, p.kind, p.msg] for p in watch.plugin
                           if p.kind in ("failover", "reintegration", "switch", "warn")]
    # A full gap list drops the latest gaps: the trials after that point are not measured.
    out["gap_list_dropped"] = sum(int(r.get("gaps", {}).get("list_dropped", 0) or 0)
                                  for r in reports.values())
    out["other_lines"] = [ln.text for ln in watch.other][:40]


def on_primary(lines: list[PluginLine], at_ns: int) -> bool:
    """Every connection's last switch line before `at_ns`, as its sender logged it (the sender
    decides which path carries the data), is a return, or there is none."""
    last: dict[tuple[str | None, str | None], str] = {}
    for p in sorted((p for p in lines if p.kind in ("failover", "reintegration")
                     and p.when_ns is not None and p.when_ns < at_ns
                     and (p.conn or "").startswith("send")),
                    key=lambda p: p.when_ns or 0):
        last[(p.role, p.conn)] = p.kind
    return all(k == "reintegration" for k in last.values())


def _gap_info(g: Gap | None, zero: int) -> dict[str, Any]:
    if g is None:
        return {}
    return {"ms": round(g.ms, 3), "role": g.role, "send": g.send, "open": g.open,
            "start_ms": round((g.start_ns - zero) / 1e6, 3),
            "end_ms": round((g.end_ns - zero) / 1e6, 3)}


def stats(values: list[float | None]) -> dict[str, Any]:
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"n": 0}

    def pct(p: float) -> float:  # nearest rank
        return v[max(0, math.ceil(p / 100 * len(v)) - 1)]

    return {"n": len(v), "p50": round(pct(50), 3), "p99": round(pct(99), 3),
            "max": round(v[-1], 3), "min": round(v[0], 3)}


def main() -> None:
    demo.unwind_on_sigterm()  # a SIGTERM tears the lab, daemons and drivers down too
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--scenarios", default="cut-sender,cut-receiver,blackhole,drain")
    ap.add_argument("--size", default="256K")
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--pace-us", type=float, default=0.0)
    ap.add_argument("--idle-us", type=int, default=0,
                    help="drivers sleep this long when idle instead of spinning like NCCL")
    ap.add_argument("--max-missed", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-build", action="store_true", help="use plugin/build as it is")
    ap.add_argument("--wrap", action="store_true",
                    help="wrap mode: LINKGUARD_INNER = the standalone lgtcp build")
    a = ap.parse_args()
    if not a.no_build:
        build_plugin()
    build = freeze_build()
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "build": build,
               "daemon_args": DAEMON_ARGS, "list_min_ms": LIST_MS, "wrap": a.wrap,
               "scenarios": []}
    try:
        run_all(a, build, results)
    finally:
        shutil.rmtree(build["dir"], ignore_errors=True)  # copies and gap files
    print(table(results))


def run_all(a: argparse.Namespace, build: dict[str, Any], results: dict[str, Any]) -> None:
    for name in a.scenarios.split(","):
        sc = SCENARIOS[name]
        print(f"== {name}: {sc.what}", file=sys.stderr, flush=True)
        res = run_scenario(sc, a.trials, a.size, a.conns, a.pace_us, a.max_missed, a.seed,
                           lambda s: print(s, file=sys.stderr, flush=True),
                           plugin=Path(build["plugin"]), idle_us=a.idle_us,
                           workdir=Path(build["dir"]),
                           extra_env={"LINKGUARD_INNER": build["inner"],
                                      "LGTCP_IFS": "rail0,rail1"} if a.wrap else None)
        res["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
        results["scenarios"].append(res)
        print(json.dumps({"scenario": name, "switched": res["switched"],
                          "reintegrated": res["reintegrated"], "driver_ok": res["driver_ok"],
                          **res["summary"]}), flush=True)
        if a.json:  # after each scenario: a long run leaves what it measured so far
            a.json.write_text(json.dumps(results, indent=1))


def table(results: dict[str, Any]) -> str:
    rows = [("| scenario | trials on primary | switched / back | gap at the fault p50 / p99 / "
             "max ms | of it after the fault p50 / p99 / max ms | gap at the return p50 / p99 "
             "/ max ms | control p50 / p99 / max ms | > 50 ms: fault / return / control | "
             "lossless |"),
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results["scenarios"]:
        s = r["summary"]

        def f(k: str, s: dict[str, Any] = s) -> str:
            x = s.get(k, {})
            return f"{x['p50']:.1f} / {x['p99']:.1f} / {x['max']:.1f}" if x.get("n") else "-"

        lossless = r["driver_ok"] and all(
            not d["corrupt_messages"] and not d["missing_messages"] and not d["errors"]
            for d in r["driver"].values())
        over = r.get("over_50ms", {})
        rows.append(f"| {r['scenario']} | {len(r['trials']) - r['not_on_primary']} | "
                    f"{r['switched']} / {r['reintegrated']} | {f('fault_gap_ms')} | "
                    f"{f('fault_stall_ms')} | {f('return_gap_ms')} | {f('control_gap_ms')} | "
                    f"{over.get('fault_gap_ms', '-')} / {over.get('return_gap_ms', '-')} / "
                    f"{over.get('control_gap_ms', '-')} | {'yes' if lossless else 'NO'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
