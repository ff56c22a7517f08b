"""Gray faults: links that half-work, made with nftables in the switch's bridge table.

  lossy HOST RAIL PERCENT   frames through that switch port dropped at random (numgen random)
  slow HOST RAIL RATE       each direction of that port policed to RATE (limit rate over)
  stall HOST RAIL PORT      one TCP flow (the host's end uses PORT) dropped, the rest passes
  up --police RATE          every rail port of every host slow to RATE (police() below)

Carrier stays up in all three, so no daemon sees them: only the traffic does. Each port has one
chain per kind, created empty at `up` and jumped to for frames entering or leaving the port;
a fault fills its chain, its undo (unlossy, unslow, unstall) flushes it, so faults of different
kinds stack and each undo touches only its own. The rules carry counters: `nft list table bridge
linkguard_lab` in the switch shows what each fault dropped.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from linkguard_lab import netns
from linkguard_lab.errors import LabError
from linkguard_lab.faults import bridge_hooks
from linkguard_lab.topology import Rail, Topology

KINDS = ("lossy", "slow", "stall")
TABLE = "linkguard_lab"  # faults.NFT_TABLE: the gray chains live in the blackhole's table
RANDOM_SCALE = 10_000  # numgen modulus: loss in steps of 0.01 %
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)(b|bit)?(?:/s)?\s*$", re.IGNORECASE)


def chain(kind: str, port: str) -> str:
    return f"{kind}_{port.replace('-', '_')}"


def gray_ruleset(topo: Topology) -> str:
    """nft commands, after the table exists, that add every rail port's empty chains and the
    jumps to them."""
    lines = []
    for host in topo.host_names:
        for rail in range(topo.rails):
            port = topo.port(host, rail)
            for kind in KINDS:
                c = chain(kind, port)
                lines.append(f"add chain bridge {TABLE} {c}")
                lines += [f'add rule bridge {TABLE} {hook} {way} "{port}" jump {c}'
                          for hook in bridge_hooks(topo) for way in ("iifname", "oifname")]
    return "\n".join(lines) + "\n"


def parse_rate(text: str) -> int:
    """Bytes per second from '100MB' (10^6), '100MiB' (2^20), '800mbit', '1500000'."""
    m = _RATE.match(str(text))
    if not m:
        raise LabError(f"bad rate {text!r}: e.g. 100MB, 100MiB, 800mbit or a byte count (per s)")
    value, prefix, binary, unit = float(m[1]), m[2].lower(), m[3], (m[4] or "b").lower()
    scale = (1024 if binary else 1000) ** " kmg".index(prefix or " ")
    rate = value * scale / (8 if unit == "bit" else 1)
    if not 1000 <= rate <= 100e9:
        raise LabError(f"bad rate {text!r}: must be 1 kB/s .. 100 GB/s")
    return int(rate)


def parse_percent(text: str | float) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value <= 100:
        raise LabError(f"bad loss {text!r}: a percentage above 0, at most 100")
    return value


def parse_tcp_port(text: str | int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if not 1 <= value <= 65535 or str(text).strip() != str(value):
        raise LabError(f"bad TCP port {text!r}: 1..65535")
    return value


def _slow_rules(port: str, rate: str) -> list[str]:
    bps = parse_rate(rate)
    burst = max(bps // 20, 65536)  # 1/20 s of the rate, at least a 64 KiB segment's worth
    return [f'{way} "{port}" limit rate over {bps} bytes/second burst {burst} bytes counter drop '
            f'comment "slow {rate} ({way})"' for way in ("iifname", "oifname")]


class GrayMixin:
    """Gray-fault methods of Lab; needs self.topo and self.blackhole_rules (the table)."""

    topo: Topology
    blackhole_rules: bool

    def _gray(self, kind: str, host: str, rail: Rail, rules: list[str]) -> int:
        if not self.blackhole_rules:
            raise LabError(f"lab {self.topo.prefix!r} was built without its nftables table "
                           "(blackhole_rules=False)")
        c = chain(kind, self.topo.port(host, rail))
        commands = [f"flush chain bridge {TABLE} {c}"]
        commands += [f"add rule bridge {TABLE} {c} {r}" for r in rules]
        t_ns = time.monotonic_ns()
        netns.nft(self.topo.switch_ns, "\n".join(commands) + "\n")
        return t_ns

    def lossy(self, host: str, rail: Rail, percent: str | float) -> int:
        """Drop `percent` % of the frames through HOST's RAIL, at random, both directions."""
        threshold = round(parse_percent(percent) * RANDOM_SCALE / 100)
        rule = (f'numgen random mod {RANDOM_SCALE} < {threshold} counter drop comment '
                f'"lossy {percent}%"')
        return self._gray("lossy", host, rail, [rule])

    def unlossy(self, host: str, rail: Rail) -> int:
        return self._gray("lossy", host, rail, [])

    def slow(self, host: str, rail: Rail, rate: str) -> int:
        """Police each direction of HOST's RAIL to `rate` (a burst of 1/20 s passes at once)."""
        return self._gray("slow", host, rail, _slow_rules(self.topo.port(host, rail), rate))

    def police(self, rate: str) -> int:
        """`slow` on every rail port of every host, in one nft transaction: each NIC then
        carries at most `rate` each way, so the rails' capacity, not the CPU, is what the
        connections share (bench-spread, issue 28). Undo per port with unslow."""
        if not self.blackhole_rules:
            raise LabError(f"lab {self.topo.prefix!r} was built without its nftables table "
                           "(blackhole_rules=False)")
        commands = []
        for host in self.topo.host_names:
            for rail in range(self.topo.rails):
                port = self.topo.port(host, rail)
                c = chain("slow", port)
                commands.append(f"flush chain bridge {TABLE} {c}")
                commands += [f"add rule bridge {TABLE} {c} {r}" for r in _slow_rules(port, rate)]
        t_ns = time.monotonic_ns()
        netns.nft(self.topo.switch_ns, "\n".join(commands) + "\n")
        return t_ns

    def unslow(self, host: str, rail: Rail) -> int:
        return self._gray("slow", host, rail, [])

    def stall(self, host: str, rail: Rail, tcp_port: str | int) -> int:
        """Drop every segment of the TCP flows using `tcp_port` on HOST's RAIL, both ways."""
        p = parse_tcp_port(tcp_port)
        return self._gray("stall", host, rail, [
            f'tcp sport {p} counter drop comment "stall {p}"',
            f'tcp dport {p} counter drop comment "stall {p}"'])

    def unstall(self, host: str, rail: Rail) -> int:
        return self._gray("stall", host, rail, [])

    def gray_faults(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """(host, rail) -> the gray faults on its port: kind, and the packets each dropped."""
        if not self.blackhole_rules:
            return {}
        out = netns.run(netns.exec_argv(self.topo.switch_ns,
                                        ["nft", "-j", "list", "table", "bridge", TABLE])).stdout
        by_chain: dict[str, list[dict[str, Any]]] = {}
        for item in json.loads(out).get("nftables", []):
            rule = item.get("rule")
            if not rule:
                continue
            dropped = sum(e["counter"]["packets"] for e in rule.get("expr", []) if "counter" in e)
            by_chain.setdefault(rule["chain"], []).append(
                {"comment": rule.get("comment", ""), "dropped": dropped})
        faults: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for host in self.topo.host_names:
            for rail in range(self.topo.rails):
                port = self.topo.port(host, rail)
                for kind in KINDS:
                    rules = by_chain.get(chain(kind, port), [])
                    if rules:
                        faults.setdefault((host, rail), []).append(
                            {"kind": kind, "rules": rules,
                             "dropped": sum(r["dropped"] for r in rules)})
        return faults
