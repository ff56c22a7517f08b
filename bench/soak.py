"""Soak: hundreds of mixed link faults under verified traffic, in one run, with nothing lost.

    python -m bench.soak [--faults 200] [--seed 1] [--json out.json]

One throw-away 2-host x 2-rail lab (prefix lgsk*), linkguardd in both hosts
(--hold-down-ms 300 --flap-penalty 0, so that a repaired NIC is back in 0.3 s and a run of
faults on one rail is not damped for minutes), and two pairs of drivers running through the
whole soak, both ways, every byte verified:

  dev0  a <-> b on device 0 (rail0 primary, rail1 standby), 2 connections, 256 KiB messages
  dev1  a <-> b on device 1 (rail1 primary, rail0 standby), 1 connection, 1000003-byte
        messages (not a multiple of anything: chunk boundaries move)

so every fault on a rail hits the primary path of one pair and the standby path of the other.
One fault at a time, drawn at random (seeded) among:

  cut        switch port of HOST's RAIL down for 0.2-1.5 s, then up
  nicdown    HOST's RAIL NIC administratively down for 0.2-1.5 s, then up
  blackhole  HOST's RAIL silently dropped at the switch for 1.5-2.5 s (no daemon signal)
  flap       2-6 cut/restore cycles of 40-200 ms
  drain      Drain RAIL on HOST (gRPC, linkguard-cli's client) for 0.2-1.5 s, then Undrain

After each repair the soak waits (bounded, 15 s) until both daemons report every NIC UP, every
connection that logged a switch since the fault has logged its way back, every standby path
the plugin reported lost has been rebuilt, and the plugin has logged nothing about its paths
for 0.7 s (a silent failure or a lost standby is noticed only after the 300 ms silent
timeout, possibly after the repair), then 0.3 s more, so that the next fault never
meets a connection whose other path is still down (two dead paths are a clear, bounded error
by design, not a soak result). A fault after which this did not happen in time is counted
(`unsettled`) and the soak goes on.

The verdict comes from the drivers: zero corrupted, lost (missing), duplicated, reordered and
never-written messages, no error returned by the plugin, no failure. From the drivers' gap lists
(every gap of at least 2 ms between two completions of one comm, on every driver) each fault
gets:

  gap         the largest gap that starts in [fault - 50 ms, repair) and reaches the fault: a
              gap the fault caused starts at the last completion before it; one that began
              earlier was already under way (the machine's own noise)
  return gap  the largest gap that starts in [repair, next fault): the return to the primary
              (rebuild, graceful switch back) and whatever else happened before the next fault
  stall       the longest wait for a completion counted from the fault, up to the repair: like
              the gap, but it also covers a gap already under way when the fault came
  control     the largest gap that ends in the 300 ms before the fault, when nothing happened
              (the tail of the settling wait): this machine's own noise with four drivers

  switch gap  the largest gap that starts at or after fault - 50 ms and overlaps [fault, the
              last failover line before the repair + 50 ms]: the switch itself, as in
              bench/failover_gap.py, without what happens later on the standby path

and the plugin's log lines and the daemons' state changes from the fault to the next one, what
the previous fault was and how long before this one it was repaired, the 1-minute load
average, and what the kernel counted meanwhile: TCP retransmissions and retransmission
timeouts in each lab host (the counters of the drivers' network namespaces) and packets dropped
because a CPU's input backlog was full (/proc/net/softnet_stat, all namespaces).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.failover_gap import (
    DAEMON_ARGS,
    Watcher,
    _gap_info,
    drain_stamped,
    freeze_build,
    stats,
)
from bench.lab_iperf import machine
from bench.plugin_driver import build_plugin, lab_starter, start_stream_pair
from linkguard_lab.demo import PAIRS, HostDaemon, driver_env, start_daemons, unwind_on_sigterm
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.timeline import Gap, largest_gap, largest_stall, report_gaps, switch_window

PAIRS_RUN = {  # name: (port, driver args)
    "dev0": (7000, ["--dev", "0", "--bidir", "--conns", "2", "--size", "256K"]),
    "dev1": (7001, ["--dev", "1", "--bidir", "--conns", "1", "--size", "1000003"]),
}
LIST_MS = 2.0  # gaps listed by the drivers; a long run at full speed has many of ~1 ms
MARGIN_NS = 50_000_000  # a fault's gap may start this long before it (the last completion)
CONTROL_NS = 300_000_000  # the quiet stretch before each fault whose largest gap is the control
POLL_S = 0.1  # the settling wait's period: each turn starts lg_shm_dump twice or four times
NET_COUNTERS = {"Tcp": ("RetransSegs",),  # /proc/PID/net/snmp, /proc/PID/net/netstat
                "TcpExt": ("TCPTimeouts", "TCPLossProbes", "TCPSpuriousRTOs")}
KEEP_MS = 20.0  # gaps at least this long are kept in the JSON (fault_log, big_gaps)
KINDS = (("cut", 3), ("nicdown", 2), ("blackhole", 2), ("flap", 2), ("drain", 2))


def inject(kind: str, lab: Lab, d: dict[str, HostDaemon], host: str, rail: int,
           rng: random.Random) -> tuple[int, int, str]:
    """Runs one fault to its repair; returns (fault_ns, repair_ns, description)."""
    if kind == "flap":
        count, period = rng.randint(2, 6), rng.uniform(40, 200)
        stamps = lab.flap(host, rail, count=count, period_ms=period)
        return stamps[0], stamps[-1], f"flap {host} rail{rail} x{count} {period:.0f} ms"
    hold = rng.uniform(1.5, 2.5) if kind == "blackhole" else rng.uniform(0.2, 1.5)
    if kind == "cut":
        t0 = lab.cut(host, rail)
        time.sleep(hold)
        t1 = lab.restore(host, rail)
    elif kind == "nicdown":
        t0 = lab.nicdown(host, rail)
        time.sleep(hold)
        t1 = lab.nicup(host, rail)
    elif kind == "blackhole":
        t0 = lab.blackhole(host, rail)
        time.sleep(hold)
        t1 = lab.unblackhole(host, rail)
    else:
        t0 = drain_stamped(d[host], f"rail{rail}", True, "soak")
        time.sleep(hold)
        t1 = drain_stamped(d[host], f"rail{rail}", False)
    return t0, t1, f"{kind} {host} rail{rail} {hold:.2f} s"


_LOST = re.compile(r"standby \w+ path on NIC \S+ .*lost")
_REBUILT = re.compile(r"path on NIC \S+ rebuilt")


QUIET_NS = 700_000_000  # no path news for this long (> the 300 ms silent timeout + heartbeats)


def net_counters(pid: int) -> dict[str, int]:
    """NET_COUNTERS of the network namespace that process `pid` lives in (a lab host's)."""
    out: dict[str, int] = {}
    for name in ("snmp", "netstat"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()
        except OSError:
            continue
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            prefix, keys = head.split(":", 1)
            wanted = NET_COUNTERS.get(prefix, ())
            for k, v in zip(keys.split(), vals.split(":", 1)[1].split(), strict=False):
                if k in wanted:
                    out[k] = int(v)
    return out


def snapshot(hosts: dict[str, int]) -> dict[str, Any]:
    """What the kernel counted so far, and the load: taken at each fault."""
    softnet = Path("/proc/net/softnet_stat").read_text().splitlines()
    return {"load1": float(Path("/proc/loadavg").read_text().split()[0]),
            "softnet_dropped": sum(int(line.split()[1], 16) for line in softnet),
            **{host: net_counters(pid) for host, pid in hosts.items()}}


def counted(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the kernel counted between two snapshots (by host, then in all namespaces)."""
    out: dict[str, Any] = {h: {k: after[h].get(k, 0) - v for k, v in c.items()}
                           for h, c in before.items() if isinstance(c, dict) and h in after}
    out["softnet_dropped"] = after["softnet_dropped"] - before["softnet_dropped"]
    return out


def settled(watch: Watcher, since_ns: int, repair_ns: int) -> bool:
    """Every NIC UP in both daemons, every connection that switched since `since_ns` has
    logged its way back (its last switch line is a reintegration), every standby path it lost
    since then has been rebuilt (a 'rebuilt' line after the 'lost' one), and the plugin has
    said nothing about paths for QUIET_NS, counted from the repair at the earliest: a silent
    failure (blackhole) or a lost standby is only noticed after the silent timeout, possibly
    after the repair, and must not be missed by a check that ran too early."""
    now = time.monotonic_ns()
    if now - repair_ns < QUIET_NS:
        return False
    for d in watch.daemons:
        states = d.states()
        if not states or any(s != "UP" for s in states.values()):
            return False
    last: dict[tuple[str | None, str], str] = {}
    with watch.lock:
        for p in watch.plugin:
            if not p.conn or (p.when_ns or 0) < since_ns:
                continue
            news = p.kind != "info" or _LOST.search(p.msg) or _REBUILT.search(p.msg)
            if news and now - (p.when_ns or 0) < QUIET_NS:
                return False  # still moving
            if p.kind in ("failover", "reintegration"):
                last[(p.role, p.conn)] = p.kind
            elif _LOST.search(p.msg):
                last[(p.role, p.conn + " standby")] = "lost"
            elif _REBUILT.search(p.msg) and last.get((p.role, p.conn + " standby")) == "lost":
                last[(p.role, p.conn + " standby")] = "rebuilt"
    return all(k in ("reintegration", "rebuilt") for k in last.values())


def run(faults: int, seed: int, log: Callable[[str], None], plugin: Path,
        idle_us: int = 0, workdir: Path | None = None,
        extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    bound_s = faults * 8 + 120
    kinds = [k for k, w in KINDS for _ in range(w)]
    done: list[dict[str, Any]] = []
    unsettled = 0
    with Lab(unique_prefix("lgsk"), 2, 2) as lab:
        lab.up()
        daemons = start_daemons(lab, DAEMON_ARGS)
        by_host = {d.host: d for d in daemons}
        watch = Watcher(daemons)
        pairs: dict[str, Any] = {}
        try:
            for name, (port, args) in PAIRS_RUN.items():
                def tagged(line: Any, name: str = name) -> None:
                    line.role = f"{name}:{line.role}"
                    watch.on_line(line)

                pairs[name] = start_stream_pair(
                    lab_starter(lab, "b"), lab_starter(lab, "a"),
                    f"{lab.mgmt_address('b')}:{port}", bound_s,
                    [*args, "--depth", "8", "--timestamps", "--gap-list-ms", str(LIST_MS),
                     *(["--idle-us", str(idle_us)] if idle_us else [])],
                    env={"LINKGUARD_PAIRS": PAIRS, "NCCL_DEBUG": "INFO",
                         "NCCL_DEBUG_SUBSYS": "NET", **(extra_env or {})},
                    server_env=driver_env(lab, "b"), client_env=driver_env(lab, "a"),
                    timeout=bound_s + 60, on_line=tagged, plugin=plugin,
                    **({f"{role}_args": ["--gap-file", str(workdir / f"gaps-{name}-{role}")]
                        for role in ("server", "client")} if workdir else {}))
            time.sleep(1.5)

            def alive() -> bool:
                return all(p.running() for p in pairs.values())

            # Host a runs every client, host b every server: dev0's pair stands for each host.
            hosts = {"a": pairs["dev0"].procs["client"].pid, "b": pairs["dev0"].procs["server"].pid}
            t_start = time.monotonic()
            for i in range(faults):
                if not alive():
                    log(f"soak: a driver exited before fault {i + 1}")
                    break
                kind, host, rail = rng.choice(kinds), rng.choice("ab"), rng.randint(0, 1)
                snap = snapshot(hosts)
                t0, t1, what = inject(kind, lab, by_host, host, rail, rng)
                ok = watch.wait(lambda t0=t0, t1=t1: settled(watch, t0, t1), 15.0, alive,
                                period_s=POLL_S)
                unsettled += not ok
                time.sleep(0.3)
                done.append({"i": i, "kind": kind, "host": host, "rail": rail, "what": what,
                             "fault_ns": t0, "repair_ns": t1, "settled": bool(ok),
                             "at_fault": snap})
                if (i + 1) % 10 == 0 or not ok:
                    log(f"soak: {i + 1}/{faults} faults, {time.monotonic() - t_start:.0f} s"
                        f"{'' if ok else f' (did not settle after {what})'}")
            if done:
                done[-1]["at_end"] = snapshot(hosts)
            for p in pairs.values():
                for proc in p.procs.values():
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGUSR1)  # the drivers we started, by PID
            results = {name: p.wait(timeout=180) for name, p in pairs.items()}
            watch.poll()
        finally:
            for p in pairs.values():
                p.kill()
            for d in daemons:
                d.stop()
    return verdict(done, results, watch, unsettled)


def verdict(done: list[dict[str, Any]], results: dict[str, Any], watch: Watcher,
            unsettled: int) -> dict[str, Any]:
    counters = ("corrupt_messages", "missing_messages", "duplicated_messages",
                "reordered_messages", "unwritten_messages", "size_mismatches")
    drivers: dict[str, Any] = {}
    gaps: list[Gap] = []
    totals: dict[str, int] = defaultdict(int)
    all_ok = True
    for name, (server, client) in results.items():
        for role, r in (("server", server), ("client", client)):
            rep = r.report
            drivers[f"{name}:{role}"] = {k: rep.get(k) for k in (
                "ok", "failure", "errors", "bytes_received", "completions", *counters)}
            all_ok &= r.ok
            for k in counters:
                totals[k] += int(rep.get(k, 0) or 0)
            totals["errors"] += len(rep.get("errors", []))
            totals["bytes_received"] += int(rep.get("bytes_received", 0) or 0)
            totals["messages_received"] += sum(c["completed"] for c in rep.get("comms", [])
                                               if not c["send"])
            gaps += report_gaps(f"{name}:{role}", rep)
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for k, f in enumerate(done):
        t0, t1 = f["fault_ns"], f["repair_ns"]
        nxt = done[k + 1]["fault_ns"] if k + 1 < len(done) else t1 + 10**10
        g = largest_gap([x for x in gaps if t0 - MARGIN_NS <= x.start_ns < t1], t0, nxt)
        r = largest_gap([x for x in gaps if t1 <= x.start_ns < nxt], t1, nxt)
        f["gap_ms"] = round(g.ms, 3) if g else LIST_MS
        f["gap"] = _gap_info(g, t0)
        f["return_gap_ms"] = round(r.ms, 3) if r else LIST_MS
        f["return_gap"] = _gap_info(r, t0)
        f["stall_ms"] = round(largest_stall(gaps, t0, t1) or LIST_MS, 3)
        w = switch_window(watch.plugin, "failover", t0, t1)
        switched = [p.when_ns for p in watch.plugin if p.kind == "failover" and p.when_ns
                    and t0 <= p.when_ns < t1]
        if switched:  # no failover line, no switch to measure
            sg = largest_gap([x for x in gaps if x.start_ns >= t0 - MARGIN_NS], *w)
            f["switch_ms"] = round((min(switched) - t0) / 1e6, 3)
            f["switch_gap_ms"] = round(sg.ms, 3) if sg else LIST_MS
        c = largest_gap([x for x in gaps if x.end_ns <= t0], t0 - CONTROL_NS, t0)
        f["control_ms"] = round(c.ms, 3) if c else LIST_MS
        if k:
            prev = done[k - 1]
            f["prev"] = {"what": prev["what"], "rail": prev["rail"],
                         "repaired_ms_before": round((t0 - prev["repair_ns"]) / 1e6, 1)}
        f["lines"] = [f"{((p.when_ns or 0) - t0) / 1e6:+.1f} ms {p.role}: {p.msg}"
                      for p in watch.plugin if t0 - MARGIN_NS <= (p.when_ns or 0) < nxt]
        f["daemon"] = [f"{(e.time_ns - t0) / 1e6:+.1f} ms {e.host} {e.nic} {e.old} -> {e.new}"
                       for e in watch.events if t0 - MARGIN_NS <= e.time_ns < nxt]
        after = done[k + 1]["at_fault"] if k + 1 < len(done) else f.get("at_end")
        if after:
            f["counted"] = counted(f["at_fault"], after)
        for key in ("gap_ms", "return_gap_ms", "stall_ms", "control_ms", "switch_gap_ms"):
            if key in f:
                by_kind[f["kind"]][key].append(f[key])
    lines = watch.plugin
    return {
        "faults": len(done), "by_kind": {k: len(v["gap_ms"]) for k, v in by_kind.items()},
        "gap_ms_by_kind": {k: stats(v["gap_ms"]) for k, v in by_kind.items()},
        "return_gap_ms_by_kind": {k: stats(v["return_gap_ms"]) for k, v in by_kind.items()},
        "stall_ms_by_kind": {k: stats(v["stall_ms"]) for k, v in by_kind.items()},
        "control_ms_by_kind": {k: stats(v["control_ms"]) for k, v in by_kind.items()},
        "switch_gap_ms_by_kind": {k: stats(v["switch_gap_ms"]) for k, v in by_kind.items()},
        "gap_ms_all": stats([f["gap_ms"] for f in done]),
        "line_counts": line_counts(lines),
        "big_gaps": [[g.role, g.comm, g.start_ns, g.end_ns] for g in sorted(
            gaps, key=lambda g: g.start_ns) if g.ms >= KEEP_MS],
        "unsettled": unsettled, "drivers_ok": bool(all_ok), "totals": dict(totals),
        "gap_list_dropped": sum(int(r.report.get("gaps", {}).get("list_dropped", 0) or 0)
                                for pair in results.values() for r in pair),
        "failover_lines": sum(1 for p in lines if p.kind == "failover"),
        "reintegration_lines": sum(1 for p in lines if p.kind == "reintegration"),
        "warnings": [p.msg for p in lines if p.kind == "warn"][:30],
        "drivers": drivers, "fault_log": done,
        "lossless": bool(all_ok and totals["errors"] == 0
                         and all(totals[k] == 0 for k in counters)),
    }


_COUNTED = {  # plugin lines counted over the run, by what they say
    "standby_lost": _LOST,
    "rebuilt": _REBUILT,
    "rebuild_failed": re.compile(r"rebuilding the \w+ path on NIC \S+ failed"),
    "switch_reproposed": re.compile(r"no RESYNC for epoch"),
    "no_working_path": re.compile(r"no working path"),
}


def line_counts(lines: list[Any]) -> dict[str, int]:
    """Switch lines by kind (sender and receiver each log one per connection and switch), and
    the other path news of the run."""
    out: dict[str, int] = defaultdict(int)
    for p in lines:
        if p.kind in ("failover", "reintegration", "switch", "warn"):
            side = (p.conn or "?").split()[0]
            out[f"{p.kind}_{side}"] += 1
        for name, rx in _COUNTED.items():
            if rx.search(p.msg):
                out[name] += 1
    return dict(sorted(out.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--idle-us", type=int, default=0,
                    help="drivers sleep this long when idle instead of spinning like NCCL")
    ap.add_argument("--no-build", action="store_true", help="use plugin/build as it is")
    ap.add_argument("--wrap", action="store_true",
                    help="wrap mode: LINKGUARD_INNER = the standalone lgtcp build")
    a = ap.parse_args()
    unwind_on_sigterm()  # a SIGTERM tears the lab, daemons and drivers down too
    if not a.no_build:
        build_plugin()
    build = freeze_build()
    try:
        res = run(a.faults, a.seed, lambda s: print(s, file=sys.stderr, flush=True),
                  Path(build["plugin"]), a.idle_us, Path(build["dir"]),
                  {"LINKGUARD_INNER": build["inner"], "LGTCP_IFS": "rail0,rail1"}
                  if a.wrap else None)
    finally:
        shutil.rmtree(build["dir"], ignore_errors=True)  # copies and gap files
    res["wrap"] = a.wrap
    res["machine"] = machine()
    res["build"] = build
    res["idle_us"] = a.idle_us
    res["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    res["daemon_args"] = DAEMON_ARGS
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    brief = {k: res[k] for k in ("faults", "by_kind", "unsettled", "drivers_ok", "totals",
                                 "failover_lines", "reintegration_lines", "line_counts",
                                 "lossless", "gap_ms_by_kind", "return_gap_ms_by_kind",
                                 "stall_ms_by_kind", "control_ms_by_kind",
                                 "switch_gap_ms_by_kind")}
    print(json.dumps(brief, indent=1))
    sys.exit(0 if res["lossless"] else 1)


if __name__ == "__main__":
    main()
