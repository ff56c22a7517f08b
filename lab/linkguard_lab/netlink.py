"""One open rtnetlink socket per lab namespace, for fast timed faults and link queries.

A fault is a single netlink request on an already-open socket, so the CLOCK_MONOTONIC stamp
taken just before it is within a fraction of a millisecond of the kernel event (spawning
`ip` would add several milliseconds of fork/exec between the stamp and the event).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from linkguard_lab.errors import LabError

IFF_UP = 0x1


@dataclass(frozen=True)
class LinkInfo:
    ifname: str
    admin_up: bool
    carrier: bool
    carrier_changes: int
    operstate: str
    group: int
    addresses: tuple[str, ...]  # "a.b.c.d/len"


class Netlink:
    def __init__(self) -> None:
        self._sockets: dict[str, Any] = {}
        self._indexes: dict[tuple[str, str], int] = {}

    def _ipr(self, ns: str):
        ipr = self._sockets.get(ns)
        if ipr is None:
            from pyroute2 import IPRoute  # imported lazily: the CLI's --help needs no pyroute2

            try:
                # flags=0: never create a missing namespace, fail instead.
                ipr = IPRoute(netns=ns, flags=0)
            except Exception as exc:  # pyroute2 raises several types for a missing ns
                raise LabError(f"cannot open namespace {ns}: {exc}") from exc
            self._sockets[ns] = ipr
        return ipr

    def index(self, ns: str, ifname: str) -> int:
        key = (ns, ifname)
        if key not in self._indexes:
            found = self._ipr(ns).link_lookup(ifname=ifname)
            if not found:
                raise LabError(f"no link {ifname} in namespace {ns}")
            self._indexes[key] = found[0]
        return self._indexes[key]

    def set_link(self, ns: str, ifname: str, **attrs: object) -> int:
        """Apply `ip link set`-style attrs; returns time.monotonic_ns() taken just before."""
        ipr = self._ipr(ns)
        idx = self.index(ns, ifname)
        t_ns = time.monotonic_ns()
        try:
            ipr.link("set", index=idx, **attrs)
        except Exception as exc:
            raise LabError(f"link set {ifname} {attrs} in {ns}: {exc}") from exc
        return t_ns

    def link(self, ns: str, ifname: str) -> LinkInfo:
        ipr = self._ipr(ns)
        idx = self.index(ns, ifname)
        try:
            msg = ipr.link("get", index=idx)[0]
            addrs = tuple(
                f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}" for a in ipr.get_addr(index=idx)
            )
        except Exception as exc:
            raise LabError(f"link get {ifname} in {ns}: {exc}") from exc
        return LinkInfo(
            ifname=ifname,
            admin_up=bool(msg["flags"] & IFF_UP),
            carrier=bool(msg.get("IFLA_CARRIER")),
            carrier_changes=int(msg.get("IFLA_CARRIER_CHANGES") or 0),
            operstate=str(msg.get("IFLA_OPERSTATE") or "UNKNOWN"),
            group=int(msg.get("IFLA_GROUP") or 0),
            addresses=addrs,
        )

    def close(self) -> None:
        for ipr in self._sockets.values():
            with contextlib.suppress(OSError):
                ipr.close()
        self._sockets.clear()
        self._indexes.clear()
