"""Plugin transport bandwidth against iperf3 on the same lab rail, in the same run.

    python -m bench.plugin_bw [--trials 3] [--sizes 64K,256K,1M,4M] [--gib 3]
                              [--rtt-sizes 8,64K,1M] [--rtt-count 2000] [--json out.json]

A throw-away 2-host x 2-rail lab. Each trial measures, back to back on rail0 a -> b:
  - iperf3, one TCP stream (bench.lab_iperf.measure_iperf),
  - lg_nccl_driver through libnccl-net-linkguard.so (dev 0 = rail0 primary, rail1 backup),
    one connection, 8 messages in flight (NCCL_STEPS), for each message size, with the
    standing backup path on (default) and off (LINKGUARD_BACKUP=0),
  - the same with every byte verified (the pattern fill/check costs CPU on both ends),
  - round trips (bench.rtt), one message at a time each way, for each --rtt-sizes size:
    through the plugin (lg_nccl_driver --pingpong) and over a plain blocking TCP socket with
    TCP_NODELAY between the same rail0 addresses (lg_tcp_pingpong), and the same socket
    polled (--spin) as the driver polls test(); which goes first rotates from trial to
    trial; payload checked both ways.
Trials interleave the measurements so that load from other tenants hits them alike; the
report gives medians and the ratios the issues ask for (driver / iperf3, backup on / off,
and the round trip's minimum against plain TCP: goal <= 1.1). An empty --sizes skips the
bandwidth part (and iperf3), an empty --rtt-sizes the round trips.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import rtt
from bench.lab_iperf import machine, measure_iperf
from bench.plugin_driver import build_plugin, lab_starter, run_pair
from linkguard_lab.lab import Lab, unique_prefix

PAIRS = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}
parse_size = rtt.parse_size  # kept importable from here
RTT_GOAL = ("min", 1.1)
LABELS = {"tcp": "plain TCP", "tcp-spin": "polling TCP", "plugin": "linkguard native",
          "other": "other build"}


def driver_gbps(lab: Lab, size: int, total: int, env: dict[str, str], verify: bool,
                port: int, extra: list[str] | None = None) -> float:
    args = ["--size", str(size), "--depth", "8", "--bytes", str(total), *(extra or [])]
    if not verify:
        args.append("--no-verify")
    srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                        f"{lab.mgmt_address('b')}:{port}", args, env={**PAIRS, **env},
                        timeout=120)
    if not (srv.ok and cli.ok):
        raise RuntimeError(f"driver run failed: {srv.report} {srv.stderr[-500:]} "
                           f"{cli.report} {cli.stderr[-500:]}")
    return float(srv.report["gbps"])


def run(trials: int, sizes: list[int], gib: float, seconds: float, rtt_sizes: list[int],
        rtt_count: int, other: Path | None = None) -> dict[str, Any]:
    build_plugin()
    total = int(gib * (1 << 30))
    rows: dict[str, list[float]] = {}
    rtts: rtt.Samples = {}
    ports = itertools.count(7101)

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)
        print(f"  {key:28s} {value:7.2f} Gbit/s", file=sys.stderr, flush=True)

    with Lab(unique_prefix("lgpb"), 2, 2) as lab:
        lab.up()
        runners = {"tcp": rtt.lab_runner(lab, "tcp", ports, rtt_count),
                   "tcp-spin": rtt.lab_runner(lab, "tcp-spin", ports, rtt_count),
                   "plugin": rtt.lab_runner(lab, "plugin", ports, rtt_count, env=PAIRS)}
        if other:
            runners["other"] = rtt.lab_runner(lab, "plugin", ports, rtt_count, env=PAIRS,
                                              plugin=other)
        for t in range(trials):
            print(f"trial {t + 1}/{trials}", file=sys.stderr, flush=True)
            if sizes:
                add("iperf3", measure_iperf(lab, "a", "b", 0, 1, seconds))
            for size in sizes:
                for backup in ("1", "0"):
                    add(f"plugin {size} backup={backup}",
                        driver_gbps(lab, size, total, {"LINKGUARD_BACKUP": backup}, False,
                                    next(ports)))
                add(f"plugin {size} verified",
                    driver_gbps(lab, size, total, {}, True, next(ports)))
            if sizes:
                add("iperf3", measure_iperf(lab, "a", "b", 0, 1, seconds))
                add("iperf3 -P 2", measure_iperf(lab, "a", "b", 0, 2, seconds))
            rtt.rtt_trial(t, rtt_sizes, runners, rtts, rtt_count)
        lab.down()
    res = {"machine": machine(), "trials": trials, "bytes_per_run": total, "samples": rows,
           "rtt": rtt.result(rtts, rtt_count, "plugin", "tcp"),
           "rtt_vs_polling_tcp": rtt.result(rtts, rtt_count, "plugin", "tcp-spin")}
    if other:
        res |= {"other_plugin": str(other),
                "rtt_other": rtt.result(rtts, rtt_count, "other", "tcp"),
                "rtt_vs_other": rtt.result(rtts, rtt_count, "plugin", "other")}
    return {**res, **bandwidth_table(rows, sizes)} if sizes else {**res, "table": []}


def bandwidth_table(rows: dict[str, list[float]], sizes: list[int]) -> dict[str, Any]:
    med = {k: statistics.median(v) for k, v in rows.items()}
    iperf = med["iperf3"]
    table = []
    for size in sizes:
        on, off = med[f"plugin {size} backup=1"], med[f"plugin {size} backup=0"]
        ver = med[f"plugin {size} verified"]
        table.append({"size": size, "plugin_gbps": on, "plugin_no_backup_gbps": off,
                      "plugin_verified_gbps": ver, "ratio_vs_iperf3": on / iperf,
                      "backup_cost_ratio": on / off, "verified_ratio_vs_iperf3": ver / iperf})
    return {"iperf3_gbps": iperf, "iperf3_p2_gbps": med["iperf3 -P 2"], "table": table}


def markdown(res: dict[str, Any]) -> str:
    parts = [bandwidth_markdown(res)] if res["table"] else []
    if res["rtt"]["table"]:
        parts.append(rtt.markdown(res["rtt"], LABELS, RTT_GOAL))
        parts.append("Against a TCP ping-pong that polls like the plugin's caller (no goal):\n\n"
                     + rtt.markdown(res["rtt_vs_polling_tcp"], LABELS, None))
    if res.get("rtt_other", {}).get("table"):
        parts.append(f"The other build ({res['other_plugin']}) against plain TCP:\n\n"
                     + rtt.markdown(res["rtt_other"], LABELS, RTT_GOAL))
        parts.append("This build against the other one, same trials (no goal):\n\n"
                     + rtt.markdown(res["rtt_vs_other"], LABELS, None))
    return "\n\n".join(parts)


def bandwidth_markdown(res: dict[str, Any]) -> str:
    n = len(res["samples"]["iperf3"])
    lines = [(f"iperf3 (1 stream, median of {n}): {res['iperf3_gbps']:.2f} Gbit/s; "
              f"iperf3 -P 2: {res['iperf3_p2_gbps']:.2f} Gbit/s"),
             "",
             ("| message | plugin Gbit/s | / iperf3 | / iperf3 -P 2 | backup off Gbit/s "
              "| on / off | verified Gbit/s | verified / iperf3 |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in res["table"]:
        lines.append(f"| {rtt.size_label(r['size'])} | {r['plugin_gbps']:.2f} | "
                     f"{r['ratio_vs_iperf3']:.2f} | "
                     f"{r['plugin_gbps'] / res['iperf3_p2_gbps']:.2f} | "
                     f"{r['plugin_no_backup_gbps']:.2f} | {r['backup_cost_ratio']:.3f} | "
                     f"{r['plugin_verified_gbps']:.2f} | {r['verified_ratio_vs_iperf3']:.2f} |")
    return "\n".join(lines)


BASELINE = Path(__file__).resolve().parent / "latency_baseline.json"
WORSE = 1.10  # a ratio more than 10 % above the baseline's is reported (issue 24, goal 3)


def baseline_rows(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """What a baseline keeps: per size, native / plain TCP at min and p50 (ratios of the medians
    of one run's trials: the machine's mood cancels, unlike absolute microseconds)."""
    return {str(r["size"]): {q: r[q]["ratio"] for q in ("min", "p50")}
            for r in res["rtt"]["table"]}


def against_baseline(res: dict[str, Any], base: dict[str, Any]) -> tuple[str, bool]:
    """The per-size ratio of this run's native / TCP ratios to the baseline's, and whether any
    got worse by more than 10 %."""
    now, then = baseline_rows(res), base["sizes"]
    lines = [(f"Against the baseline of commit {base['commit']} ({base['date']}): this run's "
              "native / TCP ratio over the baseline's, per size."), "",
             "| message | min: now / baseline | p50: now / baseline | verdict |",
             "|---|---:|---:|---|"]
    worse = False
    for size in sorted(now, key=int):
        if size not in then:
            continue
        r = {q: now[size][q] / then[size][q] for q in ("min", "p50")}
        bad = [q for q in r if r[q] > WORSE]
        worse = worse or bool(bad)
        verdict = f"**WORSE by more than 10 % at {', '.join(bad)}**" if bad else "ok"
        lines.append(f"| {rtt.size_label(int(size))} | {r['min']:.3f} | {r['p50']:.3f} | "
                     f"{verdict} |")
    return "\n".join(lines), worse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sizes", default="64K,256K,1M,4M", type=rtt.size_list,
                    help="bandwidth sizes ('' for none: no iperf3 either)")
    ap.add_argument("--gib", type=float, default=3.0, help="GiB per driver run")
    ap.add_argument("--seconds", type=float, default=4.0, help="iperf3 duration")
    ap.add_argument("--rtt-sizes", default=rtt.SIZES, type=rtt.size_list,
                    help="round-trip sizes ('' for none)")
    ap.add_argument("--rtt-count", type=int, default=rtt.COUNT, help="round trips per run")
    ap.add_argument("--compare-plugin", type=Path, default=None,
                    help="another build's libnccl-net-linkguard.so: its round trips run in "
                         "the same trials, beside this one's")
    ap.add_argument("--baseline", type=Path, default=None,
                    help=f"compare the round trips with this baseline ({BASELINE.name})")
    ap.add_argument("--save-baseline", metavar="COMMIT", default=None,
                    help="write this run's round-trip ratios as the new --baseline, naming "
                         "the commit measured")
    ap.add_argument("--json", help="write the full result here")
    a = ap.parse_args()
    if a.trials < 1 or a.rtt_count < 1:
        ap.error("--trials and --rtt-count must be at least 1")
    res = run(a.trials, a.sizes, a.gib, a.seconds, a.rtt_sizes, a.rtt_count, a.compare_plugin)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(markdown(res))
    if a.baseline and a.baseline.exists() and res["rtt"]["table"]:
        text, worse = against_baseline(res, json.loads(a.baseline.read_text()))
        print("\n" + text)
        if worse:
            print("\nA round trip got worse than the baseline by more than 10 %.",
                  file=sys.stderr)
    if a.save_baseline and res["rtt"]["table"]:
        target = a.baseline or BASELINE
        target.write_text(json.dumps({"commit": a.save_baseline,
                                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                      "trials": a.trials, "load": os.getloadavg()[0],
                                      "sizes": baseline_rows(res)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
