"""Plugin transport bandwidth against iperf3 on the same lab rail, in the same run.

    python -m bench.plugin_bw [--trials 3] [--sizes 64K,256K,1M,4M] [--gib 3] [--json out.json]

A throw-away 2-host x 2-rail lab. Each trial measures, back to back on rail0 a -> b:
  - iperf3, one TCP stream (bench.lab_iperf.measure_iperf),
  - lg_nccl_driver through libnccl-net-linkguard.so (dev 0 = rail0 primary, rail1 backup),
    one connection, 8 messages in flight (NCCL_STEPS), for each message size, with the
    standing backup path on (default) and off (LINKGUARD_BACKUP=0),
  - the same with every byte verified (the pattern fill/check costs CPU on both ends),
  - small-message round trips (8 bytes, one at a time) through the plugin and over a plain
    TCP socket between the same rail addresses (lg_nccl_driver --tcp-pingpong).
Trials interleave the measurements so that load from other tenants hits them alike; the
report gives medians and the ratios the issue asks for (driver / iperf3, backup on / off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.lab_iperf import machine, measure_iperf
from bench.plugin_driver import build_plugin, lab_starter, run_pair
from linkguard_lab.lab import Lab, unique_prefix

PAIRS = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


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


def pingpong_us(lab: Lab, port: int, tcp: bool, count: int = 20000) -> dict[str, float]:
    """Client-side round-trip percentiles (µs) of `count` 8-byte ping-pongs on rail0."""
    args = ["--size", "8", "--count", str(count)]
    if tcp:
        args += ["--tcp-pingpong", f"{lab.address('b', 0)}:{port}"]
    else:
        args += ["--pingpong"]
    srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                        f"{lab.mgmt_address('b')}:{port}", args, env=PAIRS, timeout=60)
    if not (srv.ok and cli.ok):
        raise RuntimeError(f"ping-pong failed: {cli.report} {cli.stderr[-500:]}")
    return cli.report["rtt_us"]


def run(trials: int, sizes: list[int], gib: float, seconds: float) -> dict[str, Any]:
    build_plugin()
    total = int(gib * (1 << 30))
    rows: dict[str, list[float]] = {}
    rtts: dict[str, list[dict[str, float]]] = {"plugin": [], "tcp": []}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)
        print(f"  {key:28s} {value:7.2f} Gbit/s", file=sys.stderr, flush=True)

    with Lab(unique_prefix("lgpb"), 2, 2) as lab:
        lab.up()
        port = 7100
        for t in range(trials):
            print(f"trial {t + 1}/{trials}", file=sys.stderr, flush=True)
            add("iperf3", measure_iperf(lab, "a", "b", 0, 1, seconds))
            for size in sizes:
                for backup in ("1", "0"):
                    port += 1
                    add(f"plugin {size} backup={backup}",
                        driver_gbps(lab, size, total, {"LINKGUARD_BACKUP": backup}, False, port))
                port += 1
                add(f"plugin {size} verified",
                    driver_gbps(lab, size, total, {}, True, port))
            add("iperf3", measure_iperf(lab, "a", "b", 0, 1, seconds))
            add("iperf3 -P 2", measure_iperf(lab, "a", "b", 0, 2, seconds))
            for kind in ("tcp", "plugin"):
                port += 1
                rtts[kind].append(pingpong_us(lab, port, kind == "tcp"))
                print(f"  ping-pong {kind:8s} p50 {rtts[kind][-1]['p50']:.1f} us",
                      file=sys.stderr, flush=True)
        lab.down()
    med = {k: statistics.median(v) for k, v in rows.items()}
    iperf = med["iperf3"]
    table = []
    for size in sizes:
        on, off = med[f"plugin {size} backup=1"], med[f"plugin {size} backup=0"]
        ver = med[f"plugin {size} verified"]
        table.append({"size": size, "plugin_gbps": on, "plugin_no_backup_gbps": off,
                      "plugin_verified_gbps": ver, "ratio_vs_iperf3": on / iperf,
                      "backup_cost_ratio": on / off, "verified_ratio_vs_iperf3": ver / iperf})
    rtt = {k: {q: statistics.median(r[q] for r in v) for q in ("min", "p50", "p99")}
           for k, v in rtts.items()}
    return {"machine": machine(), "trials": trials, "bytes_per_run": total,
            "iperf3_gbps": iperf, "iperf3_p2_gbps": med["iperf3 -P 2"], "samples": rows,
            "table": table, "pingpong_us": rtt,
            "pingpong_p50_ratio": rtt["plugin"]["p50"] / rtt["tcp"]["p50"]}


def markdown(res: dict[str, Any]) -> str:
    n = len(res["samples"]["iperf3"])
    lines = [(f"iperf3 (1 stream, median of {n}): {res['iperf3_gbps']:.2f} Gbit/s; "
              f"iperf3 -P 2: {res['iperf3_p2_gbps']:.2f} Gbit/s"),
             "",
             ("| message | plugin Gbit/s | / iperf3 | / iperf3 -P 2 | backup off Gbit/s "
              "| on / off | verified Gbit/s | verified / iperf3 |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in res["table"]:
        size = r["size"]
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        lines.append(f"| {label} | {r['plugin_gbps']:.2f} | {r['ratio_vs_iperf3']:.2f} | "
                     f"{r['plugin_gbps'] / res['iperf3_p2_gbps']:.2f} | "
                     f"{r['plugin_no_backup_gbps']:.2f} | {r['backup_cost_ratio']:.3f} | "
                     f"{r['plugin_verified_gbps']:.2f} | {r['verified_ratio_vs_iperf3']:.2f} |")
    pp = res["pingpong_us"]
    lines += ["", "| 8-byte round trip | min µs | p50 µs | p99 µs |", "|---|---|---|---|"]
    for kind, label in (("tcp", "plain TCP"), ("plugin", "plugin")):
        lines.append(f"| {label} | {pp[kind]['min']:.1f} | {pp[kind]['p50']:.1f} | "
                     f"{pp[kind]['p99']:.1f} |")
    lines.append(f"\nplugin / TCP (p50): {res['pingpong_p50_ratio']:.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sizes", default="64K,256K,1M,4M")
    ap.add_argument("--gib", type=float, default=3.0, help="GiB per driver run")
    ap.add_argument("--seconds", type=float, default=4.0, help="iperf3 duration")
    ap.add_argument("--json", help="write the full result here")
    a = ap.parse_args()
    res = run(a.trials, [parse_size(s) for s in a.sizes.split(",")], a.gib, a.seconds)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(markdown(res))


if __name__ == "__main__":
    main()
