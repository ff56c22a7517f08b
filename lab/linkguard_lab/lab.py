"""Lab: build and tear down a namespace cluster, run commands in it, read link state.

The kernel is the only state: a lab is the set of namespaces named after its prefix, and
attach() rebuilds the shape (hosts, rails) from them, so no state file can go stale.
`up` on a prefix that already exists is an error (LabError), never a silent reuse.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
from typing import Any, Self

from linkguard_lab import netns, routing
from linkguard_lab.errors import LabError
from linkguard_lab.faults import BLACKHOLE_GROUP, FaultsMixin, nft_ruleset
from linkguard_lab.gray import GrayMixin, gray_ruleset
from linkguard_lab.netlink import LinkInfo, Netlink
from linkguard_lab.topology import DEFAULT_PREFIX, MGMT_IFNAME, PREFIX_LEN, Rail, Topology

# No IPv6 in the lab: no router solicitations, DAD or MLD chatter on the rails. ARP as on a
# multi-rail GPU host: a NIC answers only for its own address and speaks only from it
# (arp_ignore=1, arp_announce=2, ip-sysctl.rst), so a rail's traffic never slips onto
# another rail's wire through Linux's weak-host ARP.
_SYSCTLS = {
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
}
SWITCH = "sw"  # run()/popen() accept it as a host name to run inside the switch


def unique_prefix(stem: str = "lg") -> str:
    """A prefix no lab uses yet, for throw-away labs (tests, benchmarks, the demo)."""
    taken = netns.list_netns()
    while True:
        prefix = f"{stem}{secrets.token_hex(2)}"
        probe = Topology(prefix, 1, 1)
        if not any(probe.owns_ns(name) for name in taken):
            return prefix


class Lab(FaultsMixin, GrayMixin):
    def __init__(self, prefix: str = DEFAULT_PREFIX, hosts: int = 2, rails: int = 2, *,
                 routed: bool = False, blackhole_rules: bool = True) -> None:
        """routed=True: the switch routes between the rails (routing.py); by default each
        rail is its own network, as on a rail-only fabric.
        blackhole_rules=False builds no nftables table (no `nft`, no nf_tables in the
        kernel needed, e.g. on the GPU machine); blackhole() then refuses."""
        self.topo = Topology(prefix, hosts, rails, routed)
        self.blackhole_rules = blackhole_rules
        self.nl = Netlink()
        self._children: list[subprocess.Popen] = []

    # --- lifecycle ---------------------------------------------------------------------
    @classmethod
    def attach(cls, prefix: str = DEFAULT_PREFIX) -> Lab:
        """The running lab with this prefix, its shape read from the kernel."""
        probe = Topology(prefix, 1, 1)
        names = [n for n in netns.list_netns() if probe.owns_ns(n)]
        hosts = sorted(n.rsplit("-", 1)[1] for n in names if n != probe.switch_ns)
        if probe.switch_ns not in names or not hosts:
            raise LabError(f"no lab with prefix {prefix!r} (start one: linkguard-lab up "
                           f"--prefix {prefix})")
        rails = [int(m.group(1)) for name in netns.link_names(f"{prefix}-{hosts[0]}")
                 if (m := re.fullmatch(r"rail(\d+)", name))]
        # A routed lab's switch has the routers' addresses on its rail bridges.
        routed = bool(netns.ipv4_addresses(probe.switch_ns, probe.bridge(0)))
        lab = cls(prefix, len(hosts), max(rails, default=0) + 1, routed=routed)
        if hosts != lab.hosts:
            raise LabError(f"lab {prefix!r} is damaged (hosts {', '.join(hosts)}); "
                           f"run: linkguard-lab down --prefix {prefix}")
        return lab

    def existing_namespaces(self) -> list[str]:
        return [n for n in netns.list_netns() if self.topo.owns_ns(n)]

    def up(self) -> Lab:
        """Build the lab; on any failure (or Ctrl-C) remove whatever this call made (and only
        that: a lab of the same prefix racing us keeps its namespaces), then re-raise."""
        existing = self.existing_namespaces()
        if existing:
            raise LabError(f"lab {self.prefix!r} already exists ({', '.join(existing)}); "
                           f"run: linkguard-lab down --prefix {self.prefix}")
        created: list[str] = []
        try:
            self._build(created)
        except BaseException:
            self.nl.close()
            for ns in reversed(created):
                with contextlib.suppress(LabError):  # keep the original error
                    netns.del_netns(ns)
            raise
        return self

    def _build(self, created: list[str]) -> None:
        t = self.topo
        for ns in t.namespaces:
            netns.add_netns(ns)
            created.append(ns)
            netns.sysctl(ns, _SYSCTLS | routing.sysctls(t, ns))
        # STP off and forward_delay 0: a restored port forwards at once, like a real switch
        # port with portfast.
        bridge_opts = "type bridge forward_delay 0 stp_state 0 mcast_snooping 0"
        lines = ["link set lo up"]
        for rail in [*range(t.rails), None]:
            lines += [f"link add {t.bridge(rail)} {bridge_opts}", f"link set {t.bridge(rail)} up"]
        for host in t.host_names:
            peers = [(t.port(host, r), t.rail_ifname(r), t.bridge(r)) for r in range(t.rails)]
            peers.append((t.mgmt_port(host), MGMT_IFNAME, t.bridge(None)))
            for port, nic, bridge in peers:
                # Created inside the switch ns, the host end moved straight into its host ns.
                lines += [f"link add {port} type veth peer name {nic} netns {t.host_ns(host)}",
                          f"link set {port} master {bridge} up"]
        netns.ip_batch(t.switch_ns, lines + routing.switch_lines(t))
        for host in t.host_names:
            lines = ["link set lo up"]
            nics = [(t.rail_ifname(r), t.address(host, r)) for r in range(t.rails)]
            nics.append((MGMT_IFNAME, t.mgmt_address(host)))
            for nic, addr in nics:
                lines += [f"addr add {addr}/{PREFIX_LEN} dev {nic}", f"link set {nic} up"]
            netns.ip_batch(t.host_ns(host), lines + routing.host_lines(t, host))
        if self.blackhole_rules:
            netns.nft(t.switch_ns, nft_ruleset(t) + gray_ruleset(t))

    def down(self) -> None:
        """Remove every namespace of this prefix (and what runs in it). Idempotent."""
        for child in self._children:
            if child.poll() is None:
                child.kill()
            child.wait()
        self._children.clear()
        self.nl.close()
        errors = []
        for ns in self.existing_namespaces():
            try:
                netns.del_netns(ns)
            except LabError as exc:
                errors.append(str(exc))
        if errors:
            raise LabError("; ".join(errors))

    def close(self) -> None:
        """Release netlink sockets; the lab keeps running (the CLI attaches, acts, closes)."""
        self.nl.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # --- shape -------------------------------------------------------------------------
    @property
    def prefix(self) -> str:
        return self.topo.prefix

    @property
    def hosts(self) -> list[str]:
        return self.topo.host_names

    @property
    def rails(self) -> list[int]:
        return list(range(self.topo.rails))

    @property
    def routed(self) -> bool:
        return self.topo.routed

    def ns(self, host: str) -> str:
        return self.topo.switch_ns if host == SWITCH else self.topo.host_ns(host)

    def address(self, host: str, rail: Rail) -> str:
        return self.topo.address(host, rail)

    def mgmt_address(self, host: str) -> str:
        return self.topo.mgmt_address(host)

    # --- commands in a host ------------------------------------------------------------
    def argv(self, host: str, argv: list[str]) -> list[str]:
        """argv that runs a command inside a host (or 'sw') namespace."""
        return netns.exec_argv(self.ns(host), list(argv))

    def run(self, host: str, argv: list[str], *, check: bool = False,
            timeout: float | None = 60, **kwargs: Any) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(host, argv), check=check, timeout=timeout, **kwargs)

    exec = run

    def popen(self, host: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        """Start a command in a host; down() kills it if it is still running."""
        proc = subprocess.Popen(self.argv(host, argv), **kwargs)
        self._children.append(proc)
        return proc

    def ping(self, src: str, dst: str, rail: Rail, timeout_s: int = 1,
             from_rail: Rail | None = None) -> bool:
        """True as soon as one ICMP echo from src to dst's `rail` address is answered; a probe
        goes out every 0.2 s until timeout_s (so a fresh ARP resolution does not fail it).
        `from_rail`: sent from src's NIC and address on that rail, as the plugin's sockets are
        bound (across rails: a routed lab only)."""
        source = [] if from_rail is None else [
            "-I", self.topo.rail_ifname(self.topo.check_rail(from_rail)),
            "-I", self.address(src, from_rail)]
        argv = ["ping", "-n", "-q", "-c", "1", "-i", "0.2", "-W", "1", "-w", str(int(timeout_s)),
                *source, self.address(dst, rail)]
        return self.run(src, argv, timeout=timeout_s + 5).returncode == 0

    def sysfs(self, host: str, ifname: str, attr: str) -> str | None:
        """/sys/class/net/IFNAME/ATTR as seen inside the namespace; None if unreadable
        (the kernel refuses `carrier` of a link that is administratively down)."""
        proc = self.run(host, ["cat", f"/sys/class/net/{ifname}/{attr}"])
        return proc.stdout.strip() if proc.returncode == 0 else None

    def tx_bytes(self, host: str, rail: Rail) -> int:
        """Bytes `host` has sent on its NIC of `rail` (the kernel's counter; 0 if unreadable):
        where a test or a benchmark sees which rail carries the traffic."""
        value = self.sysfs(host, self.topo.rail_ifname(self.topo.check_rail(rail)),
                           "statistics/tx_bytes")
        return int(value) if value else 0

    # --- link state (netlink) ----------------------------------------------------------
    def nic(self, host: str, rail: Rail) -> LinkInfo:
        return self.nl.link(self.topo.host_ns(host), self.topo.rail_ifname(
            self.topo.check_rail(rail)))

    def switch_port(self, host: str, rail: Rail) -> LinkInfo:
        return self.nl.link(self.topo.switch_ns, self.topo.port(host, rail))

    def carrier(self, host: str, rail: Rail) -> bool:
        return self.nic(host, rail).carrier

    def carrier_changes(self, host: str, rail: Rail) -> int:
        return self.nic(host, rail).carrier_changes

    def blackholed(self, host: str, rail: Rail) -> bool:
        return self.switch_port(host, rail).group == BLACKHOLE_GROUP

    def status(self) -> list[dict[str, Any]]:
        """One row per host NIC (rails, then mgmt) with its state and active faults."""
        rows = []
        gray = self.gray_faults()
        for host in self.hosts:
            for rail in [*self.rails, None]:
                if rail is None:
                    nic = self.nl.link(self.topo.host_ns(host), MGMT_IFNAME)
                    port = self.nl.link(self.topo.switch_ns, self.topo.mgmt_port(host))
                else:
                    nic, port = self.nic(host, rail), self.switch_port(host, rail)
                faults = [name for name, on in (("cut", not port.admin_up),
                                                ("nicdown", not nic.admin_up),
                                                ("blackhole", port.group == BLACKHOLE_GROUP))
                          if on]
                faults += [g["kind"] for g in gray.get((host, rail), [])] if rail is not None else []
                rows.append({
                    "host": host, "rail": rail, "ifname": nic.ifname,
                    "address": ",".join(nic.addresses), "admin_up": nic.admin_up,
                    "carrier": nic.carrier, "carrier_changes": nic.carrier_changes,
                    "switch_port": port.ifname, "switch_port_up": port.admin_up,
                    "faults": faults,
                })
        return rows
