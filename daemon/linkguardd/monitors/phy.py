"""PHY monitor: each NIC's FEC block counters and PCS symbol errors from ethtool netlink
(FEC_GET with statistics, STATS_GET eth-phy: ethtool_stats.py), sampled every `interval_s` as
CountersFact(source="phy"). Raw cumulative totals; the policy turns them into rates.

A driver without FEC (veth, most virtual NICs) answers EOPNOTSUPP, and one without PHY
statistics leaves the group empty: no data, said once in the log, asked again each poll (a
re-probed driver may have it), never a monitor failure.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable, Sequence

from linkguardd.facts import CountersFact
from linkguardd.monitors.base import FactSink, MonitorHealth
from linkguardd.monitors.ethtool_stats import FEC_STATS, PHY_STATS, EthtoolStats
from linkguardd.monitors.polling import Polling

log = logging.getLogger(__name__)

PHY_COUNTERS = tuple(FEC_STATS.values()) + tuple(PHY_STATS.values())
PhyReading = dict[str, int] | None  # None: no such netdev


class PhyMonitor:
    """Monitor "phy". `opener` makes the kernel interface (tests pass a fake)."""

    name = "phy"

    def __init__(self, interfaces: Sequence[str], netns: str | None = None,
                 interval_s: float = 1.0,
                 opener: Callable[[str | None], EthtoolStats] = EthtoolStats) -> None:
        self.interfaces = tuple(interfaces)
        self.netns = netns
        self.interval_s = interval_s
        self.health = MonitorHealth()
        self.supported: dict[str, bool] = {}  # NIC -> reports statistics (last answer)
        self._opener = opener
        self._nl: EthtoolStats | None = None
        self._sink: FactSink = lambda fact: None
        self._polling = Polling(self.name, self.poll_once, interval_s, self.health)

    async def start(self, sink: FactSink) -> None:
        self._sink = sink
        await self.poll_once()
        self._polling.start()

    async def stop(self) -> None:
        await self._polling.stop()
        if self._nl is not None:
            self._nl.close()
            self._nl = None

    async def poll_once(self) -> None:
        started = time.perf_counter()
        readings, errors = await asyncio.to_thread(self._read_all)
        at_ns = time.monotonic_ns()
        for ifname, values in readings.items():
            has = bool(values)
            if self.supported.get(ifname) != has:
                log.info("phy: %s %s", ifname, f"reports {', '.join(sorted(values or ()))}"
                         if has else "has no FEC or PHY statistics (the driver reports none)")
            self.supported[ifname] = has
            if values:
                self._sink(CountersFact(ifname=ifname, at_ns=at_ns, counters=values,
                                        source="phy"))
        self.health.last_duration_s = time.perf_counter() - started
        self.health.success, self.health.last_error = True, ""
        if errors:
            self.health.fail("; ".join(errors[:3]))

    def _read_all(self) -> tuple[dict[str, PhyReading], list[str]]:
        """Worker thread: every NIC once. A socket that failed is opened again next poll."""
        readings: dict[str, PhyReading] = {}
        errors: list[str] = []
        try:
            if self._nl is None:
                self._nl = self._opener(self.netns)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # no ethtool family (kernel < 5.6): no data
                return dict.fromkeys(self.interfaces), []
            return readings, [f"ethtool netlink: {exc}"]
        for ifname in self.interfaces:
            try:
                readings[ifname] = self._nl.read(ifname)
            except OSError as exc:  # EPERM, a timeout...: this NIC, this poll
                errors.append(f"{ifname}: ethtool statistics: {exc}")
                self._nl.close()
                self._nl = None
                break
        return readings, errors
