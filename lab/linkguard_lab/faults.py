"""Faults: each one is a real kernel event, injected with one netlink request.

Every fault returns time.monotonic_ns() (CLOCK_MONOTONIC) taken just before the request, so
benchmarks can measure detection latency from the moment the fault happened.

  cut / restore        switch-side port down/up: only that host's NIC loses carrier,
                       like a pulled cable or a dead optic
  nicdown / nicup      host-side NIC administratively down/up
  blackhole            frames through that switch port are silently dropped; carrier stays up
  flap                 a bounded burst of cut/restore
  lossy / slow / stall gray faults, carrier up (gray.py)

Blackhole works with an nftables bridge-family table in the switch namespace, installed once
at `up`: two rules drop every frame whose ingress or egress switch port is in the blackhole
device group (in each bridge hook a rail's frames pass: bridge_hooks()). A blackhole is then a single netlink request that moves the port into that group
(`ip link set a-r0 group 27751`): no `nft` process to spawn at fault time, so the timestamp
is as close to the event as for cut, and `nft list ruleset` in the switch shows the rules.
"""

from __future__ import annotations

import time

from linkguard_lab.errors import LabError
from linkguard_lab.netlink import Netlink
from linkguard_lab.topology import Rail, Topology

BLACKHOLE_GROUP = 0x6C67  # "lg"; any group number unused elsewhere in the switch namespace
NFT_TABLE = "linkguard_lab"


def bridge_hooks(topo: Topology) -> tuple[str, ...]:
    """The bridge hooks a rail's frames pass: forward between two ports; in a routed lab also
    input (a port to the router) and output (the router to a port)."""
    return ("forward", "input", "output") if topo.routed else ("forward",)


def nft_ruleset(topo: Topology) -> str:
    chains = "".join(f"""\
    chain {hook} {{
        type filter hook {hook} priority 0; policy accept;
        meta iifgroup {BLACKHOLE_GROUP} counter drop comment "blackholed switch port (ingress)"
        meta oifgroup {BLACKHOLE_GROUP} counter drop comment "blackholed switch port (egress)"
    }}
""" for hook in bridge_hooks(topo))
    return f"table bridge {NFT_TABLE} {{\n{chains}}}\n"


MAX_FLAP_COUNT = 10_000


class FaultsMixin:
    """Fault methods of Lab; needs self.topo and self.nl."""

    topo: Topology
    nl: Netlink
    blackhole_rules: bool

    def cut(self, host: str, rail: Rail) -> int:
        return self.nl.set_link(self.topo.switch_ns, self.topo.port(host, rail), state="down")

    def restore(self, host: str, rail: Rail) -> int:
        return self.nl.set_link(self.topo.switch_ns, self.topo.port(host, rail), state="up")

    def nicdown(self, host: str, rail: Rail) -> int:
        ifname = self.topo.rail_ifname(self.topo.check_rail(rail))
        return self.nl.set_link(self.topo.host_ns(host), ifname, state="down")

    def nicup(self, host: str, rail: Rail) -> int:
        ifname = self.topo.rail_ifname(self.topo.check_rail(rail))
        return self.nl.set_link(self.topo.host_ns(host), ifname, state="up")

    def blackhole(self, host: str, rail: Rail) -> int:
        if not self.blackhole_rules:
            raise LabError(f"lab {self.topo.prefix!r} was built without the blackhole rules "
                           "(blackhole_rules=False)")
        return self.nl.set_link(self.topo.switch_ns, self.topo.port(host, rail),
                                group=BLACKHOLE_GROUP)

    def unblackhole(self, host: str, rail: Rail) -> int:
        return self.nl.set_link(self.topo.switch_ns, self.topo.port(host, rail), group=0)

    def flap(self, host: str, rail: Rail, count: int = 3, period_ms: float = 200) -> list[int]:
        """`count` cycles of cut, period/2, restore, period/2 (no wait after the last restore).

        Returns the monotonic_ns of every transition: [cut0, restore0, cut1, restore1, ...].
        The link always ends restored, also when interrupted.
        """
        if not 1 <= count <= MAX_FLAP_COUNT:
            raise LabError(f"bad flap count {count}: must be 1..{MAX_FLAP_COUNT}")
        if not 1 <= period_ms <= 60_000:
            raise LabError(f"bad flap period {period_ms} ms: must be 1..60000")
        self.topo.port(host, rail)  # validate before the first transition
        half_ns = int(period_ms * 1e6 / 2)
        stamps: list[int] = []
        try:
            for i in range(count):
                stamps.append(self.cut(host, rail))
                _sleep_until(stamps[0] + (2 * i + 1) * half_ns)
                stamps.append(self.restore(host, rail))
                if i + 1 < count:
                    _sleep_until(stamps[0] + (2 * i + 2) * half_ns)
        finally:
            if len(stamps) % 2:
                self.restore(host, rail)
        return stamps


def _sleep_until(deadline_ns: int) -> None:
    # Deadlines from the first stamp, so the period does not drift with netlink latency.
    delay = (deadline_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)
