"""Round-trip latency for the bandwidth benchmarks (bench.plugin_bw, bench.wrap_bw).

One run is a ping-pong pair on two lab hosts: `lg_nccl_driver --pingpong` through a plugin, or
`lg_tcp_pingpong` over a plain TCP socket (the baseline). The client reports `rtt_us`: min, p50,
p99 of `count` round trips after `warmup` unrecorded ones, the payload checked both ways. A
benchmark runs its variants for every size in every trial, alternating which goes first (so
that load from other tenants hits them alike), and compares them per trial: adjacent runs share
the machine's mood. `compare` gives medians over the trials and the per-trial ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.plugin_driver import (
    BUILD,
    LINKGUARD_SO,
    DriverResult,
    Starter,
    _finish,
    lab_starter,
    run_pair,
)

TCP_PINGPONG = BUILD / "lg_tcp_pingpong"
SIZES = "8,64K,1M"
QUANTILES = ("min", "p50", "p99")
COUNT = 2000
WARMUP = 200

# samples[variant][size] = one rtt_us summary per trial, in trial order
Samples = dict[str, dict[int, list[dict[str, float]]]]
Runner = Callable[[int], dict[str, Any]]  # size -> the client's report


def rtt_summary(report: dict[str, Any], count: int | None = None) -> dict[str, float]:
    """The client report's `rtt_us`, checked: every quantile present, ordered, `count`
    samples (with the driver's `reply_us` quantiles as reply_min...). Raises ValueError
    naming what is wrong."""
    rtt = report.get("rtt_us")
    if not isinstance(rtt, dict):  # bad data, not a bad call: a ValueError like the rest
        why = f"report has no rtt_us samples (failure: {report.get('failure')})"
        raise ValueError(why)  # noqa: TRY004
    missing = [k for k in ("n", *QUANTILES, "max") if not isinstance(rtt.get(k), int | float)]
    if missing:
        raise ValueError(f"rtt_us lacks {', '.join(missing)}")
    if count is not None and rtt["n"] != count:
        raise ValueError(f"rtt_us has {rtt['n']} samples, expected {count}")
    if not 0 < rtt["min"] <= rtt["p50"] <= rtt["p99"] <= rtt["max"]:
        raise ValueError(f"rtt_us quantiles out of order: {rtt}")
    out = {k: float(rtt[k]) for k in (*QUANTILES, "max")} | {"n": int(rtt["n"])}
    reply = report.get("reply_us")  # the driver's: the same round trips, to the reply alone
    if isinstance(reply, dict) and all(isinstance(reply.get(k), int | float) for k in QUANTILES):
        out |= {f"reply_{k}": float(reply[k]) for k in QUANTILES}
    return out


def parse_size(text: str) -> int:
    """ "8", "64K", "1M", "2G" (binary units) -> bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def size_list(text: str) -> list[int]:
    """An argparse type: "8,64K,1M" -> [8, 65536, 1048576]; "" -> [] (skip that part)."""
    try:
        sizes = [parse_size(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = [0]
    if any(n <= 0 for n in sizes):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected sizes like 8,64K,1M (bytes, K, M or G), or '' for none")
    return sizes


def alternate(variants: Sequence[str], trial: int) -> list[str]:
    """The order of the variants in a trial: rotated by one every trial."""
    k = trial % len(variants)
    return [*variants[k:], *variants[:k]]


def rtt_trial(trial: int, sizes: Sequence[int], runners: dict[str, Runner], samples: Samples,
              count: int) -> None:
    """One trial: every size, every variant (alternating order), into `samples`."""
    for size in sizes:
        for name in alternate(list(runners), trial):
            rtt = rtt_summary(runners[name](size), count)
            samples.setdefault(name, {}).setdefault(size, []).append(rtt)
            print(f"  rtt {name:8s} {size:>8d} B  min {rtt['min']:8.1f}  p50 {rtt['p50']:8.1f}"
                  f"  p99 {rtt['p99']:8.1f} us", file=sys.stderr, flush=True)


def compare(samples: Samples, variant: str, baseline: str) -> list[dict[str, Any]]:
    """Per size and quantile: the median over trials for both, their ratio (variant /
    baseline; the verdict's figure), and the median and range of the per-trial ratios."""
    rows = []
    for size in sorted(samples[baseline]):
        base, var = samples[baseline][size], samples[variant][size]
        if len(base) != len(var):
            raise ValueError(f"{size} B: {len(var)} {variant} trials, {len(base)} {baseline}")
        row: dict[str, Any] = {"size": size, "trials": len(base)}
        for q in QUANTILES:
            b = statistics.median(s[q] for s in base)
            v = statistics.median(s[q] for s in var)
            per_trial = sorted(x[q] / y[q] for x, y in zip(var, base, strict=True))
            row[q] = {baseline: b, variant: v, "ratio": v / b,
                      "ratio_median": statistics.median(per_trial),
                      "ratio_range": [per_trial[0], per_trial[-1]]}
        rows.append(row)
    return rows


def size_label(size: int) -> str:
    if size >= 1 << 20 and size % (1 << 20) == 0:
        return f"{size >> 20} MiB"
    if size >= 1 << 10 and size % (1 << 10) == 0:
        return f"{size >> 10} KiB"
    return f"{size} B"


def goal_met(rows: list[dict[str, Any]], quantile: str, limit: float) -> bool:
    """Every size's ratio of medians at `quantile` is at most `limit`."""
    return all(r[quantile]["ratio"] <= limit for r in rows)


def result(samples: Samples, count: int, variant: str, baseline: str) -> dict[str, Any]:
    """What a benchmark keeps of its round trips (its JSON's "rtt")."""
    return {"count": count, "warmup": WARMUP, "variant": variant, "baseline": baseline,
            "samples": samples,
            "table": compare(samples, variant, baseline) if samples else []}


def markdown(res: dict[str, Any], labels: dict[str, str],
             goal: tuple[str, float] | None) -> str:
    """The round-trip table of result(): µs medians per quantile for both, the ratios, and
    the goal's verdict (`goal`: the quantile whose ratio must be at most the limit; None:
    a comparison without a goal, per-trial ratios at p50)."""
    rows, variant, baseline = res["table"], res["variant"], res["baseline"]
    quantile, limit = goal or ("p50", 0.0)
    vl, bl = labels[variant], labels[baseline]
    lines = [(f"Round trips: {res['count']} per run after {res['warmup']} unrecorded, "
              "timed by the client, µs."), "",
             (f"| message | {bl} min / p50 / p99 µs | {vl} min / p50 / p99 µs "
              f"| {vl} / {bl}: min | p50 | p99 | per-trial {quantile} ratio: median (range) |"),
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = " / ".join(f"{r[q][baseline]:.1f}" for q in QUANTILES)
        v = " / ".join(f"{r[q][variant]:.1f}" for q in QUANTILES)
        lo, hi = r[quantile]["ratio_range"]
        lines.append(f"| {size_label(r['size'])} | {b} | {v} | "
                     + " | ".join(f"{r[q]['ratio']:.3f}" for q in QUANTILES)
                     + f" | {r[quantile]['ratio_median']:.3f} ({lo:.2f} .. {hi:.2f}) |")
    if goal is None:
        return "\n".join(lines)
    verdict = "met" if goal_met(rows, quantile, limit) else "NOT met"
    lines.append(f"\nGoal {vl} / {bl} at {quantile} <= {limit:g} at every size (ratio of the "
                 f"medians of {rows[0]['trials'] if rows else 0} trials): **{verdict}**.")
    return "\n".join(lines)


# --- the runs ---------------------------------------------------------------------------------

def plugin_report(server: Starter, client: Starter, mgmt: str, size: int, env: dict[str, str],
                  plugin: Path = LINKGUARD_SO, count: int = COUNT, warmup: int = WARMUP,
                  timeout: float = 120.0, client_args: Sequence[str] = (),
                  ) -> tuple[DriverResult, DriverResult]:
    """lg_nccl_driver --pingpong through `plugin`: (server, client)."""
    args = ["--pingpong", "--size", str(size), "--count", str(count), "--warmup", str(warmup)]
    return run_pair(server, client, mgmt, args, env=env, plugin=plugin, timeout=timeout,
                    client_args=client_args)


def tcp_report(server: Starter, client: Starter, addr: str, size: int, count: int = COUNT,
               warmup: int = WARMUP, timeout: float = 120.0, client_args: Sequence[str] = (),
               spin: bool = False) -> tuple[DriverResult, DriverResult]:
    """lg_tcp_pingpong between `addr` (the server's rail address) and the client: (server,
    client). `spin`: both ends poll instead of blocking in recv()."""
    common = ["--addr", addr, "--size", str(size), "--count", str(count), "--warmup",
              str(warmup), "--timeout", f"{timeout:g}", *(["--spin"] if spin else [])]
    env = dict(os.environ)
    srv = server([str(TCP_PINGPONG), "--role", "server", *common], env)
    time.sleep(0.05)
    try:
        cli = client([str(TCP_PINGPONG), "--role", "client", *common, *client_args], env)
    except BaseException:
        srv.kill()  # the server this call started, by its PID
        srv.wait()
        raise
    c = _finish(cli, timeout + 30)
    return _finish(srv, timeout + 30), c


def checked(pair: tuple[DriverResult, DriverResult], what: str) -> dict[str, Any]:
    """The client's report of a clean pair; RuntimeError with both sides' story otherwise."""
    srv, cli = pair
    if not (srv.ok and cli.ok):
        raise RuntimeError(f"{what} failed: {srv.report} {srv.stderr[-600:]} "
                           f"{cli.report} {cli.stderr[-600:]}")
    return cli.report


RAIL0 = ("rail0", "rail0+rail1")  # what dev 0 is called when it is rail0 (native, wrapped)


def lab_runner(lab: Any, kind: str, ports: Iterator[int], count: int = COUNT,
               warmup: int = WARMUP, env: dict[str, str] | None = None,
               plugin: Path = LINKGUARD_SO, dev0: tuple[str, ...] = RAIL0) -> Runner:
    """A Runner for rtt_trial on rail0, host a (client) to host b (server): `kind` "tcp" or
    "tcp-spin" (lg_tcp_pingpong between the rail0 addresses, blocking or polling) or "plugin"
    (`plugin` with `env`, handles over the management network). Each run takes the next port
    of `ports`. A plugin's dev 0 must be one of `dev0`."""
    def run(size: int) -> dict[str, Any]:
        port = next(ports)
        srv, cli = lab_starter(lab, "b"), lab_starter(lab, "a")
        if kind.startswith("tcp"):
            pair = tcp_report(srv, cli, f"{lab.address('b', 0)}:{port}", size, count, warmup,
                              spin=kind == "tcp-spin")
        else:
            pair = plugin_report(srv, cli, f"{lab.mgmt_address('b')}:{port}", size, env or {},
                                 plugin, count, warmup)
        report = checked(pair, f"{kind} ping-pong of {size} B")
        if kind == "plugin" and report["device"] not in dev0:
            raise RuntimeError(f"ping-pong: dev 0 is {report['device']}, not rail0")
        return report
    return run
