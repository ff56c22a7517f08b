"""A healthy soak under CPU load: how often the gray-failure detectors (progress watchdogs,
goodput health, silence) move traffic when nothing is wrong.

    python -m bench.gray_soak [--minutes 30] [--burners 2] [--wrap] [--json out.json]

A throw-away 2-host x 2-rail lab (prefix lgsk*), linkguardd in both hosts, one driver pair
streaming a -> b and b -> a (--bidir) through libnccl-net-linkguard.so, every byte verified, for
the whole run, and `--burners` busy loops (each its own process, started and stopped by PID)
competing for the machine's CPUs. No fault is injected: every switch the plugin logs is a false
move. Counted from the plugin's own lines: failovers, reintegrations and other switches, and the
verdicts behind them (stalled, lossy, silent); the rails' counters give the throughput, sampled
every `--sample-s` seconds, so a quiet stretch shows too; the drivers' own end reports say
whether every byte arrived. `--wrap`: the same in wrap mode (the standalone lgtcp build as
LINKGUARD_INNER), whose goodput health is the completion-rate judge (verdict "slow").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gray import WRAP_ENV
from bench.plugin_driver import (
    LINKGUARD_SO,
    DriverResult,
    build_plugin,
    lab_starter,
    start_stream_pair,
)
from linkguard_lab.demo import driver_env, start_daemons
from linkguard_lab.lab import Lab, unique_prefix

ARGS = ["--conns", "4", "--bidir", "--size", "262144", "--depth", "8", "--verbose",
        "--timestamps", "--gap-list-ms", "-1"]
VERDICTS = {"stalled": re.compile(r"stalled: "), "lossy": re.compile(r" is lossy: "),
            "slow": re.compile(r" is slow: "),
            "silent": re.compile(r"no data and no heartbeat|standby: no heartbeat"),
            "no working path": re.compile(r"no working path")}
# The sender decides and logs each switch; the receiver logs the same switch again.
SWITCH = re.compile(r"send conn \w+: (failover|reintegrated|switched): ")
CHECKS = ("corrupt_messages", "missing_messages", "duplicated_messages", "reordered_messages",
          "unwritten_messages", "errors")


def burner(seconds: float) -> subprocess.Popen:
    """A busy loop that ends by itself after `seconds` (and is stopped by PID before that)."""
    code = f"import time\nend = time.monotonic() + {seconds:f}\nwhile time.monotonic() < end: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def count_lines(lines: list[str]) -> dict[str, Any]:
    switches: dict[str, int] = {}
    for ln in lines:
        m = SWITCH.search(ln)
        if m:
            switches[m[1]] = switches.get(m[1], 0) + 1
    return {"switches": switches, "false_moves": switches.get("failover", 0) +
            switches.get("switched", 0),
            "verdicts": {k: sum(1 for ln in lines if rx.search(ln)) for k, rx in VERDICTS.items()},
            "examples": [ln for ln in lines if SWITCH.search(ln)][:10]}


def verdict(r: DriverResult) -> dict[str, Any]:
    """A driver's end: ok (exit 0 and its own checks), and its verification counters."""
    return {"ok": r.ok, "returncode": r.returncode,
            **{k: r.report.get(k) for k in CHECKS}}


def run(minutes: float, burners: int, sample_s: float, log: Any,
        wrap: bool = False) -> dict[str, Any]:
    build_plugin()
    lab = Lab(unique_prefix("lgsk"), 2, 2)
    lab.up()
    daemons, procs = [], []
    pair = None
    seconds = minutes * 60
    samples = []
    try:
        daemons = start_daemons(lab, ["--hold-down-ms", "300", "--flap-penalty", "0"])
        pair = start_stream_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                                 f"{lab.mgmt_address('b')}:7400", duration_s=seconds + 5,
                                 args=ARGS, env=WRAP_ENV if wrap else {},
                                 server_env=driver_env(lab, "b"),
                                 client_env=driver_env(lab, "a"), timeout=seconds + 90,
                                 plugin=LINKGUARD_SO)
        time.sleep(3)
        procs = [burner(seconds + 10) for _ in range(burners)]
        t0 = time.monotonic()
        last = (t0, lab.tx_bytes("a", 0), lab.tx_bytes("a", 1))
        while time.monotonic() - t0 < seconds and pair.running():
            time.sleep(sample_s)
            now = (time.monotonic(), lab.tx_bytes("a", 0), lab.tx_bytes("a", 1))
            dt = now[0] - last[0]
            samples.append({"t_s": round(now[0] - t0, 1),
                            "rail0_mb_s": (now[1] - last[1]) / dt / 1e6,
                            "rail1_mb_s": (now[2] - last[2]) / dt / 1e6})
            last = now
            if len(samples) % max(1, int(60 / sample_s)) == 0:
                log(f"{samples[-1]['t_s']:.0f} s: rail0 {samples[-1]['rail0_mb_s']:.0f} MB/s, "
                    f"rail1 {samples[-1]['rail1_mb_s']:.0f} MB/s")
        ran_s = time.monotonic() - t0
        # The drivers end by themselves at their --duration-s, just after the loop: their
        # reports say whether every byte arrived.
        results = pair.wait(timeout=sample_s + 60)
        lines = [ln.text for ln in pair.stderr_lines()]
    finally:
        for p in procs:
            p.kill()  # only the burners this run started
            p.wait()
        if pair:
            pair.kill()
        for d in daemons:
            d.stop()
        lab.down()
    total = [s["rail0_mb_s"] + s["rail1_mb_s"] for s in samples]
    out = {"minutes": minutes, "ran_s": round(ran_s, 1), "burners": burners, "wrap": wrap,
           "drivers_ran_through": ran_s >= seconds,
           "drivers": dict(zip(("server", "client"), map(verdict, results))),
           **count_lines(lines),
           "throughput_mb_s": {"mean": sum(total) / len(total) if total else 0.0,
                               "min": min(total) if total else 0.0},
           "on_backup_samples": sum(1 for s in samples if s["rail1_mb_s"] > s["rail0_mb_s"]),
           "samples": samples}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--wrap", action="store_true",
                    help="wrap mode: LINKGUARD_INNER = the standalone lgtcp build")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.minutes <= 0 or a.minutes > 240 or not 0 <= a.burners <= 16 or a.sample_s <= 0:
        ap.error("--minutes in (0, 240], --burners in [0, 16], --sample-s > 0")
    out = run(a.minutes, a.burners, a.sample_s, lambda s: print(s, file=sys.stderr, flush=True),
              wrap=a.wrap)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
