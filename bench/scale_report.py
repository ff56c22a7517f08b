"""bench.scale's tables and its verdict on each of issue 11's goals, from the cells' results
(dicts as bench/scale.py's run_cell returns them, or as its --json file holds them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The goals (#11): at these cells, every connection lossless and gap p99 within 50 ms
# of the control p99; everywhere: every standby back within 3 s of UP, at most 4 descriptors
# per connection, the plugin's threads under 2 % of a core per 100 idle connections.
GOAL_CELLS = ((2, 256), (8, 32))
GOAL_P99_MS = 50.0
GOAL_STANDBY_S = 3.0
GOAL_FDS = 4.0
GOAL_IDLE_CPU = 2.0


def mean_of(cell: dict[str, Any], host: str, key: str) -> float | None:
    rows = cell.get("footprint", {}).get(host, [])
    return sum(r[key] for r in rows) / len(rows) if rows else None


def per_conn(cell: dict[str, Any], cells: list[dict[str, Any]], key: str,
             host: str) -> float | None:
    """(per-process value - that of a 1-connection process) / (connections - 1): what one
    more connection costs. The baseline is the 1-connection cell with as many processes, else
    any 1-connection cell."""
    if cell["conns"] < 2:
        return None
    base = [c for c in cells if c["conns"] == 1 and c.get("footprint")]
    base.sort(key=lambda c: c["procs"] != cell["procs"])
    here = mean_of(cell, host, key)
    if not base or here is None:
        return None
    b = mean_of(base[0], host, key)
    return None if b is None else (here - b) / (cell["conns"] - 1)


def cpu_per_100(cell: dict[str, Any], what: str, host: str) -> float | None:
    """The plugin threads of one host's drivers, % of a core per 100 connections."""
    share = cell.get(what, {}).get(host)
    return None if share is None else share * 100 / (cell["procs"] * cell["conns"] / 100)


def over_control(cell: dict[str, Any]) -> float | None:
    """The gap p99 at the cut minus the control's p99, in whole ms."""
    f, k = cell.get("fault_gap_ms", {}), cell.get("control_gap_ms", {})
    return round(f["p99"] - k["p99"]) if f.get("n") and k.get("n") else None


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _gaps(s: dict[str, Any]) -> str:
    return f"{s['p50']:.0f} / {s['p99']:.0f} / {s['max']:.0f}" if s.get("n") else "-"


def _pair(c: dict[str, Any], fn: Callable[..., float | None], *args: Any,
          fmt: str = "{:.1f}") -> str:
    return ", ".join(_f(fn(c, *args, h), fmt) for h in "ab")


def table(cells: list[dict[str, Any]]) -> str:
    """Two Markdown tables: the cut, then what the connections cost (a = senders' host)."""
    rows = [("| procs x conns | conns / host | messages/s / host | lossless | switched / "
             "standby back / on primary (of conns x trials) | gap at the cut p50 / p99 / max ms "
             "| control p50 / p99 / max ms | p99 - control p99 ms | cut -> last switch s | "
             "UP -> every standby s | UP -> all on primary s |"),
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        n = c["procs"] * c["conns"]
        tr = c.get("trials", [])
        f, k = c.get("fault_gap_ms", {}), c.get("control_gap_ms", {})
        rows.append(
            f"| {c['procs']} x {c['conns']} | {n} | {n * 1e6 / c['pace_us']:.0f} | "
            f"{'yes' if c.get('lossless') else 'NO'} | "
            f"{sum(t['switched'] for t in tr)} / {sum(t['rebuilt'] for t in tr)} / "
            f"{sum(t['back'] for t in tr)} (of {n * len(tr)}) | {_gaps(f)} | {_gaps(k)} | "
            f"{_f(over_control(c), '{:.0f}')} | {_f(c.get('switch_s'), '{:.2f}')} | "
            f"{_f(c.get('standby_s'), '{:.2f}')} | {_f(c.get('back_s'), '{:.2f}')} |")
    rows += ["", ("| procs x conns | fds / conn a, b | threads / process | RSS KiB / conn a, b "
                  "| lg threads idle, % of a core / 100 conns a, b | lg threads under traffic, % "
                  "of a core a, b |"),
             "|---|---:|---:|---:|---:|---:|"]
    for c in cells:
        traffic = c.get("cpu_traffic", {})
        rows.append(
            f"| {c['procs']} x {c['conns']} | {_pair(c, per_conn, cells, 'fds')} | "
            f"{_f(mean_of(c, 'a', 'threads'), '{:.0f}')} | "
            f"{_pair(c, per_conn, cells, 'rss_kib', fmt='{:.0f}')} | "
            f"{_pair(c, cpu_per_100, 'cpu_idle', fmt='{:.2f}')} | "
            f"{', '.join(_f(traffic[h] * 100 if h in traffic else None) for h in 'ab')} |")
    return "\n".join(rows)


def goals(cells: list[dict[str, Any]]) -> list[str]:
    """One line per goal of the issue: met, missed (by how much), or not measured."""
    by = {(c["procs"], c["conns"]): c for c in cells}
    lines = []
    for cell in GOAL_CELLS:
        c = by.get(cell)
        if c is None:
            lines.append(f"{cell[0]} x {cell[1]}: not measured in this run")
            continue
        diff = over_control(c)
        ok = bool(c.get("lossless")) and diff is not None and diff <= GOAL_P99_MS
        lines.append(f"{cell[0]} x {cell[1]}: {'met' if ok else 'MISSED'}: lossless "
                     f"{'yes' if c.get('lossless') else 'no'}, gap p99 {_f(diff, '{:.0f}')} ms "
                     f"over the control p99 (goal <= {GOAL_P99_MS:g})")
    standby = [(c["procs"], c["conns"], c.get("standby_s")) for c in cells if c.get("trials")]
    late = [s for s in standby if s[2] is None or s[2] > GOAL_STANDBY_S]
    lines.append(f"every standby back within {GOAL_STANDBY_S:g} s of UP: "
                 + ("met in every cell" if standby and not late else "MISSED in " + ", ".join(
                     f"{p} x {n} ({_f(s, '{:.1f} s') if s is not None else 'not all back'})"
                     for p, n, s in late) if standby else "not measured"))
    fds = [(c, max(x for h in "ab" if (x := per_conn(c, cells, "fds", h)) is not None))
           for c in cells if any(per_conn(c, cells, "fds", h) is not None for h in "ab")]
    worst = max(fds, key=lambda x: x[1], default=None)
    lines.append(f"<= {GOAL_FDS:g} fds per connection: " + (
        "not measured" if worst is None else
        f"{'met' if worst[1] <= GOAL_FDS else 'MISSED'} (worst {worst[1]:.1f}, at "
        f"{worst[0]['procs']} x {worst[0]['conns']})"))
    cpu = [(c, max(x for h in "ab" if (x := cpu_per_100(c, "cpu_idle", h)) is not None))
           for c in cells if c["conns"] * c["procs"] >= 100 and c.get("cpu_idle")]
    worst = max(cpu, key=lambda x: x[1], default=None)
    lines.append(f"plugin threads < {GOAL_IDLE_CPU:g} % of a core per 100 idle connections: " + (
        "not measured (no cell with >= 100 connections per host)" if worst is None else
        f"{'met' if worst[1] < GOAL_IDLE_CPU else 'MISSED'} (worst {worst[1]:.2f} %, at "
        f"{worst[0]['procs']} x {worst[0]['conns']})"))
    return lines
