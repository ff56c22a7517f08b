"""Wrap-mode overhead: linkguard over an inner plugin against that inner plugin alone.

    python -m bench.wrap_bw [--trials 5] [--sizes 256K,1M,4M] [--gib 2] [--json out.json]

A throw-away 2-host x 2-rail lab. The inner plugin is the standalone build of linkguard's own
TCP transport (libnccl-net-lgtcp.so, devices rail0 and rail1). Each trial measures, back to
back on rail0 a -> b, one connection, 8 messages in flight, for each message size:
  - direct: lg_nccl_driver loads libnccl-net-lgtcp.so itself (dev 0 = rail0);
  - wrap:   lg_nccl_driver loads libnccl-net-linkguard.so with LINKGUARD_INNER set to the
            same library (dev 0 = rail0 primary, rail1 backup: the standing backup path, its
            inner comm connected and registered, and linkguard's control channel and acks).
The two alternate within a trial (which one goes first alternates too), so that load from
other tenants hits both alike; the report gives medians and wrap / direct per size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.lab_iperf import machine
from bench.plugin_bw import parse_size
from bench.plugin_driver import LGTCP_SO, LINKGUARD_SO, build_plugin, lab_starter, run_pair
from linkguard_lab.lab import Lab, unique_prefix

MODES = {
    "direct": (LGTCP_SO, {"LGTCP_IFS": "rail0,rail1"}),
    "wrap": (LINKGUARD_SO, {"LGTCP_IFS": "rail0,rail1", "LINKGUARD_INNER": str(LGTCP_SO),
                            "LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}),
}


def gbps(lab: Lab, mode: str, size: int, total: int, port: int) -> float:
    plugin, env = MODES[mode]
    args = ["--size", str(size), "--depth", "8", "--bytes", str(total), "--no-verify"]
    srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                        f"{lab.mgmt_address('b')}:{port}", args, env=env, plugin=plugin,
                        timeout=120)
    if not (srv.ok and cli.ok):
        raise RuntimeError(f"{mode} run failed: {srv.report} {srv.stderr[-800:]} "
                           f"{cli.report} {cli.stderr[-800:]}")
    if srv.report["device"] not in ("rail0", "rail0+rail1"):
        raise RuntimeError(f"{mode}: dev 0 is {srv.report['device']}, not rail0")
    return float(srv.report["gbps"])


def run(trials: int, sizes: list[int], gib: float) -> dict[str, Any]:
    build_plugin()
    total = int(gib * (1 << 30))
    samples: dict[str, list[float]] = {}
    with Lab(unique_prefix("lgwb"), 2, 2) as lab:
        lab.up()
        port = 7300
        for t in range(trials):
            print(f"trial {t + 1}/{trials}", file=sys.stderr, flush=True)
            for size in sizes:
                order = ("direct", "wrap") if t % 2 == 0 else ("wrap", "direct")
                for mode in order:
                    port += 1
                    v = gbps(lab, mode, size, total, port)
                    samples.setdefault(f"{mode} {size}", []).append(v)
                    print(f"  {mode:6s} {size:>8d} B {v:7.2f} Gbit/s", file=sys.stderr,
                          flush=True)
        lab.down()
    table = []
    for size in sizes:
        d = statistics.median(samples[f"direct {size}"])
        w = statistics.median(samples[f"wrap {size}"])
        # Per-trial ratios too: adjacent runs share the machine's mood.
        pairs = zip(samples[f"wrap {size}"], samples[f"direct {size}"], strict=True)
        ratios = sorted(a / b for a, b in pairs)
        table.append({"size": size, "direct_gbps": d, "wrap_gbps": w, "ratio": w / d,
                      "ratio_min": ratios[0], "ratio_max": ratios[-1]})
    return {"machine": machine(), "trials": trials, "bytes_per_run": total,
            "samples": samples, "table": table}


def markdown(res: dict[str, Any]) -> str:
    lines = [f"Median of {res['trials']} trials, {res['bytes_per_run'] >> 20} MiB per run.", "",
             ("| message | lgtcp direct Gbit/s | linkguard wrap Gbit/s | wrap / direct "
              "| per-trial ratio min .. max |"), "|---|---|---|---|---|"]
    for r in res["table"]:
        size = r["size"]
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        lines.append(f"| {label} | {r['direct_gbps']:.2f} | {r['wrap_gbps']:.2f} | "
                     f"{r['ratio']:.3f} | {r['ratio_min']:.2f} .. {r['ratio_max']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--sizes", default="256K,1M,4M")
    ap.add_argument("--gib", type=float, default=2.0, help="GiB per driver run")
    ap.add_argument("--json", help="write the full result here")
    a = ap.parse_args()
    res = run(a.trials, [parse_size(s) for s in a.sizes.split(",")], a.gib)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(markdown(res))


if __name__ == "__main__":
    main()
