"""Names and addresses of a lab: pure functions of (prefix, hosts, rails, routed), no kernel
calls.

Layout for prefix P, hosts a, b, ... and rails 0..M-1:
  namespace P-sw       bridges br-rail<r> and br-mgmt; switch ports <host>-r<r>, <host>-m;
                       routed labs only: br-rail<r> is the rail's router (198.18.<r>.254/24)
  namespace P-<host>   NICs rail<r> (198.18.<r>.<i+1>/24) and mgmt0 (198.19.0.<i+1>/24)
All addresses are from 198.18.0.0/15 (RFC 2544 benchmarking space) and exist only inside the
lab's namespaces, so two labs may reuse them.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from linkguard_lab.errors import LabError

DEFAULT_PREFIX = "lg"
MAX_HOSTS = 26  # hosts are single letters a..z
MAX_RAILS = 16
PREFIX_LEN = 24
MGMT_IFNAME = "mgmt0"
ROUTER_HOST_OCTET = 254  # above every host's (at most MAX_HOSTS)
RAIL_TABLE_BASE = 100  # routed labs: rail r's source-routing table is RAIL_TABLE_BASE + r
Rail = int | str  # the CLI hands rails over as text; check_rail() validates both
# Lab prefixes always start with "lg" so a lab can never be confused with other namespaces.
_PREFIX_RE = re.compile(r"^lg[a-z0-9]{0,10}$")


def check_prefix(prefix: str) -> str:
    if not _PREFIX_RE.match(prefix):
        raise LabError(
            f"bad prefix {prefix!r}: must be 'lg' followed by up to 10 of [a-z0-9]"
        )
    return prefix


def host_name(index: int) -> str:
    return string.ascii_lowercase[index]


@dataclass(frozen=True)
class Topology:
    prefix: str = DEFAULT_PREFIX
    hosts: int = 2
    rails: int = 2
    routed: bool = False  # the switch routes between the rails (routing.py)

    def __post_init__(self) -> None:
        check_prefix(self.prefix)
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise LabError(f"bad host count {self.hosts}: must be 1..{MAX_HOSTS}")
        if not 1 <= self.rails <= MAX_RAILS:
            raise LabError(f"bad rail count {self.rails}: must be 1..{MAX_RAILS}")

    # --- names -------------------------------------------------------------------------
    @property
    def host_names(self) -> list[str]:
        return [host_name(i) for i in range(self.hosts)]

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    def host_ns(self, host: str) -> str:
        return f"{self.prefix}-{self.check_host(host)}"

    @property
    def namespaces(self) -> list[str]:
        return [self.switch_ns] + [self.host_ns(h) for h in self.host_names]

    @staticmethod
    def rail_ifname(rail: int) -> str:
        return f"rail{rail}"

    @staticmethod
    def bridge(rail: int | None) -> str:
        """Bridge of a rail; None is the management network."""
        return "br-mgmt" if rail is None else f"br-rail{rail}"

    def port(self, host: str, rail: Rail) -> str:
        """Switch-side veth of a host's rail (inside the switch namespace)."""
        return f"{self.check_host(host)}-r{self.check_rail(rail)}"

    def mgmt_port(self, host: str) -> str:
        return f"{self.check_host(host)}-m"

    # --- addresses ---------------------------------------------------------------------
    def address(self, host: str, rail: Rail) -> str:
        return f"198.18.{self.check_rail(rail)}.{self._index(host) + 1}"

    def mgmt_address(self, host: str) -> str:
        return f"198.19.0.{self._index(host) + 1}"

    def rail_network(self, rail: Rail) -> str:
        return f"198.18.{self.check_rail(rail)}.0/{PREFIX_LEN}"

    def router_address(self, rail: Rail) -> str:
        """The switch's address on a rail (routed labs): the hosts' gateway to other rails."""
        return f"198.18.{self.check_rail(rail)}.{ROUTER_HOST_OCTET}"

    def rail_table(self, rail: Rail) -> int:
        return RAIL_TABLE_BASE + self.check_rail(rail)

    # --- validation ----------------------------------------------------------------------
    def check_host(self, host: str) -> str:
        if host not in self.host_names:
            raise LabError(
                f"unknown host {host!r}: lab {self.prefix!r} has hosts "
                f"{', '.join(self.host_names)}"
            )
        return host

    def check_rail(self, rail: Rail) -> int:
        try:
            value = int(rail)
        except (TypeError, ValueError):
            value = -1
        if str(rail).strip() != str(value) or not 0 <= value < self.rails:
            raise LabError(
                f"unknown rail {rail!r}: lab {self.prefix!r} has rails 0..{self.rails - 1}"
            )
        return value

    def _index(self, host: str) -> int:
        return self.host_names.index(self.check_host(host))

    def owns_ns(self, name: str) -> bool:
        """Whether a namespace name belongs to this prefix (any host letter, or the switch)."""
        return re.fullmatch(rf"{re.escape(self.prefix)}-(sw|[a-z])", name) is not None
