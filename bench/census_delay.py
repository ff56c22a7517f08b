"""How soon operators see a failover: the plugins' connection census in `status` (issue 29).

Two lab hosts, linkguardd in each, 2 lg_nccl_driver pairs of 64 connections (host a sends to
host b through libnccl-net-linkguard.so, rail0 primary, rail1 standby), every plugin pointed at
its host's verdict socket, on which it sends its census. Per trial: cut a's rail0, then poll
host a's daemon (GetStatus on its read-only socket, every 5 ms) until rail1 carries all 128
connections on their backup; restore rail0 and poll until rail0 carries all 128 on their
primary again. Reported per trial: from the last connection's failover (its log line) to the
first status that shows all of them moved, and the same for the return after the last
reintegration. Both clocks are CLOCK_MONOTONIC of the same kernel. The goal (issue 29): within
1 s. Results: BENCHMARKS.md, "Census".
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.driver_fleet import Fleet
from bench.plugin_driver import build_plugin
from linkguard_cli.client import Client
from linkguard_lab import demo
from linkguard_lab.demo import driver_env, start_daemons
from linkguard_lab.lab import Lab, unique_prefix

PROCS, CONNS = 2, 64
TOTAL = PROCS * CONNS
DAEMON_ARGS = ["--interfaces", "rail0,rail1", "--hold-down-ms", "300"]
ARGS = ["--size", "4K", "--depth", "2", "--pace-us", "20000", "--idle-us", "200",
        "--gap-list-ms", "-1"]
POLL_S = 0.005
WAIT_S = 60.0  # every wait's bound


def roles(client: Client) -> dict[str, dict[str, int]]:
    return {n.name: {"primary": n.traffic.primary, "backup": n.traffic.backup,
                     "away": n.traffic.away} for n in client.status().nics}


def first_shown(client: Client, nic: str, role: str) -> int | None:
    """CLOCK_MONOTONIC ns of the first status that shows all TOTAL on `nic` in `role`."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        now = time.monotonic_ns()
        if roles(client).get(nic, {}).get(role) == TOTAL:
            return now
        time.sleep(POLL_S)
    return None


def trial(lab: Lab, fleet: Fleet, client: Client) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for what, undo, nic, role, kind in (("failover", lab.cut, "rail1", "backup", "failover"),
                                        ("return", lab.restore, "rail0", "primary",
                                         "reintegration")):
        t0 = undo("a", 0)
        shown = first_shown(client, nic, role)
        moved = fleet.wait_all(kind, t0, WAIT_S)
        last = max(moved.values()) if len(moved) == TOTAL else None
        out[f"{what}_ms"] = round((shown - last) / 1e6, 1) if shown and last else None
        out[f"{what}_connections"] = len(moved)
        time.sleep(1)  # settle: the standby rebuilt, the next cut finds it standing
    return out


def main() -> None:
    demo.unwind_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.trials < 1:
        ap.error("--trials must be at least 1")
    build_plugin()
    with Lab(unique_prefix("lgcd"), 2, 2) as lab:
        lab.up()
        daemons = start_daemons(lab, DAEMON_ARGS)
        fleet = None
        try:
            env = {h: {**driver_env(lab, h),
                       "LINKGUARD_VERDICT_SOCKET": str(d.workdir / "verdict.sock")}
                   for h, d in zip(("a", "b"), daemons)}
            fleet = Fleet(lab, PROCS, CONNS, a.trials * 4 * WAIT_S + 60, ARGS, env={},
                          server_env=env["b"], client_env=env["a"])
            client = Client(str(daemons[0].grpc_socket), 5.0,
                            str(daemons[0].workdir / "api-ro.sock"))
            if first_shown(client, "rail0", "primary") is None:
                raise SystemExit(f"bench.census_delay: the census never showed {TOTAL} "
                                 f"connections on rail0: {roles(client)}")
            trials = [trial(lab, fleet, client) for _ in range(a.trials)]
            fleet.finish()
        finally:
            if fleet is not None:
                fleet.kill()
            for d in daemons:
                d.stop()
    res = {"procs": PROCS, "conns": CONNS, "trials": trials}
    for what in ("failover", "return"):
        got = [t[f"{what}_ms"] for t in trials if t[f"{what}_ms"] is not None]
        res[what] = {"median_ms": statistics.median(got) if got else None,
                     "max_ms": max(got) if got else None, "measured": len(got)}
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
