"""Wrap-mode overhead: linkguard over an inner plugin against that inner plugin alone.

    python -m bench.wrap_bw [--trials 5] [--sizes 256K,1M,4M] [--gib 2] [--rtt-sizes 8,64K,1M]
                            [--rtt-count 2000] [--json out.json] [--inner-placed auto|1|0]
                            [--no-copy-too] [--inner PATH --inner-env NAME=VALUE ...]

A throw-away 2-host x 2-rail lab. The inner plugin is the standalone build of linkguard's own
TCP transport (libnccl-net-lgtcp.so, devices rail0 and rail1). Each trial measures, back to
back on rail0 a -> b, one connection, 8 messages in flight, for each message size:
  - direct: lg_nccl_driver loads libnccl-net-lgtcp.so itself (dev 0 = rail0);
  - wrap:   lg_nccl_driver loads libnccl-net-linkguard.so with LINKGUARD_INNER set to the
            same library (dev 0 = rail0 primary, rail1 backup: the standing backup path, its
            inner comm connected and registered, and linkguard's control channel and acks).
Then round trips (bench.rtt): for each --rtt-sizes size, --rtt-count one-at-a-time ping-pongs
(lg_nccl_driver --pingpong, payload checked) through each of the two, same alternation.
The two alternate within a trial (which one goes first alternates too), so that load from
other tenants hits both alike; the report gives medians and wrap / direct per size, against
the goals: bandwidth >= 0.98 and round trip (p50) <= 1.05 of the inner plugin alone.
An empty --sizes or --rtt-sizes skips that part.

--inner PATH measures another inner plugin the same way (a third-party one built by hand, e.g.
aws-ofi-nccl over libfabric's `net` provider), with --inner-env settings for both the direct
and the wrap runs (its provider, LD_LIBRARY_PATH); its dev 0 must be rail0, and wrap mode pairs
rail0:rail1 as for lgtcp unless --inner-pairs says otherwise ("rail0": no backup path, for a
plugin that lists one NIC only: aws-ofi-nccl over a socket provider keeps one fabric, and the
lab's rails are in different subnets). Nothing of it is built or fetched here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import rtt
from bench.lab_iperf import machine
from bench.plugin_driver import LGTCP_SO, LINKGUARD_SO, build_plugin, lab_starter, run_pair
from linkguard_lab.lab import Lab, unique_prefix

MODES = {
    "direct": (LGTCP_SO, {"LGTCP_IFS": "rail0,rail1"}),
    "wrap": (LINKGUARD_SO, {"LGTCP_IFS": "rail0,rail1", "LINKGUARD_INNER": str(LGTCP_SO),
                            "LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}),
}
# dev 0's names when it is rail0; --inner adds its plugin's (aws-ofi-nccl reports none to the
# driver, whose FI_NET_IFACE=rail0 makes it rail0) and a wrapped one without backup's
DEV0 = list(rtt.RAIL0)
BW_GOAL = 0.98
RTT_GOAL = ("p50", 1.05)
LABELS = {"direct": "lgtcp direct", "wrap": "linkguard wrap",
          "wrap-nocopy": "linkguard wrap, no kept copies"}
# --no-copy-too: round trips also with LINKGUARD_SEND_COPY=0, the acknowledged completion
# that every small send got before kept copies in wrap mode (the before, in the same trials).
NOCOPY = "wrap-nocopy"


def gbps(lab: Lab, mode: str, size: int, total: int, port: int) -> float:
    plugin, env = MODES[mode]
    args = ["--size", str(size), "--depth", "8", "--bytes", str(total), "--no-verify"]
    srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                        f"{lab.mgmt_address('b')}:{port}", args, env=env, plugin=plugin,
                        timeout=120)
    if not (srv.ok and cli.ok):
        raise RuntimeError(f"{mode} run failed: {srv.report} {srv.stderr[-800:]} "
                           f"{cli.report} {cli.stderr[-800:]}")
    if srv.report["device"] not in DEV0:
        raise RuntimeError(f"{mode}: dev 0 is {srv.report['device']}, not rail0")
    return float(srv.report["gbps"])


def run(trials: int, sizes: list[int], gib: float, rtt_sizes: list[int],
        rtt_count: int, nocopy: bool = False) -> dict[str, Any]:
    build_plugin()
    total = int(gib * (1 << 30))
    samples: dict[str, list[float]] = {}
    rtts: rtt.Samples = {}
    ports = itertools.count(7301)
    with Lab(unique_prefix("lgwb"), 2, 2) as lab:
        lab.up()
        modes = dict(MODES)
        if nocopy:
            so, env = MODES["wrap"]
            modes[NOCOPY] = (so, {**env, "LINKGUARD_SEND_COPY": "0"})
        runners = {mode: rtt.lab_runner(lab, "plugin", ports, rtt_count, env=env, plugin=so,
                                        dev0=tuple(DEV0))
                   for mode, (so, env) in modes.items()}
        for t in range(trials):
            print(f"trial {t + 1}/{trials}", file=sys.stderr, flush=True)
            for size in sizes:
                for mode in rtt.alternate(list(MODES), t):
                    v = gbps(lab, mode, size, total, next(ports))
                    samples.setdefault(f"{mode} {size}", []).append(v)
                    print(f"  {mode:6s} {size:>8d} B {v:7.2f} Gbit/s", file=sys.stderr,
                          flush=True)
            rtt.rtt_trial(t, rtt_sizes, runners, rtts, rtt_count)
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
    res = {"machine": machine(), "trials": trials, "bytes_per_run": total,
           "samples": samples, "table": table,
           "rtt": rtt.result(rtts, rtt_count, "wrap", "direct")}
    if nocopy and rtts:
        res["rtt_nocopy"] = rtt.result(rtts, rtt_count, NOCOPY, "direct")
        res["rtt_copy_gain"] = rtt.result(rtts, rtt_count, "wrap", NOCOPY)
    return res


def markdown(res: dict[str, Any]) -> str:
    lines = [f"Median of {res['trials']} trials, {res['bytes_per_run'] >> 20} MiB per run.", ""]
    if res["table"]:
        lines += [*bw_lines(res), ""]
    if res["rtt"]["table"]:
        lines.append(rtt.markdown(res["rtt"], LABELS, RTT_GOAL))
    if res.get("rtt_nocopy"):
        lines += ["", rtt.markdown(res["rtt_nocopy"], LABELS, RTT_GOAL), "",
                  rtt.markdown(res["rtt_copy_gain"], LABELS, None)]
    return "\n".join(lines)


def bw_lines(res: dict[str, Any]) -> list[str]:
    lines = [(f"| message | {LABELS['direct']} Gbit/s | linkguard wrap Gbit/s | wrap / direct "
              "| per-trial ratio min .. max |"), "|---|---|---|---|---|"]
    for r in res["table"]:
        lines.append(f"| {rtt.size_label(r['size'])} | {r['direct_gbps']:.2f} | "
                     f"{r['wrap_gbps']:.2f} | {r['ratio']:.3f} | "
                     f"{r['ratio_min']:.2f} .. {r['ratio_max']:.2f} |")
    met = all(r["ratio"] >= BW_GOAL for r in res["table"])
    lines.append(f"\nGoal wrap / direct bandwidth >= {BW_GOAL:g} at every size: "
                 f"**{'met' if met else 'NOT met'}**.")
    return lines


def inner_env_setting(text: str) -> tuple[str, str]:
    """--inner-env NAME=VALUE."""
    name, eq, value = text.partition("=")
    if not eq or not name or not name.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"--inner-env wants NAME=VALUE, not {text!r}")
    return name, value


def use_inner(path: Path, env: dict[str, str], pairs: str) -> None:
    """MODES over `path` instead of lgtcp: direct loads it, wrap wraps it; both get `env`."""
    if not path.is_file():
        raise SystemExit(f"--inner {path}: no such file")
    MODES["direct"] = (path, dict(env))
    MODES["wrap"] = (LINKGUARD_SO, {**env, "LINKGUARD_INNER": str(path),
                                    "LINKGUARD_PAIRS": pairs})
    LABELS["direct"] = f"{path.name} direct"
    DEV0.extend(("", "rail0+none"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--sizes", default="256K,1M,4M", type=rtt.size_list,
                    help="bandwidth sizes ('' for none)")
    ap.add_argument("--gib", type=float, default=2.0, help="GiB per driver run")
    ap.add_argument("--rtt-sizes", default=rtt.SIZES, type=rtt.size_list,
                    help="round-trip sizes ('' for none)")
    ap.add_argument("--rtt-count", type=int, default=rtt.COUNT, help="round trips per run")
    ap.add_argument("--json", help="write the full result here")
    ap.add_argument("--inner-placed", choices=("auto", "1", "0"), default="auto",
                    help="wrap mode's LINKGUARD_INNER_PLACED: auto (the default) gives lgtcp "
                         "placed completion (sends complete on the inner plugin's completion); "
                         "0 measures the acknowledged one every unknown plugin gets")
    ap.add_argument("--no-copy-too", action="store_true",
                    help="round trips also with LINKGUARD_SEND_COPY=0 (no kept copies: every "
                         "send of an acknowledged completion waits for linkguard's ack)")
    ap.add_argument("--inner", type=Path, help="another inner plugin than lgtcp (see above)")
    ap.add_argument("--inner-env", type=inner_env_setting, action="append", default=[],
                    help="NAME=VALUE for the inner plugin, direct and wrapped (repeatable)")
    ap.add_argument("--inner-pairs", default="rail0:rail1,rail1:rail0",
                    help="wrap mode's LINKGUARD_PAIRS over --inner")
    a = ap.parse_args()
    if a.trials < 1 or a.rtt_count < 1:
        ap.error("--trials and --rtt-count must be at least 1")
    if a.inner_env and not a.inner:
        ap.error("--inner-env needs --inner")
    if a.inner:
        use_inner(a.inner, dict(a.inner_env), a.inner_pairs)
    MODES["wrap"][1]["LINKGUARD_INNER_PLACED"] = a.inner_placed
    res = run(a.trials, a.sizes, a.gib, a.rtt_sizes, a.rtt_count, a.no_copy_too)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(markdown(res))


if __name__ == "__main__":
    main()
