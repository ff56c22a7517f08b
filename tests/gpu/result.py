"""The check's verdict and its one JSON result (schema linkguard-gpu-check/1).

{
  "schema": "linkguard-gpu-check/1", "mode": "gpu" | "dry-run", "ok": bool,
  "failures": [str],                    why not ok, one line each (empty when ok)
  "started_utc": str, "duration_s": float,
  "environment": {...},                 versions and where the plugin, wheels and tools came from
  "lab": {"prefix": str, "torn_down": bool},
  "failover": {
    "ranks": {"a"|"b": {"ok", "iterations", "wrong_elements", "exception", ...}},
    "logs": {"a"|"b": {"networks", "plugins_loaded", "devices", "plugin_devices", "no_daemon",
                       "warnings", "failovers_before_cut", "failovers_after_cut",
                       "reintegrations_after_restore", "switches"}},
    "cut_rail": int, "cut_at_iteration": int, "restore_at_iteration": int,
    "daemon": {"down": {...} | null, "up": {...} | null},   a's cut rail, from its shm events
    "max_iteration_ms": {"before_cut", "fault", "after_restore"} | null
  } | null,
  "bandwidth": {"metric": str, "baseline": str,
                "rows": [{"bytes", "linkguard_gbs", "baseline_gbs", "ratio"}],
                "networks": {"linkguard"|"socket": {"a"|"b": [str]}}} | null,
  "artifacts": [str]                    the files beside result.json
}
Pass (gpu): both ranks end without an exception and with no wrong element; each host's log
shows a failover after the cut and a reintegration after the restore; NCCL says it uses the
network linkguard, loaded the plugin and connected only through NET/linkguard devices; the
plugin never ran without its daemon; the bandwidth runs are clean and each used the network it
was meant to (linkguard, then Socket). The dry run checks the same except NCCL's own lines.
"""

from __future__ import annotations

from typing import Any

from nccl_log import count_switches

SCHEMA = "linkguard-gpu-check/1"
HOSTS = ("a", "b")
MAX_LISTED = 40  # switch and WARN lines kept per host in the JSON (the full logs travel too)


def new_result(mode: str, started_utc: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "mode": mode, "ok": False, "failures": [],
            "started_utc": started_utc, "duration_s": 0.0, "environment": {}, "lab": {},
            "failover": None, "bandwidth": None, "artifacts": []}


def rank_failures(host: str, r: dict[str, Any]) -> list[str]:
    out = []
    if r.get("exception"):
        out.append(f"{host}: {r['exception']}")
    elif not r.get("ok"):
        out.append(f"{host}: the rank failed (exit {r.get('returncode')})")
    if r.get("wrong_elements"):
        out.append(f"{host}: {r['wrong_elements']} wrong element(s)")
    if r.get("bad_votes"):
        out.append(f"{host}: {r['bad_votes']} corrupted stop vote(s)")
    return out


def nccl_identity_failures(host: str, log: dict[str, Any], net: str) -> list[str]:
    """NCCL's own lines must name `net` as the network and its devices (gpu mode only)."""
    out = []
    if log["networks"] != [net]:
        out.append(f"{host}: NCCL used network(s) {log['networks'] or 'none logged'}, "
                   f"not {net}")
    if not log["devices"] or any(not d.startswith(f"NET/{net}/") for d in log["devices"]):
        out.append(f"{host}: NCCL connected through {log['devices'] or 'no logged device'}, "
                   f"not only NET/{net}/*")
    if net == "linkguard" and not any(p["name"] == "linkguard" for p in log["plugins_loaded"]):
        out.append(f"{host}: no 'Loaded net plugin linkguard' line from NCCL")
    return out


def failover_section(mode: str, ranks: dict[str, dict[str, Any]],
                     logs: dict[str, dict[str, Any]], cut: dict[str, int],
                     restore: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """The failover phase's section and its failures. `cut` and `restore` are each host's log
    position at that moment; a line at or after it was written later."""
    failures: list[str] = []
    shown: dict[str, dict[str, Any]] = {}
    for host in HOSTS:
        r, log = ranks.get(host, {}), logs.get(host)
        failures += rank_failures(host, r)
        if not r.get("iterations"):
            failures.append(f"{host}: no iteration completed")
        if log is None:
            failures.append(f"{host}: no log")
            continue
        sw = log["switches"]
        row = {k: log[k] for k in ("networks", "plugins_loaded", "devices", "plugin_devices",
                                   "no_daemon")}
        row.update(warnings=log["warnings"][:MAX_LISTED], switches=sw[:MAX_LISTED],
                   failovers_before_cut=count_switches(sw, "failover", before=cut[host]),
                   failovers_after_cut=count_switches(sw, "failover", after=cut[host]),
                   reintegrations_after_restore=count_switches(sw, "reintegrated",
                                                               after=restore[host]))
        shown[host] = row
        if not row["failovers_after_cut"]:
            failures.append(f"{host}: no failover line from the plugin after the cut")
        if not row["reintegrations_after_restore"]:
            failures.append(f"{host}: no reintegration line from the plugin after the restore")
        if log["no_daemon"]:
            failures.append(f"{host}: the plugin ran without its daemon ({log['no_daemon'][0]})")
        if mode == "gpu":
            failures += nccl_identity_failures(host, log, "linkguard")
    return {"ranks": ranks, "logs": shown}, failures


def bandwidth_section(mode: str, runs: dict[str, dict[str, dict[str, Any]]],
                      logs: dict[str, dict[str, dict[str, Any]]]
                      ) -> tuple[dict[str, Any], list[str]]:
    """runs/logs: {"linkguard"|"socket": {host: ...}}; rows from rank a (both ranks time the
    same collectives)."""
    failures: list[str] = []
    for transport, per_host in runs.items():
        for host, r in per_host.items():
            failures += [f"bandwidth {transport}: {f}" for f in rank_failures(host, r)]
            for row in r.get("rows", []):
                if row.get("wrong_elements"):
                    failures.append(f"bandwidth {transport}: {host}: {row['wrong_elements']} "
                                    f"wrong element(s) at {row['bytes']} B")
        if mode == "gpu":
            net = "linkguard" if transport == "linkguard" else "Socket"
            for host in HOSTS:
                failures += [f"bandwidth {transport}: {f}" for f in
                             nccl_identity_failures(host, logs[transport][host], net)]
    lg = {row["bytes"]: row for row in runs["linkguard"]["a"].get("rows", [])}
    base = {row["bytes"]: row for row in runs["socket"]["a"].get("rows", [])}
    rows = []
    for size in sorted(set(lg) | set(base)):
        a, b = lg.get(size, {}).get("busbw_gbs"), base.get(size, {}).get("busbw_gbs")
        rows.append({"bytes": size, "linkguard_gbs": a, "baseline_gbs": b,
                     "ratio": a / b if a is not None and b else None})
    if mode == "gpu":
        metric = "all-reduce bus bandwidth, GB/s (nccl-tests' busbw), 2 ranks on one GPU"
        baseline = "NCCL's built-in socket transport (NCCL_NET=Socket, NCCL_SOCKET_IFNAME=rail0)"
    else:
        metric = "lg_nccl_driver one-way throughput, GB/s (dry run: no NCCL)"
        baseline = "lgtcp, linkguard's TCP transport without failover (LGTCP_IFS=rail0)"
    networks = {t: {h: logs[t][h]["networks"] for h in HOSTS} for t in logs}
    return {"metric": metric, "baseline": baseline, "rows": rows, "networks": networks}, failures


# --- schema ----------------------------------------------------------------------------------

_TOP: dict[str, type | tuple[type, ...]] = {
    "schema": str, "mode": str, "ok": bool, "failures": list, "started_utc": str,
    "duration_s": (int, float), "environment": dict, "lab": dict, "artifacts": list}


def validate(result: dict[str, Any]) -> list[str]:
    """What is wrong with a result document's shape (empty: it follows the schema)."""
    problems = [f"{k}: missing or not {t}" for k, t in _TOP.items()
                if not isinstance(result.get(k), t)]
    if result.get("schema") != SCHEMA:
        problems.append(f"schema: {result.get('schema')!r} is not {SCHEMA!r}")
    if result.get("mode") not in ("gpu", "dry-run"):
        problems.append(f"mode: {result.get('mode')!r}")
    if result.get("ok") and result.get("failures"):
        problems.append("ok is true but failures are listed")
    fo = result.get("failover")
    if fo is not None:
        for host in HOSTS:
            r = fo.get("ranks", {}).get(host)
            if not isinstance(r, dict) or not isinstance(r.get("wrong_elements", 0), int):
                problems.append(f"failover.ranks.{host}: missing or malformed")
            log = fo.get("logs", {}).get(host)
            if log is not None and not all(isinstance(log.get(k), int) for k in (
                    "failovers_after_cut", "reintegrations_after_restore")):
                problems.append(f"failover.logs.{host}: switch counts missing")
    bw = result.get("bandwidth")
    if bw is not None:
        for i, row in enumerate(bw.get("rows", [])):
            if not isinstance(row.get("bytes"), int) or "ratio" not in row:
                problems.append(f"bandwidth.rows[{i}]: malformed")
    elif result.get("ok"):
        problems.append("ok without a bandwidth section")
    if result.get("ok") and fo is None:
        problems.append("ok without a failover section")
    return problems


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A short table for the end of the console output."""
    verdict = "PASS" if result["ok"] else "FAIL"
    out = [f"linkguard GPU check ({result['mode']}): {verdict} in {result['duration_s']:.0f} s"]
    env = result.get("environment", {})
    if env:
        out.append("  " + ", ".join(f"{k} {v}" for k, v in env.items()))
    fo = result.get("failover")
    if fo:
        for host in HOSTS:
            r, log = fo["ranks"].get(host, {}), fo["logs"].get(host, {})
            out.append(f"  {host}: {r.get('iterations', 0)} iterations, "
                       f"{r.get('wrong_elements', 0)} wrong, net {log.get('networks')}, "
                       f"devices {log.get('devices')}, failovers after cut "
                       f"{log.get('failovers_after_cut')}, reintegrations after restore "
                       f"{log.get('reintegrations_after_restore')}")
    bw = result.get("bandwidth")
    if bw:
        out.append(f"  {bw['metric']}; baseline: {bw['baseline']}")
        out.append(f"  {'size':>10} {'linkguard':>10} {'baseline':>10} {'ratio':>7}")
        for row in bw["rows"]:
            def f(v: float | None, w: int, p: int) -> str:
                return f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"
            out.append(f"  {row['bytes'] // 1024:>8}Ki {f(row['linkguard_gbs'], 10, 3)} "
                       f"{f(row['baseline_gbs'], 10, 3)} {f(row['ratio'], 7, 3)}")
    out += [f"  FAIL: {f}" for f in result["failures"]]
    return out
