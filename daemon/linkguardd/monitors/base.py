"""The interface every monitor implements, and the sink it reports into.

A monitor watches one kind of source (rtnetlink, RDMA sysfs/verbs, module EEPROM) and reports
raw facts. The daemon's engine knows only this interface: it starts every monitor in
monitors.MONITORS, routes their facts to the policy, and stops them on shutdown.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from linkguardd.facts import Fact

# Called on the event-loop thread; must not block. The engine applies the fact to the policy and
# publishes any resulting transition before returning.
FactSink = Callable[[Fact], None]


@dataclass
class MonitorHealth:
    """What a monitor reports about itself (exported as ..._monitor_success / _duration)."""

    success: bool = True  # the last scan/read worked (no data for absent hardware is a success)
    last_duration_s: float = 0.0  # how long the last scan/read took
    last_error: str = ""
    errors: int = 0  # failed scans/reads since the monitor started (success shows the last)

    def fail(self, error: str) -> None:
        """One scan or read failed."""
        self.success, self.last_error = False, error
        self.errors += 1


class Monitor(Protocol):
    """Start, emit facts, stop-and-wait."""

    name: str
    health: MonitorHealth

    async def start(self, sink: FactSink) -> None:
        """Report the initial scan into `sink` before returning, then keep reporting from
        background tasks until stop()."""

    async def stop(self) -> None:
        """Stop, and return only once no more facts will be emitted."""
