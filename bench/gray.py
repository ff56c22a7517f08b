"""Gray failures on the primary rail: throughput before, during and after, and where the
traffic goes.

    python -m bench.gray [--faults lossy,slow,stall] [--trials 3] [--fault-s 4] [--wrap]
                         [--json out.json]

A throw-away 2-host x 2-rail lab (prefix lggr*), linkguardd in both hosts, one driver pair
streaming a -> b through libnccl-net-linkguard.so (dev 0 = rail0 primary + rail1 standby, every
byte verified) for the whole run. Per trial and fault, on host a's rail counters (sysfs
tx_bytes, sampled every 0.25 s):

  before   the fault-s seconds just before the fault: the control window
  during   the fault-s seconds of the fault, and the time from the fault until throughput over
           0.5 s is back at 80 % of "before"
  after    the fault-s seconds after its undo (once traffic is back on rail0, or not)

and, from the plugin's own log lines (CLOCK_MONOTONIC, --timestamps), the time from the fault to
the first connection's failover line, if any. Faults (linkguard-lab, gray.py):

  lossy   2 % of the frames through a's rail0 switch port dropped at random
  slow    a's rail0 switch port policed to 100 MB/s each way
  stall   one data stream of one send connection dropped (its local port, from the plugin's
          INFO line at connect), everything else on rail0 fine

Throughput is bytes leaving host a on both rails per second; "on backup" is rail1's share of
them. The machine's own noise is the spread of the control windows.

--wrap runs the same in wrap mode: LINKGUARD_INNER is the standalone lgtcp build (the lab's
stand-in for an RDMA plugin), whose flows linkguard does not read, so what moves the traffic
is the completion-rate judge (plugin/src/transport/inner/rate.c). It has no stall fault: a stalled flow there
is the inner plugin's own, which its own watchdog ends.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.plugin_driver import (
    LGTCP_SO,
    LINKGUARD_SO,
    build_plugin,
    lab_starter,
    start_stream_pair,
)
from linkguard_lab.demo import driver_env, start_daemons
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.timeline import parse_plugin_line

ARGS = ["--conns", "1", "--size", "262144", "--depth", "8", "--verbose", "--timestamps",
        "--gap-list-ms", "-1"]
# A path left for loss is held off for LINKGUARD_GRAY_HOLD_MS, doubling on a repeat within 10
# minutes up to 32 times that (every trial repeats): shortened, and the settle below waits out
# the longest, so that every trial starts back on rail0. Shorter than the fault, it would
# measure the path's returns to the faulty rail as well.
HOLD_MS = 3000
SETTLE_S = 32 * HOLD_MS / 1000 + 3
ENV = {"LINKGUARD_GRAY_HOLD_MS": str(HOLD_MS)}
WRAP_ENV = {"LINKGUARD_INNER": str(LGTCP_SO), "LGTCP_IFS": "rail0,rail1"}
# At connect, and again whenever the primary is rebuilt (new sockets, new ports).
_PORTS = re.compile(r"send conn (?P<id>[0-9a-f]+)(?: on dev 0: 2 path\(s\)|: primary path on "
                    r"NIC \S+ rebuilt).*local ports: primary ctrl \d+ data (?P<data>[\d,]+)")


_NOTEWORTHY = re.compile(r"failover: |reintegrated: |stalled|WARN|rebuilt|local ports")


def window(lab: Lab, seconds: float) -> dict[str, float]:
    """Bytes a sent per second on each rail over `seconds`."""
    b0, b1, t0 = lab.tx_bytes("a", 0), lab.tx_bytes("a", 1), time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    r0, r1 = (lab.tx_bytes("a", 0) - b0) / dt, (lab.tx_bytes("a", 1) - b1) / dt
    return {"mb_per_s": (r0 + r1) / 1e6, "on_backup": r1 / (r0 + r1) if r0 + r1 else 0.0}


def fault_window(lab: Lab, seconds: float, healthy_mb_s: float,
                 step_s: float = 0.1) -> dict[str, Any]:
    """`window` for the fault, sampled every step_s: also the time from its start until the
    throughput over the last 0.5 s first reached 80 % of the healthy rate (None: never)."""
    t0 = time.monotonic()
    samples = [(t0, lab.tx_bytes("a", 0), lab.tx_bytes("a", 1))]
    while samples[-1][0] - t0 < seconds:
        time.sleep(step_s)
        samples.append((time.monotonic(), lab.tx_bytes("a", 0), lab.tx_bytes("a", 1)))
    back_ms = None
    k = max(1, round(0.5 / step_s))
    for i in range(k, len(samples)):
        (ta, a0, a1), (tb, b0, b1) = samples[i - k], samples[i]
        if (b0 - a0 + b1 - a1) / (tb - ta) / 1e6 >= 0.8 * healthy_mb_s:
            back_ms = (tb - t0) * 1000
            break
    (ta, a0, a1), (tb, b0, b1) = samples[0], samples[-1]
    r0, r1 = (b0 - a0) / (tb - ta), (b1 - a1) / (tb - ta)
    return {"mb_per_s": (r0 + r1) / 1e6, "on_backup": r1 / (r0 + r1) if r0 + r1 else 0.0,
            "at_80pct_ms": back_ms}


def first_failover_ms(pair: Any, since_ns: int) -> float | None:
    """From `since_ns` to the first failover line stamped after it (the plugin's clock)."""
    for ln in pair.stderr_lines():
        pl = parse_plugin_line(ln.text)
        if pl and pl.kind == "failover" and (pl.when_ns or ln.read_ns) >= since_ns:
            return ((pl.when_ns or ln.read_ns) - since_ns) / 1e6
    return None


def stall_port(pair: Any) -> int:
    found = [m for ln in pair.stderr_lines() if (m := _PORTS.search(ln.text))]
    if not found:
        raise RuntimeError("no 'local ports' line from the sender")
    return int(found[-1]["data"].split(",")[0])


def run(faults: list[str], trials: int, fault_s: float, log: Any,
        wrap: bool = False) -> dict[str, Any]:
    build_plugin()
    lab = Lab(unique_prefix("lggr"), 2, 2)
    lab.up()
    daemons = []
    pair = None
    results: dict[str, list[dict[str, Any]]] = {f: [] for f in faults}
    try:
        daemons = start_daemons(lab, ["--hold-down-ms", "300", "--flap-penalty", "0"])
        duration = trials * len(faults) * (3 * fault_s + SETTLE_S + 4) + 30
        pair = start_stream_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                                 f"{lab.mgmt_address('b')}:7300", duration_s=duration,
                                 args=ARGS, env={**ENV, **(WRAP_ENV if wrap else {})},
                                 server_env=driver_env(lab, "b"),
                                 client_env=driver_env(lab, "a"), timeout=duration + 60,
                                 plugin=LINKGUARD_SO)
        time.sleep(3)
        for trial in range(trials):
            for fault in faults:
                port = None
                before = window(lab, fault_s)
                t = time.monotonic_ns()
                if fault == "lossy":
                    lab.lossy("a", 0, 2)
                elif fault == "slow":
                    lab.slow("a", 0, "100MB")
                else:
                    port = stall_port(pair)
                    lab.stall("a", 0, port)
                during = fault_window(lab, fault_s, before["mb_per_s"])
                getattr(lab, "un" + fault)("a", 0)
                settle = time.monotonic() + SETTLE_S  # the hold, doubled on a repeat
                while window(lab, 0.5)["on_backup"] > 0.1 and time.monotonic() < settle:
                    pass
                after = window(lab, fault_s)
                row = {"trial": trial, "before": before, "during": during, "after": after,
                       "failover_ms": first_failover_ms(pair, t),
                       "port": port if fault == "stall" else None,
                       "plugin_lines": [ln.text for ln in pair.stderr_lines()
                                        if ln.read_ns >= t and _NOTEWORTHY.search(ln.text)][:12]}
                results[fault].append(row)
                log(f"{fault} #{trial}: {before['mb_per_s']:.0f} -> {during['mb_per_s']:.0f} "
                    f"({during['on_backup']:.0%} on backup) -> {after['mb_per_s']:.0f} MB/s, "
                    f"failover {row['failover_ms']} ms, 80 % at {during['at_80pct_ms']} ms")
    finally:
        if pair:
            pair.kill()
        for d in daemons:
            d.stop()
        lab.down()
    return {"fault_s": fault_s, "trials": trials, "wrap": wrap, "results": results,
            "summary": {f: summary(rows) for f, rows in results.items()}}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str, sub: str) -> float:
        return statistics.median(r[key][sub] for r in rows) if rows else 0.0
    fo = [r["failover_ms"] for r in rows if r["failover_ms"] is not None]
    back = [r["during"]["at_80pct_ms"] for r in rows if r["during"].get("at_80pct_ms") is not None]
    return {"before_mb_s": med("before", "mb_per_s"), "during_mb_s": med("during", "mb_per_s"),
            "after_mb_s": med("after", "mb_per_s"), "during_on_backup": med("during", "on_backup"),
            "during_vs_before": med("during", "mb_per_s") / (med("before", "mb_per_s") or 1),
            "failovers": f"{len(fo)}/{len(rows)}", "failover_ms_median":
            statistics.median(fo) if fo else None,
            "at_80pct": f"{len(back)}/{len(rows)}",
            "at_80pct_ms_median": statistics.median(back) if back else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", default="lossy,slow,stall")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--fault-s", type=float, default=4.0)
    ap.add_argument("--wrap", action="store_true",
                    help="wrap mode: LINKGUARD_INNER = the standalone lgtcp build")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    faults = [f for f in a.faults.split(",") if f]
    if not faults or any(f not in ("lossy", "slow", "stall") for f in faults) or a.trials < 1:
        ap.error("--faults: a comma list of lossy, slow, stall; --trials >= 1")
    if a.wrap and "stall" in faults:
        ap.error("--wrap: no stall fault (the stalled flow would be the inner plugin's own); "
                 "use --faults lossy,slow")
    out = run(faults, a.trials, a.fault_s, lambda s: print(s, file=sys.stderr, flush=True),
              wrap=a.wrap)
    text = json.dumps(out, indent=2)
    if a.json:
        a.json.write_text(text)
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
