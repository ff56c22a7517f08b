"""What the operator surfaces (gRPC API, /metrics, logs) see of the daemon.

engine_view.EngineView implements DaemonView over the engine; the gRPC servicer and the metrics
collector read only this, so they can be tested against a small fake and never reach into the
engine's internals.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from linkguardd.census.store import JobTraffic, NicTraffic
from linkguardd.facts import PluginVerdictFact


@dataclass(frozen=True)
class PluginVerdictView:
    """One process's unexpired gray verdict on a NIC (verdicts/store.py)."""

    fact: PluginVerdictFact  # the latest report: verdict, pid, uid, numbers, peer
    first_unix: float  # when this process first called the NIC gray
    last_unix: float  # its latest report
    reports: int
    expires_unix: float
    detail: str  # the verdict in words (verdicts.store.describe)


@dataclass(frozen=True)
class NicView:
    name: str
    state: int  # states.NicState value
    reason: int  # states.Reason value of the last transition
    backup: str  # "" if none
    present: bool
    carrier: bool
    operstate: str
    speed_mbps: int | None
    epoch: int
    since_monotonic_ns: int  # when the current state began (CLOCK_MONOTONIC)
    since_unix: float  # the same instant on the wall clock
    counters: Mapping[str, int] = field(default_factory=dict)
    dom_status: str = "no_module"
    dom_warnings: tuple[str, ...] = ()
    dom_alarms: tuple[str, ...] = ()
    dom: Any | None = None  # dom.common.ModuleDiagnostics when a module was read
    rdma_device: str = ""
    flap_penalty: float = 0.0
    drain_reason: str = ""
    dom_flags_seen: Mapping[str, int] = field(default_factory=dict)  # latched flag -> reads
    # Judged error counters: errors/s over the latest sample, and those holding the NIC DEGRADED
    counter_rates: Mapping[str, float] = field(default_factory=dict)
    counters_over: tuple[str, ...] = ()
    plugin_verdicts: tuple[PluginVerdictView, ...] = ()  # newest first; empty: not gray
    traffic: NicTraffic = field(default_factory=NicTraffic)  # jobs' connections on it (census/store.py)
    backup_set: tuple[str, ...] = ()  # nearest first; backup is its first member


@dataclass(frozen=True)
class EventView:
    seq: int  # the event's sequence number in the shm ring (resumable)
    nic: str
    old_state: int
    new_state: int
    reason: int
    detail: str
    epoch: int
    time_unix: float  # wall clock of the decision
    detection_ns: int  # fact observed by a monitor -> state published


# A watcher may lag this many events behind before it is cut off: as many as the history keeps
# (exporters/history.py), so a client that resumes with --since at once still finds the rest.
WATCH_QUEUE_EVENTS = 1024


class FellBehind(Exception):
    """The watcher did not read its events and was cut off; resume after `last_seq`."""

    def __init__(self, last_seq: int) -> None:
        super().__init__(last_seq)
        self.last_seq = last_seq


class WatchQueue:
    """One watcher's new events, bounded: a watcher that stops reading costs at most
    `limit` references, then its queue is emptied and get() raises FellBehind."""

    def __init__(self, limit: int = WATCH_QUEUE_EVENTS) -> None:
        self._queue: asyncio.Queue[EventView | None] = asyncio.Queue(limit)
        self._last_seq = 0  # the last event get() returned
        self.cut_off = False

    def put(self, event: EventView) -> None:
        """On the event loop's thread; never blocks."""
        if self.cut_off:
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.cut_off = True
            while not self._queue.empty():  # free the events now, not when the stream ends
                self._queue.get_nowait()
            self._queue.put_nowait(None)

    async def get(self) -> EventView:
        event = await self._queue.get()
        if event is None:
            raise FellBehind(self._last_seq)
        self._last_seq = event.seq
        return event

    def qsize(self) -> int:
        return self._queue.qsize()


class UnknownNic(KeyError):
    """The request named a NIC the daemon does not monitor."""


class DaemonView(Protocol):
    def nics(self) -> list[NicView]:
        """Every monitored NIC, in table order."""

    def nic(self, name: str) -> NicView:
        """One NIC; raises UnknownNic."""

    def events_since(self, seq: int) -> list[EventView]:
        """Events with seq > `seq` still in the daemon's history (oldest first)."""

    def head_seq(self) -> int:
        """The newest event's seq (0: none yet); numbers continue across restarts."""

    def subscribe(self) -> WatchQueue:
        """A queue that receives every new event until unsubscribe()."""

    def unsubscribe(self, queue: WatchQueue) -> None: ...

    def drain(self, name: str, reason: str) -> NicView:
        """Operator drain; raises UnknownNic, or state_file.StateNotSaved once in effect."""

    def undrain(self, name: str) -> NicView: ...

    def dump(self) -> dict[str, Any]:
        """The whole state and effective config, JSON-serialisable."""

    def monitor_health(self) -> Mapping[str, Any]:
        """monitor name -> monitors.base.MonitorHealth"""

    def heartbeat_age_s(self) -> float:
        """Seconds since the shm heartbeat was last written."""

    def plugin_verdict_counts(self) -> tuple[Mapping[tuple[str, str], int], Mapping[str, int]]:
        """Verdicts accepted by (NIC, verdict), datagrams rejected by reason, since start."""

    def jobs(self) -> list[JobTraffic]:
        """Every job (or process without a job id) whose plugin reports its connections."""

    def census_counts(self) -> tuple[int, Mapping[str, int]]:
        """Processes reporting a census now; census datagrams rejected by reason since start."""
