"""Footprint of linkguardd: RSS and CPU while it watches 8 lab NICs and nothing happens.

    python -m bench.footprint [--seconds 60] [--nics 8] [--json results.json]

A throw-away 1-host x 8-rail lab; linkguardd runs inside host a with --interfaces rail0..rail7
and otherwise default settings (statistics sampled every 1 s, DOM every 10 s, heartbeat every
50 ms, hold-down and damping as shipped, /metrics on 127.0.0.1:9846 inside the host namespace
with nobody scraping it; --no-metrics to leave it out); the gRPC API listens on a socket in a
temporary directory. After a warm-up (the first samples and lazy imports are start-up, not steady state)
it reads /proc/<pid>/stat (utime + stime, every thread of the process) and /proc/<pid>/status
(VmRSS, VmHWM) at the start and the end of the idle window, and RSS every 5 s in between, for
the daemon and any child processes it has (a verbs event watcher, for instance).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.detect_latency import BenchDaemon, machine
from linkguard_lab.lab import Lab, unique_prefix
from linkguardd.shm.reader import ShmReader

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY_S = 5.0


def descendants(pid: int) -> list[int]:
    """pid and every process below it (from /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text()
                         .split()]
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def cpu_ticks(pid: int) -> int:
    """utime + stime of the whole process (all threads), in clock ticks (proc(5))."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 (state) is index 0
    return int(fields[11]) + int(fields[12])  # fields 14 and 15: utime, stime


def status_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
            out[key] = int(value.split()[0])
    return out


def snapshot(pid: int) -> dict[str, Any]:
    procs = {}
    for p in descendants(pid):
        try:
            procs[p] = {"ticks": cpu_ticks(p), **status_kib(p)}
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited between listing and reading
    return {"at": time.monotonic(), "procs": procs}


def run(seconds: float = 60.0, nics: int = 8, warmup_s: float = 10.0,
        extra_args: tuple[str, ...] = (), metrics: bool = True) -> dict[str, Any]:
    names = [f"rail{i}" for i in range(nics)]
    # /metrics as shipped (loopback port 9846), but on the host namespace's own loopback:
    # it listens, nothing scrapes it, so it costs what an idle exporter costs.
    metrics_address = "127.0.0.1:9846" if metrics else ""
    with tempfile.TemporaryDirectory(prefix="lgbench-") as tmp, \
            Lab(unique_prefix("lgb"), hosts=1, rails=nics).up() as lab:
        daemon = BenchDaemon(lab, "a", ["--interfaces", ",".join(names),
                                        "--metrics-address", metrics_address, *extra_args],
                             Path(tmp))
        try:
            daemon.start()
            pid = daemon.pid
            time.sleep(warmup_s)
            first = snapshot(daemon.pid)
            rss_samples = []
            deadline = first["at"] + seconds
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(SAMPLE_EVERY_S, left))
                rss_samples.append(sum(p["VmRSS"] for p in snapshot(daemon.pid)["procs"].values()))
            last = snapshot(daemon.pid)
            with_nics = len(daemon_nics(daemon))
        finally:
            daemon.stop()
    wall = last["at"] - first["at"]
    ticks = sum(p["ticks"] for p in last["procs"].values()) - sum(
        p["ticks"] for pid, p in first["procs"].items() if pid in last["procs"])
    main = last["procs"][pid]
    return {
        "machine": machine(), "nics": with_nics, "extra_args": list(extra_args),
        "metrics_address": metrics_address, "seconds": round(wall, 2), "warmup_s": warmup_s,
        "processes": len(last["procs"]), "threads": main.get("Threads"),
        "rss_mib_start": sum(p["VmRSS"] for p in first["procs"].values()) / 1024,
        "rss_mib_end": sum(p["VmRSS"] for p in last["procs"].values()) / 1024,
        "rss_mib_max_sampled": max(rss_samples, default=0) / 1024,
        "rss_mib_samples": [round(v / 1024, 2) for v in rss_samples],  # every 5 s: a trend
        "hwm_mib": sum(p.get("VmHWM", 0) for p in last["procs"].values()) / 1024,
        "rss_anon_mib_end": sum(p.get("RssAnon", 0) for p in last["procs"].values()) / 1024,
        "cpu_seconds": ticks / CLK_TCK,
        "cpu_percent_of_one_core": 100 * ticks / CLK_TCK / wall,
        "tick_resolution_percent": 100 / CLK_TCK / wall,  # one tick over the window
    }


def daemon_nics(daemon: BenchDaemon) -> list[str]:
    with ShmReader(daemon.shm_path) as r:
        return [n.name for n in r.snapshot()[1]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--nics", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--daemon-arg", action="append", default=[],
                        help="extra linkguardd argument, repeatable (--daemon-arg=--stats-"
                        "interval-s=60: what a component costs)")
    parser.add_argument("--no-metrics", action="store_true", help="run without /metrics")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if not 1 <= args.nics <= 64 or not 1 <= args.seconds <= 3600:
        parser.error("--nics 1..64, --seconds 1..3600")
    r = run(args.seconds, args.nics, args.warmup, tuple(args.daemon_arg), not args.no_metrics)
    print(f"linkguardd {' '.join(r['extra_args'])} (metrics "
          f"{r['metrics_address'] or 'off'}) watching {r['nics']} NICs, idle {r['seconds']:.0f} s after "
          f"{r['warmup_s']:g} s warm-up ({r['processes']} process(es), {r['threads']} threads):")
    print(f"  RSS {r['rss_mib_start']:.1f} MiB -> {r['rss_mib_end']:.1f} MiB (max sampled "
          f"{r['rss_mib_max_sampled']:.1f}, high-water {r['hwm_mib']:.1f}, anonymous "
          f"{r['rss_anon_mib_end']:.1f})")
    print(f"  CPU {r['cpu_seconds']:.2f} s = {r['cpu_percent_of_one_core']:.2f} % of one core "
          f"(resolution {r['tick_resolution_percent']:.3f} %)")
    ok = r["hwm_mib"] < 64 and r["cpu_percent_of_one_core"] < 1
    print(f"goal < 64 MiB and < 1 % of a core: {'met' if ok else 'NOT met'}")
    m = r["machine"]
    print(f"machine: {m['cpus']} CPUs, kernel {m['kernel']}, Python {m['python']}, {m['date']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
