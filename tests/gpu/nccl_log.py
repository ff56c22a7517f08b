"""NCCL's debug log (NCCL_DEBUG=INFO, NCCL_DEBUG_FILE) and linkguard's lines inside it.

Line shapes, as NCCL prints them (a "[date time] " stamp in front on the levels that
NCCL_DEBUG_TIMESTAMP_LEVELS names, WARN by default):
  host:pid:tid [cudaDev] NCCL INFO <message>
  host:pid:tid [cudaDev] file.cc:line NCCL WARN <message>
Messages read here:
  NET/Plugin: Loaded net plugin <name> (v<N>)          the plugin library NCCL loaded
  Using network <name>                                  the net a communicator uses
  Channel 00/0 : 0[0] -> 1[0] [send] via NET/<name>/<dev>[/GDRDMA][/Shared]
                                                        the net and device of each connection
  NET/linkguard: <text>                                 the plugin's own lines (plugin/src/runtime/log.c)
The plugin's switch lines (plugin/src/proto/failover.c, switch_word() and slot_name()):
  send conn <nonce>: failover: primary path on NIC rail0 -> backup path on NIC rail1 (...)
  recv conn <nonce>: reintegrated: backup path on NIC rail1 -> primary path on NIC rail0 at ...
Each line keeps its position (byte offset in the file, or any ordered stamp) so a caller can
tell which lines came after a mark such as the moment of a cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_LINE = re.compile(
    r"^(?:\[[^\]]*\] )?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<where>\S+:\d+) )?NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
_LOADED = re.compile(r"^NET/Plugin: Loaded net plugin (?P<name>.+?) \(v(?P<version>\d+)\)$")
_USING = re.compile(r"^Using network (?P<name>.+)$")
_CHANNEL = re.compile(
    r"^Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[[0-9a-fA-Fx]+\] -> "
    r"(?P<dst>\d+)\[[0-9a-fA-Fx]+\] \[(?P<dir>send|receive)\] via "
    r"NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\(\d+\))?(?P<flags>(?:/\w+)*)$")
PLUGIN_TAG = "NET/linkguard: "
_SWITCH = re.compile(
    r"^(?P<side>send|recv) conn (?P<conn>[0-9a-f]+): (?P<kind>failover|reintegrated|switched): "
    r"(?P<from_slot>primary|backup) path on NIC (?P<from_nic>\S+) -> "
    r"(?P<to_slot>primary|backup) path on NIC (?P<to_nic>\S+?)[ ;]")
_NO_DAEMON = re.compile(r"^linkguard: no daemon \((?P<why>[^)]*)\)")
_PLUGIN_DEV = re.compile(r"^dev (?P<dev>\d+): (?P<nic>\S+) ")  # plugin/src/abi/core.c log_devices()


@dataclass(frozen=True)
class NcclLine:
    pos: int  # byte offset of the line in its file (or the caller's ordered stamp)
    host: str
    pid: int
    dev: int
    level: str
    msg: str


@dataclass(frozen=True)
class Switch:
    """One switch of a connection between its primary and backup path, as the plugin logs it."""

    pos: int
    side: str  # send / recv
    conn: str
    kind: str  # failover (primary -> backup), reintegrated (back), switched (same slot)
    from_slot: str
    from_nic: str
    to_slot: str
    to_nic: str


def parse_line(text: str, pos: int = 0) -> NcclLine | None:
    m = _LINE.match(text.rstrip("\n"))
    if not m:
        return None
    return NcclLine(pos, m["host"], int(m["pid"]), int(m["dev"]), m["level"], m["msg"])


def read_log(path: Path) -> list[NcclLine]:
    """Every NCCL line of a NCCL_DEBUG_FILE, each with its byte offset (missing file: none)."""
    if not path.exists():
        return []
    out, pos = [], 0
    with path.open("rb") as f:
        for raw in f:
            line = parse_line(raw.decode(errors="replace"), pos)
            if line is not None:
                out.append(line)
            pos += len(raw)
    return out


def parse_switch(text: str, pos: int = 0) -> Switch | None:
    """A plugin switch line (its text after "NET/linkguard: "), or None for anything else."""
    m = _SWITCH.match(text)
    if not m:
        return None
    return Switch(pos, m["side"], m["conn"], m["kind"], m["from_slot"], m["from_nic"],
                  m["to_slot"], m["to_nic"])


def plugin_text(line: NcclLine) -> str | None:
    return line.msg[len(PLUGIN_TAG):] if line.msg.startswith(PLUGIN_TAG) else None


def summarize(lines: Iterable[NcclLine]) -> dict[str, Any]:
    """What one process's log says about the net: plugin loaded, network used, the devices
    NCCL connected through, the plugin's device lines, switches, 'no daemon' and WARN lines."""
    out: dict[str, Any] = {"plugins_loaded": [], "networks": [], "channels": [],
                           "devices": [], "plugin_devices": [], "switches": [],
                           "no_daemon": [], "warnings": []}
    devices: set[str] = set()
    for line in lines:
        if line.level == "WARN":
            out["warnings"].append(line.msg)
        if m := _LOADED.match(line.msg):
            out["plugins_loaded"].append({"name": m["name"], "version": int(m["version"])})
        elif m := _USING.match(line.msg):
            if m["name"] not in out["networks"]:
                out["networks"].append(m["name"])
        elif m := _CHANNEL.match(line.msg):
            out["channels"].append({"channel": int(m["channel"]), "src": int(m["src"]),
                                    "dst": int(m["dst"]), "dir": m["dir"], "net": m["net"],
                                    "dev": int(m["dev"]), "flags": m["flags"]})
            devices.add(f"NET/{m['net']}/{m['dev']}")
        elif (text := plugin_text(line)) is not None:
            if sw := parse_switch(text, line.pos):
                out["switches"].append(asdict(sw))
            elif nd := _NO_DAEMON.match(text):
                out["no_daemon"].append(nd["why"])
            elif text.startswith("dev "):
                out["plugin_devices"].append(text)
    out["devices"] = sorted(devices)
    return out


def count_switches(switches: Iterable[dict[str, Any]], kind: str, after: int | None = None,
                   before: int | None = None) -> int:
    """Switch lines of `kind` with after <= pos < before (either bound optional)."""
    return sum(1 for s in switches if s["kind"] == kind
               and (after is None or s["pos"] >= after) and (before is None or s["pos"] < before))


def cut_rail(log: dict[str, Any], net: str = "linkguard") -> int | None:
    """The rail to cut so that NCCL's traffic must fail over: the primary NIC (railN) of the
    lowest linkguard device NCCL connected through; None when the log names none."""
    primaries = {int(m["dev"]): m["nic"] for text in log["plugin_devices"]
                 if (m := _PLUGIN_DEV.match(text))}
    used = sorted(int(d.rsplit("/", 1)[1]) for d in log["devices"] if d.startswith(f"NET/{net}/"))
    for dev in used:
        if m := re.fullmatch(r"rail(\d+)", primaries.get(dev, "")):
            return int(m[1])
    return None
