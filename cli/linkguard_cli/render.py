"""What linkguard-cli prints: the status table, module diagnostics, event lines, and their JSON.

Functions return text; colour is added with click.style and removed by click.echo when the
output is not a terminal. Pad first, colour second: escape codes have no width.
"""
from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import click

from linkguard.v1 import linkguard_pb2 as pb

STATE_NAMES = {v.number: v.name.removeprefix("NIC_STATE_") for v in pb.NicState.DESCRIPTOR.values}
STATE_COLOURS = {"UP": "green", "DEGRADED": "yellow", "DOWN": "red", "DRAINED": "magenta",
                 "RECOVERING": "cyan", "UNKNOWN": "white"}
# A heartbeat is written every 50 ms (settings.heartbeat_interval_ms); a second without one
# means the daemon's loop is stuck, and plugins will soon stop trusting the shm table.
STALE_HEARTBEAT_S = 1.0
LEVELS = ("low_alarm", "low_warning", "high_warning", "high_alarm")  # left to right: low -> high


def state_name(value: int) -> str:
    return STATE_NAMES.get(value, f"STATE_{value}")


def styled_state(name: str, width: int = 0) -> str:
    return click.style(name.ljust(width), fg=STATE_COLOURS.get(name), bold=name != "UP")


def duration(seconds: float) -> str:
    """9.5s, 12m34s, 1h59m, 3d04h: the two leading units, like `ps` and `systemctl`."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-"  # the daemon's answer is nonsense; show none rather than fail
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def speed(mbps: int | None) -> str:
    if mbps is None:
        return "-"
    if mbps >= 1000 and mbps % 1000 == 0:
        return f"{mbps // 1000}G"
    return f"{mbps / 1000:g}G" if mbps >= 1000 else f"{mbps}M"


def dbm(watts: float) -> str:
    return f"{10 * math.log10(watts * 1000):.2f} dBm" if watts > 0 else "-inf dBm"


def mw_dbm(watts: float) -> str:
    """The way `ethtool -m` prints optical power: 0.5012 mW / -3.00 dBm."""
    return f"{watts * 1000:.4f} mW / {dbm(watts)}"


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if not math.isinf(v) and not math.isnan(v)]


def dom_summary(dom: pb.DomSummary) -> str:
    if dom.status == "no_module":
        return "no module"
    if dom.status != "ok":
        return dom.status
    parts = []
    if dom.HasField("temperature_celsius"):
        parts.append(f"{dom.temperature_celsius:.1f}°C")
    if dom.rx_power_dbm:
        finite = _finite(dom.rx_power_dbm)
        worst = min(finite) if len(finite) == len(dom.rx_power_dbm) else -math.inf
        parts.append(f"rx min {worst:.1f} dBm")
    text = " ".join(parts) or "ok"
    if dom.alarms:
        text += " " + click.style("ALARM " + ",".join(dom.alarms), fg="red", bold=True)
    elif dom.warnings:
        text += " " + click.style("warn " + ",".join(dom.warnings), fg="yellow")
    return text


# ---- status ----------------------------------------------------------------------------------
STATUS_COLUMNS = ("NIC", "STATE", "REASON", "BACKUP", "CARRIER", "SPEED", "IN STATE FOR")
WIDE_COLUMNS = ("OPERSTATE", "EPOCH", "RDMA", "FLAP PENALTY", "SINCE")


def backup_set(nic: pb.Nic) -> list[str]:
    """The NIC's backup set, nearest first; a daemon from before sets (issue 28) sends only
    its one backup."""
    return list(nic.backup_set) or ([nic.backup] if nic.backup else [])


def _wide_cells(nic: pb.Nic) -> list[str]:
    return [nic.operstate or "-", str(nic.epoch), nic.rdma_device or "-",
            f"{nic.flap_penalty:g}", timestamp(nic.since_unix) if nic.since_unix else "-"]


def status_table(resp: pb.GetStatusResponse, wide: bool = False) -> str:
    """The NIC table; `wide` adds operstate, epoch, RDMA device, flap penalty and since when.
    The DOM summary comes last, unpadded (it may carry colour)."""
    d = resp.daemon
    lines = [(f"linkguardd {d.version} on {d.hostname}, pid {d.pid}, "
              f"heartbeat {d.heartbeat_age_seconds * 1000:.0f} ms ago")]
    if d.heartbeat_age_seconds > STALE_HEARTBEAT_S:
        lines[0] += " " + click.style("STALE: NCCL plugins treat the daemon as gone", fg="red",
                                      bold=True)
    if not resp.nics:
        return "\n".join(lines + ["no NIC is monitored (set `interfaces` in the daemon's config)"])
    heads = STATUS_COLUMNS + (WIDE_COLUMNS if wide else ())
    rows = []
    for nic in resp.nics:
        rows.append([
            nic.name, state_name(nic.state), nic.reason.lower(), "+".join(backup_set(nic)) or "-",
            "yes" if nic.carrier else ("no" if nic.present else "absent"),
            speed(nic.speed_mbps if nic.HasField("speed_mbps") else None),
            duration(nic.seconds_in_state), *(_wide_cells(nic) if wide else ()),
        ])
    widths = [max(len(heads[i]), *(len(r[i]) for r in rows)) for i in range(len(heads))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  DOM")
    for nic, row in zip(resp.nics, rows):
        cells = [row[0].ljust(widths[0]), styled_state(row[1], widths[1])]
        cells += [row[i].ljust(widths[i]) for i in range(2, len(heads))]
        lines.append("  ".join(cells) + "  " + dom_summary(nic.dom))
    for nic in resp.nics:
        if nic.drain_reason:
            lines.append(f"{nic.name} drained: {nic.drain_reason}")
    lines += plugin_verdict_lines(resp.nics)
    lines += traffic_lines(resp.nics)
    not_up = [n.name for n in resp.nics if n.state != pb.NIC_STATE_UP]
    if not_up:
        lines.append(f"{len(not_up)} of {len(resp.nics)} NICs not UP: {', '.join(not_up)}")
    return "\n".join(line.rstrip() for line in lines)


def plugin_verdict_lines(nics: Sequence[pb.Nic]) -> list[str]:
    """What jobs' plugins say about gray NICs: the newest report of each, and a count."""
    out = []
    for nic in nics:
        if not nic.plugin_verdicts:
            continue
        v = nic.plugin_verdicts[0]
        more = len(nic.plugin_verdicts) - 1
        out.append(f"{nic.name} " + click.style("GRAY", fg="yellow", bold=True)
                   + f" (reported by jobs, state unchanged): {v.detail}, {v.reports} report(s), "
                   f"last {timestamp(v.last_unix)}" + (f"; {more} more process(es)" if more
                                                       else ""))
    if out:
        out.append(f"{len(out)} of {len(nics)} NICs reported gray by jobs' NCCL plugins")
    return out


# ---- traffic (the census of jobs' plugins) ----------------------------------------------------
TRAFFIC_COLUMNS = ("TRAFFIC", "PROCESSES", "PRIMARY", "BACKUP", "AWAY", "STANDING")
OUT_OF_SERVICE = (pb.NIC_STATE_DOWN, pb.NIC_STATE_DRAINED)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("s") else "s")


def still_on(nic: pb.Nic) -> str:
    """'3 connections of 1 process still on it' / 'no connection on it'."""
    t = nic.traffic
    left = t.primary + t.backup
    if not left:
        return "no connection on it"
    text = f"{_count(left, 'connection')} of {_count(t.processes, 'process')} still on it"
    if t.silent:
        text += (f" ({_count(t.silent, 'process')} silent for seconds: its numbers may be old "
                 "until it is forgotten)")
    return text


def moving_line(nic: pb.Nic) -> str:
    """What a drain moves: the connections on the NIC, as jobs' plugins report them."""
    t = nic.traffic
    left = t.primary + t.backup
    if not left:
        return f"{nic.name}: no job's plugin reports a connection on it"
    where = f" to {nic.backup}" if nic.backup else ""
    return (f"{nic.name}: {_count(left, 'connection')} of {_count(t.processes, 'process')} "
            f"will move{where}")


def traffic_lines(nics: Sequence[pb.Nic]) -> list[str]:
    """Jobs' connections per NIC, when any plugin reports them; for a NIC DOWN or DRAINED,
    whether anything is still on it."""
    if not any(n.traffic.processes for n in nics):
        return []
    rows = [[n.name, *(str(getattr(n.traffic, f)) for f in
                       ("processes", "primary", "backup", "away", "standing"))] for n in nics]
    widths = [max(len(TRAFFIC_COLUMNS[i]), *(len(r[i]) for r in rows))
              for i in range(len(TRAFFIC_COLUMNS))]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(TRAFFIC_COLUMNS, widths)))]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    for nic in nics:
        if nic.state in OUT_OF_SERVICE:
            left = nic.traffic.primary + nic.traffic.backup
            text = still_on(nic)
            out.append(f"{nic.name} {state_name(nic.state)}: "
                       + (click.style(text, fg="red", bold=True) if left else text))
    return out


def traffic_json(t: pb.Traffic) -> dict[str, Any]:
    return {"processes": t.processes, "primary": t.primary, "backup": t.backup, "away": t.away,
            "standing": t.standing, "silent": t.silent, "failovers": t.failovers,
            "reintegrations": t.reintegrations, "failures": dict(sorted(t.failures.items()))}


JOB_COLUMNS = ("JOB", "UIDS", "PROCESSES", "NICS", "CONNECTIONS", "ON BACKUP", "FAILOVERS",
               "FAILURES", "LAST REPORT")


def jobs_table(jobs: Sequence[pb.Job]) -> str:
    if not jobs:
        return ("no job's NCCL plugin reports its connections (plugins send a census over "
                "the verdict socket while they have one)")
    rows = [[j.job, ",".join(map(str, j.uids)), str(len(j.pids)),
             ",".join(n.nic for n in j.nics) or "-", str(j.connections), str(j.on_backup),
             str(j.failovers), str(j.failures), duration(j.silent_seconds) + " ago"]
            for j in jobs]
    widths = [max(len(JOB_COLUMNS[i]), *(len(r[i]) for r in rows))
              for i in range(len(JOB_COLUMNS))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(JOB_COLUMNS, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    moved = sum(1 for j in jobs if j.on_backup)
    if moved:
        lines.append(f"{moved} of {len(jobs)} jobs have connections on the backup")
    return "\n".join(line.rstrip() for line in lines)


def job_json(j: pb.Job) -> dict[str, Any]:
    return {"job": j.job, "uids": list(j.uids), "pids": list(j.pids),
            "nics": [{"nic": n.nic, "primary": n.primary, "backup": n.backup, "away": n.away,
                      "standing": n.standing} for n in j.nics],
            "connections": j.connections, "on_backup": j.on_backup, "failovers": j.failovers,
            "failures": j.failures, "silent_seconds": _json_number(round(j.silent_seconds, 3))}


def plugin_verdict_json(v: pb.PluginVerdict) -> dict[str, Any]:
    return {"verdict": v.verdict, "pid": v.pid, "uid": v.uid, "path": v.path,
            "peer": v.peer or None, "conn": f"{v.conn:016x}" if v.conn else None,
            "for_ms": v.for_ms, "loss_ppm": v.loss_ppm,
            "rate_bytes_per_second": v.rate_bytes_per_second,
            "expected_bytes_per_second": v.expected_bytes_per_second, "reports": v.reports,
            "first_unix": v.first_unix, "last_unix": v.last_unix,
            "expires_unix": v.expires_unix, "detail": v.detail}


def counters_text(nic: pb.Nic) -> str:
    """Every counter of one NIC with its rate where the daemon judges it; `!` marks those holding
    the NIC DEGRADED (`linkguard-cli status NIC`)."""
    if not nic.counters:
        return f"{nic.name}: no counters sampled yet"
    names = sorted(nic.counters)
    width = max(len(n) for n in names)
    digits = max(len(str(nic.counters[n])) for n in names)
    head = f"{nic.name} counters (rate: errors/s over the latest sample; ! holds the NIC DEGRADED):"
    lines = [head]
    for name in names:
        line = f"  {name.ljust(width)}  {str(nic.counters[name]).rjust(digits)}"
        if name in nic.counter_rates:
            line += f"  {nic.counter_rates[name]:10.1f}/s"
        if name in nic.counters_over:
            line += "  " + click.style("! over its limit", fg="yellow", bold=True)
        lines.append(line)
    return "\n".join(lines)


def _json_number(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value  # JSON has no -inf


def nic_json(nic: pb.Nic) -> dict[str, Any]:
    return {
        "name": nic.name, "state": state_name(nic.state), "state_text": nic.state_text,
        "reason": nic.reason, "reason_text": nic.reason_text, "backup": nic.backup or None,
        "backup_set": backup_set(nic),
        "carrier": nic.carrier, "present": nic.present, "operstate": nic.operstate,
        "speed_mbps": nic.speed_mbps if nic.HasField("speed_mbps") else None,
        "epoch": nic.epoch, "seconds_in_state": _json_number(round(nic.seconds_in_state, 3)),
        "since_unix": _json_number(nic.since_unix), "counters": dict(sorted(nic.counters.items())),
        "counter_rates": dict(sorted(nic.counter_rates.items())),
        "counters_over": list(nic.counters_over),
        "dom": {
            "status": nic.dom.status,
            "temperature_celsius": nic.dom.temperature_celsius
            if nic.dom.HasField("temperature_celsius") else None,
            "rx_power_dbm": [_json_number(round(v, 2)) for v in nic.dom.rx_power_dbm],
            "warnings": list(nic.dom.warnings), "alarms": list(nic.dom.alarms),
        },
        "rdma_device": nic.rdma_device or None, "flap_penalty": nic.flap_penalty,
        "drain_reason": nic.drain_reason or None,
        "plugin_verdicts": [plugin_verdict_json(v) for v in nic.plugin_verdicts],
        "traffic": traffic_json(nic.traffic),
    }


def status_json(resp: pb.GetStatusResponse) -> dict[str, Any]:
    d = resp.daemon
    return {
        "daemon": {"version": d.version, "pid": d.pid, "hostname": d.hostname,
                   "start_unix": _json_number(d.start_unix),
                   "heartbeat_age_seconds": _json_number(round(d.heartbeat_age_seconds, 6))},
        "all_up": all(n.state == pb.NIC_STATE_UP for n in resp.nics),
        "nics": [nic_json(n) for n in resp.nics],
    }


# ---- events ----------------------------------------------------------------------------------
def timestamp(unix: float) -> str:
    try:
        when = datetime.datetime.fromtimestamp(unix).astimezone()
    except (ValueError, OverflowError, OSError):  # NaN, inf, or beyond the calendar
        return f"(invalid time {unix!r})"
    return when.isoformat(timespec="milliseconds")


def latency(seconds: float) -> str:
    if seconds <= 0:
        return ""
    if seconds < 1e-3:
        return f"detected in {seconds * 1e6:.0f} µs"
    return f"detected in {seconds * 1e3:.1f} ms" if seconds < 1 else f"detected in {seconds:.2f} s"


def event_line(ev: pb.Event, wide: bool = False) -> str:
    """One event; `wide` adds the NIC's epoch and what the reason means."""
    old, new = state_name(ev.old_state), state_name(ev.new_state)
    parts = [timestamp(ev.time_unix), f"#{ev.seq}", ev.nic,
             f"{old} -> {styled_state(new)}", ev.reason.lower()]
    if ev.detection_seconds > 0:
        parts.append(latency(ev.detection_seconds))
    if ev.detail:
        parts.append(f"({ev.detail})")
    if wide:
        parts += [f"epoch {ev.epoch}", ev.reason_text]
    return "  ".join(p for p in parts if p)


def event_json(ev: pb.Event) -> dict[str, Any]:
    return {"seq": ev.seq, "time_unix": _json_number(ev.time_unix), "nic": ev.nic,
            "old_state": state_name(ev.old_state), "new_state": state_name(ev.new_state),
            "reason": ev.reason, "reason_text": ev.reason_text, "detail": ev.detail,
            "epoch": ev.epoch, "detection_seconds": _json_number(ev.detection_seconds)}


# ---- dom -------------------------------------------------------------------------------------
_MARK = re.compile(r"^(?P<quantity>[a-z_]+?)_(?P<side>high|low)(\[(?P<lane>\d+)\])?$")
_UNITS = {  # quantity -> (label, formatter of a base-unit value)
    "temperature": ("temperature", lambda v: f"{v:.2f} °C"),
    "supply_voltage": ("voltage", lambda v: f"{v:.4f} V"),
    "tx_bias": ("tx bias", lambda v: f"{v * 1000:.3f} mA"),
    "tx_power": ("tx power", mw_dbm),
    "rx_power": ("rx power", mw_dbm),
}


def _marks(names: Sequence[str], kind: str) -> dict[tuple[str, int], str]:
    """"rx_power_low[2]" -> {("rx_power", 2): "low warning"}; lane 0 = module-wide."""
    out = {}
    for name in names:
        m = _MARK.match(name)
        if m:
            out[(m["quantity"], int(m["lane"] or 0))] = f"{m['side']} {kind}"
    return out


def _marked(text: str, mark: str | None) -> str:
    if not mark:
        return text
    return text + " " + click.style(f"! {mark}", fg="red" if "alarm" in mark else "yellow",
                                    bold=True)


def module_text(mod: pb.ModuleDiagnostics) -> str:
    if mod.status != "ok":
        what = "no module" if mod.status == "no_module" else mod.status
        return f"{mod.nic}: {what}" + (f" ({mod.detail})" if mod.detail else "")
    ident = f"{mod.identifier} ({mod.spec})"
    head = [f"{mod.nic}: {ident}, {mod.vendor} {mod.part_number}, serial {mod.serial}"]
    if mod.rx_power_type:
        head.append(f"rx power {mod.rx_power_type}")
    if mod.calibration:
        head.append(f"{mod.calibration} calibration")
    lines = [", ".join(head)]
    marks = {**_marks(mod.warnings, "warning"), **_marks(mod.alarms, "alarm")}
    label = 26
    if mod.HasField("temperature_celsius"):
        lines.append("  " + "Module temperature".ljust(label) + _marked(
            _UNITS["temperature"][1](mod.temperature_celsius), marks.get(("temperature", 0))))
    if mod.HasField("supply_voltage_volts"):
        lines.append("  " + "Module voltage".ljust(label) + _marked(
            _UNITS["supply_voltage"][1](mod.supply_voltage_volts),
            marks.get(("supply_voltage", 0))))
    if mod.lanes:
        lines.append(_lane_table(mod.lanes, marks))
    if mod.thresholds:
        lines.append(_threshold_table(mod.thresholds))
    lines.append("  Flags: " + (", ".join(mod.flags) or "none"))
    lines.append("  Warnings: " + (", ".join(mod.warnings) or "none"))
    lines.append("  Alarms: " + (", ".join(mod.alarms) or "none"))
    return "\n".join(lines)


def _lane_table(lanes: Sequence[pb.Lane], marks: dict[tuple[str, int], str]) -> str:
    fields = (("tx_bias", "tx_bias_amperes", "Tx bias"), ("tx_power", "tx_power_watts",
              "Tx power"), ("rx_power", "rx_power_watts", "Rx power"))
    rows = []
    for lane in lanes:
        row = [str(lane.lane)]
        for quantity, attr, _ in fields:
            row.append(_UNITS[quantity][1](getattr(lane, attr)) if lane.HasField(attr) else "-")
        rows.append(row)
    heads = ["Lane"] + [f[2] for f in fields]
    widths = [max(len(heads[i]), *(len(r[i]) for r in rows)) for i in range(len(heads))]
    out = ["  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
    for lane, row in zip(lanes, rows):
        cells = [row[0].rjust(widths[0])]
        for i, (quantity, _, _) in enumerate(fields, 1):
            mark = marks.get((quantity, lane.lane))
            cells.append(_marked(row[i], mark) if mark else row[i].ljust(widths[i]))
        out.append("  " + "  ".join(cells).rstrip())
    return "\n".join(out)


def _threshold_table(thresholds: Any) -> str:
    heads = ["Thresholds", "low alarm", "low warning", "high warning", "high alarm"]
    rows = []
    for quantity, (label, fmt) in _UNITS.items():
        if quantity not in thresholds:
            continue
        t = thresholds[quantity]
        rows.append([label] + [fmt(getattr(t, lv)) if t.HasField(lv) else "-" for lv in LEVELS])
    widths = [max(len(heads[i]), *(len(r[i]) for r in rows)) for i in range(len(heads))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [heads, *rows])


def module_json(mod: pb.ModuleDiagnostics) -> dict[str, Any]:
    def opt(msg: Any, name: str) -> float | None:
        return getattr(msg, name) if msg.HasField(name) else None

    return {
        "nic": mod.nic, "status": mod.status, "detail": mod.detail or None,
        "identifier": mod.identifier or None, "spec": mod.spec or None,
        "vendor": mod.vendor or None, "part_number": mod.part_number or None,
        "serial": mod.serial or None, "rx_power_type": mod.rx_power_type or None,
        "temperature_celsius": opt(mod, "temperature_celsius"),
        "supply_voltage_volts": opt(mod, "supply_voltage_volts"),
        "lanes": [{"lane": ln.lane, "tx_bias_amperes": opt(ln, "tx_bias_amperes"),
                   "tx_power_watts": opt(ln, "tx_power_watts"),
                   "rx_power_watts": opt(ln, "rx_power_watts")} for ln in mod.lanes],
        "thresholds": {q: {lv: opt(t, lv) for lv in LEVELS}
                       for q, t in sorted(mod.thresholds.items())},
        "flags": list(mod.flags), "warnings": list(mod.warnings), "alarms": list(mod.alarms),
    }
