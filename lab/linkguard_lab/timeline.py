"""Reading what the demo and the failover benchmarks see, and putting it on one time axis.

Every source stamps CLOCK_MONOTONIC, one clock for the whole machine (network namespaces do not
have their own), so the stamps compare directly:

- the lab's faults return time.monotonic_ns() taken just before the netlink request;
- linkguardd's shared-memory events carry `fact_ns` (the monitor saw the fact) and `time_ns`
  (the policy decided), read with plugin/build/lg_shm_dump (the plugin's own C reader);
- the plugin's log lines through lg_nccl_driver --timestamps carry `t=SECONDS.NANOS`;
- the driver's progress lines carry `t=SECONDS`, and its JSON report the completion gaps in ns.

The plugin's failover and reintegration lines are free text written by the plugin (INFO, NET):
they are recognised by words, not by an exact format, and shown as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# [plugin INFO src/proto/conn.c:184 t=5012.123456789] NET/linkguard: send conn 0123..: ...
_PLUGIN_LINE = re.compile(
    r"^\[plugin (?P<level>INFO|WARN) (?P<where>[^\]\s]+?)(?: t=(?P<sec>\d+)\.(?P<frac>\d{1,9}))?\]"
    r" (?:NET/linkguard: )?(?P<msg>.*)$")
_PROGRESS_LINE = re.compile(r"^lg_nccl_driver: (?P<what>progress|stopping|end) (?P<kv>.*)$")
_KV = re.compile(r"(\w+)=(\S+)")
_CONN = re.compile(r"\b(?P<kind>send|recv) conn (?P<id>[0-9a-f]{6,16})\b")

# Words of a switch onto the standby path, and of the switch back (case-insensitive).
_FAILOVER = re.compile(
    r"fail(?:ed|ing)?[ -]?over|switch(?:ed|ing)? (?:\w+ )?(?:to|onto) (?:the )?(?:standby|backup)"
    r"|mov(?:ed|ing) (?:\w+ )?(?:to|onto) (?:the )?(?:standby|backup)|now on (?:the )?backup"
    r"|(?:to|onto) (?:the )?(?:standby|backup) path", re.IGNORECASE)
_REINTEGRATE = re.compile(
    r"reintegrat|switch(?:ed|ing)? back|back (?:on|to|onto) (?:the )?primary"
    r"|return(?:ed|ing)? (?:\w+ )?to (?:the )?primary|(?:to|onto) (?:the )?primary path"
    r"|primary (?:path )?restored", re.IGNORECASE)
# A move to a rebuilt path in the same slot (neither a failover nor a return).
_SAME_SLOT = re.compile(r"^\w+ conn [0-9a-f]+: switched: ")
_DURATION = re.compile(
    r"(?:took|in|after|within|duration[=:]?|switch(?:over)?[=:]?)\s*(?P<v>\d+(?:\.\d+)?)\s*"
    r"(?P<u>ns|us|µs|ms|s)\b", re.IGNORECASE)
_ANY_MS = re.compile(r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>us|µs|ms)\b")
_REASON = re.compile(r"path on NIC \S+ \((?P<s>.*?)\)(?:;| at epoch)|at epoch \d+ \((?P<a>[^()]*)\)"
                     r"|reason[=:]?\s*\"?(?P<r>[^\",;)]+)|\((?P<p>[^()]*)\)", re.IGNORECASE)
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass
class PluginLine:
    """One plugin log line: kind is 'failover' (primary -> standby), 'reintegration' (back),
    'switch' (onto a rebuilt path in the same slot), 'warn' or 'info'."""

    kind: str
    level: str
    t_ns: int | None  # the driver's stamp (--timestamps); None without it
    msg: str
    conn: str | None = None  # "send 0123abcd..." when the line names a connection
    took_ms: float | None = None
    reason: str | None = None
    role: str | None = None  # filled by the caller: which process printed it
    read_ns: int | None = None  # when the harness read it (a fallback time)

    @property
    def when_ns(self) -> int | None:
        return self.t_ns if self.t_ns is not None else self.read_ns


def parse_plugin_line(text: str) -> PluginLine | None:
    """A plugin log line as lg_nccl_driver prints it, or None for anything else."""
    m = _PLUGIN_LINE.match(text.strip())
    if not m:
        return None
    t_ns = None
    if m.group("sec") is not None:
        t_ns = int(m.group("sec")) * 1_000_000_000 + int(m.group("frac").ljust(9, "0"))
    msg = m.group("msg")
    if _SAME_SLOT.search(msg):
        kind = "switch"
    elif _REINTEGRATE.search(msg):
        kind = "reintegration"
    elif _FAILOVER.search(msg):
        kind = "failover"
    else:
        kind = "warn" if m.group("level") == "WARN" else "info"
    line = PluginLine(kind, m.group("level"), t_ns, msg)
    if c := _CONN.search(msg):
        line.conn = f"{c.group('kind')} {c.group('id')}"
    d = _DURATION.search(msg) or (_ANY_MS.search(msg) if kind != "info" else None)
    if d:
        line.took_ms = float(d.group("v")) * _UNIT_MS[d.group("u")]
    if kind in ("failover", "reintegration") and (r := _REASON.search(msg)):
        line.reason = (r.group("s") or r.group("a") or r.group("r") or r.group("p")
                       or "").strip() or None
    return line


def parse_progress(text: str) -> dict[str, Any] | None:
    """A driver progress line (--progress-ms) as numbers: t (s), completions, received_bytes..."""
    m = _PROGRESS_LINE.match(text.strip())
    if not m:
        return None
    out: dict[str, Any] = {"what": m.group("what")}
    for k, v in _KV.findall(m.group("kv")):
        try:
            out[k] = float(v) if "." in v else int(v)
        except ValueError:
            out[k] = v
    return out


# --- shared-memory events ---------------------------------------------------------------------

@dataclass
class ShmEvent:
    host: str
    seq: int
    nic: str
    old: str
    new: str
    reason: str
    time_ns: int
    fact_ns: int

    @classmethod
    def from_json(cls, host: str, e: dict[str, Any]) -> ShmEvent:
        return cls(host, int(e["seq"]), str(e["name"]), str(e["old_state"]),
                   str(e["new_state"]), str(e["reason"]), int(e["time_ns"]),
                   int(e["fact_ns"]))


def first_event(events: Iterable[ShmEvent], *, nic: str, new: str | Sequence[str],
                after_ns: int = 0, host: str | None = None) -> ShmEvent | None:
    states = (new,) if isinstance(new, str) else tuple(new)
    for e in sorted(events, key=lambda e: e.time_ns):
        if e.nic == nic and e.new in states and e.time_ns >= after_ns and host in (None, e.host):
            return e
    return None


# --- gaps in a driver report ------------------------------------------------------------------

@dataclass
class Gap:
    role: str  # "server" / "client": whose report
    comm: int
    conn: int
    dir: int  # 0: client -> server, 1: back
    send: bool
    start_ns: int
    end_ns: int
    open: bool = False

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def report_gaps(role: str, report: dict[str, Any]) -> list[Gap]:
    """Every listed gap of a stream report (each at least its list_min_ms long): from its
    --gap-file when it wrote one (uncapped), else from the report's own (capped) list."""
    comms = {c["comm"]: c for c in report.get("comms", [])}
    out = []
    entries: list[list[int]] = report.get("gaps", {}).get("list", [])
    path = report.get("gaps", {}).get("file")
    if path:
        with open(path) as f:
            entries = [[int(x) for x in line.split()] for line in f if line.strip()]
    for entry in entries:
        c = comms.get(entry[0], {})
        out.append(Gap(role, entry[0], int(c.get("conn", 0)), int(c.get("dir", 0)),
                       bool(c.get("send", False)), int(entry[1]), int(entry[2]),
                       len(entry) > 3 and bool(entry[3])))
    return out


def largest_gap(gaps: Iterable[Gap], start_ns: int, end_ns: int) -> Gap | None:
    """The longest gap that overlaps [start_ns, end_ns] (a gap caused by a fault at T starts
    at the last completion before T and ends at the first one after the switch)."""
    best = None
    for g in gaps:
        if g.start_ns <= end_ns and g.end_ns >= start_ns and (best is None or g.ms > best.ms):
            best = g
    return best


def largest_stall(gaps: Iterable[Gap], start_ns: int, end_ns: int) -> float | None:
    """The longest wait for a completion counted from `start_ns` (the fault): for each gap
    overlapping [start_ns, end_ns], end - max(start, start_ns), in ms. Unlike the gap itself it
    leaves out the part of a gap that was already under way when the fault came."""
    best = None
    for g in gaps:
        if g.start_ns <= end_ns and g.end_ns >= start_ns:
            ms = (g.end_ns - max(g.start_ns, start_ns)) / 1e6
            best = ms if best is None else max(best, ms)
    return best


def switch_window(lines: Iterable[PluginLine], kind: str, start_ns: int, end_ns: int,
                  margin_ns: int = 50_000_000) -> tuple[int, int]:
    """[start, last `kind` line in [start, end) + margin]: the stretch in which the gap of a
    switch lies (it ends with the first completion after the last connection switched); the
    whole [start, end) when no such line was logged (a stall, or a connection that died)."""
    times = [p.when_ns for p in lines
             if p.kind == kind and p.when_ns is not None and start_ns <= p.when_ns < end_ns]
    return (start_ns, min(end_ns, max(times) + margin_ns)) if times else (start_ns, end_ns)


# --- the timeline -----------------------------------------------------------------------------

@dataclass(order=True)
class Row:
    t_ns: int
    text: str = field(compare=False)
    tag: str = field(default="", compare=False)


class Timeline:
    """Rows on one clock, printed relative to a zero (the fault)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, t_ns: int | None, tag: str, text: str) -> None:
        if t_ns is not None:
            self.rows.append(Row(int(t_ns), text, tag))

    def render(self, zero_ns: int) -> list[str]:
        lines = []
        for row in sorted(self.rows):
            dt = (row.t_ns - zero_ns) / 1e6
            lines.append(f"  {fmt_ms(dt):>12}  {row.tag:<13} {row.text}")
        return lines


def fmt_ms(ms: float) -> str:
    """+0.412 ms, +12.3 ms, +2.104 s"""
    sign = "+" if ms >= 0 else "-"
    a = abs(ms)
    if a >= 1000:
        return f"{sign}{a / 1000:.3f} s"
    if a >= 10:
        return f"{sign}{a:.1f} ms"
    return f"{sign}{a:.3f} ms"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
