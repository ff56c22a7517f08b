"""Spread failover (issue 28): 2 hosts x 4 rails, every rail policed to the same rate R, one
lg_nccl_driver pair per device (the driver drives one --dev per process), each `--conns`
connections streaming from host a to host b, every byte verified. Two modes, alternating, in
one lab: spread (each NIC's backup set is every other NIC, `--pairs '*:all'`) and pair (a ring
of pairs rail0:rail1, rail1:rail2, rail2:rail3, rail3:rail0). Per mode:

- a control window before the cut, then a's rail0 cut and the window after it (from the cut:
  the failover gap counts against the mode); per device the verified bytes received in each
  (the server drivers' progress lines), the slowest device's ratio after/before and the total's;
- the failover gap of each of device 0's connections (the client's gap list, --gap-list-ms);
- spread mode only: a second cut, of rail1 (in pair mode device 0 has no path left then: its
  connections fail by design), its window and ratios; then both restored: the daemon's UP of
  rail0 to the last of device 0's connections back on its primary;
- lossless: every driver's report (corrupt, missing, duplicated, reordered, errors).

Results as JSON on stdout (and --out); BENCHMARKS.md "Spread failover (issue 28)"."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.driver_fleet import Fleet
from bench.plugin_driver import DriverResult, build_plugin, gaps_overlapping
from bench.spread_windows import progress_samples, ratios, window_rate
from linkguard_lab.demo import HostDaemon, start_daemons
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.timeline import first_event

RAILS = 4
NICS = [f"rail{i}" for i in range(RAILS)]
MODES = {"spread": "*:all",
         "pair": ",".join(f"{NICS[i]}:{NICS[(i + 1) % RAILS]}" for i in range(RAILS))}
DAEMON_ARGS = ["--interfaces", ",".join(NICS), "--locality", "any", "--hold-down-ms", "300",
               "--flap-penalty", "0"]
WARM_S = 3.0  # after the traffic starts, before the control window (TCP ramps, pacing settles)
FAIL_WAIT_S = 10.0  # cut -> every device-0 connection's failover line
BACK_WAIT_S = 5.0  # issue 28: every connection back on its primary within 5 s of the UP
UP_WAIT_S = 10.0  # restore -> the daemon's UP (hold-down 300 ms)
CONNECT_S = 30.0  # drivers started -> every server received data
GAP_LIST_MS = 20  # every gap >= this is listed by the client driver
# Every rail is policed, so TCP retransmits several percent on all of them: the plugin's lossy
# judge (LINKGUARD_GRAY_RETRANS_PCT) would move connections off full-but-working rails before
# any cut (24 of 32 did in a first run). Here a full rail is healthy; the judge is off.
PLUGIN_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET", "LINKGUARD_GRAY_RETRANS_PCT": "0"}


def env_setting(text: str) -> tuple[str, str]:
    """--env NAME=VALUE: a plugin setting for every driver (LINKGUARD_*, LGTCP_* or NCCL_*)."""
    name, eq, value = text.partition("=")
    if not eq or not name.startswith(("LINKGUARD_", "LGTCP_", "NCCL_")):
        raise argparse.ArgumentTypeError(f"--env wants NAME=VALUE with a LINKGUARD_, LGTCP_ or "
                                         f"NCCL_ name, not {text!r}")
    return name, value


def driver_args(size: str, depth: int) -> list[str]:
    return ["--size", size, "--depth", str(depth), "--idle-us", "200", "--progress-ms", "250",
            "--timestamps", "--gap-list-ms", str(GAP_LIST_MS), "--top-gaps", "5"]


def rates(fleet: Fleet, start_ns: int, end_ns: int) -> dict[int, float | None]:
    """Per device (= pair), the verified bytes/s its server received in [start, end]."""
    return {i: window_rate(progress_samples(ln.text for ln in p.stderr_lines("server")),
                           start_ns, end_ns) for i, p in enumerate(fleet.pairs)}


def window(fleet: Fleet, before: dict[int, float | None], start_ns: int,
           seconds: float) -> dict[str, Any]:
    time.sleep(max(0.0, start_ns / 1e9 + seconds - time.monotonic_ns() / 1e9) + 0.3)
    after = rates(fleet, start_ns, start_ns + int(seconds * 1e9))
    out = ratios(before, after)
    out["mb_s"] = {d: round((r or 0) / 1e6, 2) for d, r in after.items()}
    return out


def lossless(results: list[tuple[DriverResult, DriverResult]]) -> dict[str, Any]:
    bad = []
    for i, pair in enumerate(results):
        for role, r in zip(("server", "client"), pair):
            rep = r.report
            counts = [rep.get(k, -1) for k in ("corrupt_messages", "missing_messages",
                                               "duplicated_messages", "reordered_messages")]
            if r.returncode != 0 or not r.ok or any(c != 0 for c in counts):
                bad.append({"pair": i, "role": role, "rc": r.returncode, "counts": counts,
                            "failure": rep.get("failure"), "errors": rep.get("errors"),
                            "stderr": r.stderr[-800:]})
    return {"ok": not bad, "bad": bad}


def run_mode(lab: Lab, mode: str, a: argparse.Namespace, log: Any) -> dict[str, Any]:
    daemons = start_daemons(lab, [*DAEMON_ARGS, "--pairs", MODES[mode]])
    da, db = daemons
    out: dict[str, Any] = {"mode": mode, "pairs": MODES[mode]}
    fleet = None
    try:
        bound = a.control_s + a.after_s + a.second_s + 60
        fleet = Fleet(lab, RAILS, a.conns, bound, driver_args(a.size, a.depth), env=PLUGIN_ENV,
                      server_env=_env(db), client_env=_env(da),
                      pair_args=[["--dev", str(d)] for d in range(RAILS)])
        if not fleet.wait(lambda: all(_moving(p) for p in fleet.pairs), CONNECT_S):
            raise RuntimeError(f"{mode}: not every device moves data: {fleet.warnings[:5]}")
        events = da.new_events()
        time.sleep(WARM_S + a.control_s)
        cut = lab.cut("a", 0)
        before = rates(fleet, cut - int(a.control_s * 1e9), cut)
        # Moves before the cut (a policed rail's drops can look gray to the plugin): each one
        # blurs the control window, so the count is part of the result.
        out["failovers_before_cut"] = len([t for t in fleet.conn_times("failover", 0).values()
                                           if t < cut])
        out["failover_lines_before_cut"] = [
            f"dev {i}: {ln.text[:200]}" for i, p in enumerate(fleet.pairs)
            for ln in p.stderr_lines("client") if "failover" in ln.text.lower()][:6]
        out["healthy_mb_s"] = {d: round((r or 0) / 1e6, 2) for d, r in before.items()}
        fo = fleet.wait(lambda: len({k for k in fleet.conn_times("failover", cut)
                                     if k[0] == 0}) >= a.conns, FAIL_WAIT_S)
        out["cut1"] = window(fleet, before, cut, a.after_s)
        out["cut1"]["failovers_dev0"] = len([k for k in fleet.conn_times("failover", cut)
                                              if k[0] == 0]) if fo is not None else 0
        log(f"{mode}: cut rail0: slowest {out['cut1']['slowest']:.3f} "
            f"total {out['cut1']['total']:.3f} {out['cut1']['mb_s']}")
        cut_end = cut + int(a.after_s * 1e9)
        if mode == "spread" and a.second_s > 0:
            second = lab.cut("a", 1)
            cut_end = second
            out["cut2"] = window(fleet, before, second, a.second_s)
            log(f"{mode}: cut rail1 too: slowest {out['cut2']['slowest']:.3f} "
                f"total {out['cut2']['total']:.3f} {out['cut2']['mb_s']}")
            lab.restore("a", 1)
        restore = lab.restore("a", 0)
        out["return"] = back_on_primary(fleet, da, events, restore)
        log(f"{mode}: return {out['return']}")
        results = fleet.finish()
        out["lossless"] = lossless(results)
        out["gaps_ms"] = gap_list(results[0][1].report, cut, cut_end, a.conns)
        out["plugin_warnings"] = len(fleet.warnings)
    finally:
        if fleet is not None:
            fleet.kill()
        for d in daemons:
            d.stop()
    return out


def _moving(pair: Any) -> bool:
    samples = progress_samples(ln.text for ln in pair.stderr_lines("server"))
    return bool(samples) and samples[-1][1] > 0


def _env(d: HostDaemon) -> dict[str, str]:
    return {"LINKGUARD_SHM": str(d.shm_path),
            "LINKGUARD_VERDICT_SOCKET": str(d.workdir / "verdict.sock")}


def back_on_primary(fleet: Fleet, da: HostDaemon, events: list, restore: int) -> dict[str, Any]:
    """Daemon's UP of rail0 -> the last of device 0's connections back on its primary."""
    deadline = time.monotonic() + UP_WAIT_S
    while not (up := first_event(events, nic="rail0", new="UP", after_ns=restore, host="a")):
        if time.monotonic() > deadline:
            return {"up": False}
        time.sleep(0.05)
        events += da.new_events()
    fleet.wait(lambda: len([k for k in fleet.conn_times("reintegration", restore)
                            if k[0] == 0]) >= fleet.conns, BACK_WAIT_S + 1)
    back = [t for k, t in fleet.conn_times("reintegration", restore).items() if k[0] == 0]
    last_ms = (max(back) - up.time_ns) / 1e6 if back else None
    return {"up": True, "back": len(back), "of": fleet.conns,
            "last_after_up_ms": round(last_ms, 1) if last_ms is not None else None}


def gap_list(report: dict[str, Any], start_ns: int, end_ns: int, conns: int) -> dict[str, Any]:
    """Device 0's client: the longest listed gap per connection around the cut."""
    worst: dict[int, float] = {}
    for comm, s, e, _ in gaps_overlapping(report, start_ns, end_ns):
        worst[comm] = max(worst.get(comm, 0.0), (e - s) / 1e6)
    vals = sorted(worst.values())
    return {"conns_with_gap": len(vals), "of": conns,
            "median": round(vals[len(vals) // 2], 1) if vals else None,
            "max": round(vals[-1], 1) if vals else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", default="25MB", help="every rail's policer, each way (R)")
    p.add_argument("--conns", type=int, default=8, help="connections per device")
    p.add_argument("--size", default="64K")
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--control-s", type=float, default=20.0)
    p.add_argument("--after-s", type=float, default=60.0)
    p.add_argument("--second-s", type=float, default=20.0, help="0: no second cut")
    p.add_argument("--rounds", type=int, default=1, help="spread then pair, this many times")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--env", type=env_setting, action="append", default=[],
                   help="NAME=VALUE, a plugin setting on top of the bench's own (repeatable), "
                        "e.g. LINKGUARD_STALL_MS=2000; wrap mode over lgtcp: "
                        "LINKGUARD_INNER=plugin/build/libnccl-net-lgtcp.so "
                        "LGTCP_IFS=rail0,rail1,rail2,rail3")
    a = p.parse_args()
    PLUGIN_ENV.update(a.env)
    if a.conns < 1 or a.rounds < 1 or a.control_s <= 1 or a.after_s <= 1:
        p.error("--conns and --rounds >= 1, --control-s and --after-s > 1")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    build_plugin()
    t0 = time.monotonic()
    runs = []
    with Lab(unique_prefix("lgsp"), 2, RAILS) as lab:
        lab.up()
        lab.police(a.rate)
        for r in range(a.rounds):
            for mode in MODES:
                log(f"round {r + 1}: {mode}")
                runs.append(run_mode(lab, mode, a, log))
    result = {"env": PLUGIN_ENV, "rate": a.rate, "conns": a.conns, "size": a.size, "depth": a.depth,
              "control_s": a.control_s, "after_s": a.after_s, "second_s": a.second_s,
              "runs": runs, "seconds": round(time.monotonic() - t0, 1),
              "load_after": Path("/proc/loadavg").read_text().split()[:3]}
    text = json.dumps(result, indent=1)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
