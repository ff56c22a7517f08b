"""The routed-fabric variant: the switch routes between the rail subnets, so a NIC of one rail
reaches the other rails (NCCL's cross-NIC rings), as on a fabric whose leaves route.

Pure functions of the topology that give the `ip -batch` lines and sysctls (lab.py runs them;
nothing for a rail-only lab):
  switch   br-rail<r> gets the rail's router address; IPv4 forwarding on; br-mgmt stays
           unrouted (the management network is not part of the fabric)
  host     per rail r, a source rule "from <its rail-r address> lookup table 100+r" whose table
           holds rail r's own subnet and every other rail's subnet via rail r's router. A socket
           bound to a rail's address therefore leaves through that rail's NIC, also without
           SO_BINDTODEVICE; the main table is unchanged, so unbound traffic stays on its rail.
"""

from __future__ import annotations

from linkguard_lab.topology import PREFIX_LEN, Topology

SWITCH_SYSCTLS = {"net.ipv4.ip_forward": "1"}
RULE_PRIORITY_BASE = 1000  # before the main table's rule (32766), ip-rule(8)


def sysctls(t: Topology, ns: str) -> dict[str, str]:
    return SWITCH_SYSCTLS if t.routed and ns == t.switch_ns else {}


def switch_lines(t: Topology) -> list[str]:
    return [f"addr add {t.router_address(r)}/{PREFIX_LEN} dev {t.bridge(r)}"
            for r in range(t.rails) if t.routed]


def host_lines(t: Topology, host: str) -> list[str]:
    lines: list[str] = []
    for r in range(t.rails if t.routed else 0):
        own, table, nic = t.address(host, r), t.rail_table(r), t.rail_ifname(r)
        lines += [f"rule add from {own} table {table} priority {RULE_PRIORITY_BASE + r}",
                  f"route add {t.rail_network(r)} dev {nic} src {own} table {table}"]
        lines += [f"route add {t.rail_network(q)} via {t.router_address(r)} dev {nic} src {own} "
                  f"table {table}" for q in range(t.rails) if q != r]
    return lines
