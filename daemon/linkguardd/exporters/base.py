"""The interface every exporter implements, and the update it receives.

An exporter is one consumer of the daemon's decisions: the shared-memory file the NCCL plugin
reads, the event history behind the API's ListEvents/Watch, the transition log, the metrics. The
engine knows only this interface (as node-problem-detector's problem exporters): it is handed its
exporters when it is made (exporters.Exporters, in main.py), gives each its read-only state when
it starts them, and every change of state reaches every exporter the same way, as one Update
passed to `export()`, on the event-loop thread, in the order it was handed them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from linkguardd.inventory import NicInfo
from linkguardd.policy import Policy, Transition
from linkguardd.settings import Settings
from linkguardd.view import EventView


@dataclass
class Update:
    """One change: the transitions the policy just decided (seq numbers from `first_seq` on),
    or only a changed NIC table (`table_changed` without transitions: a new address, ifindex or
    DOM reading). `monitor` names the monitor whose fact caused it ("" for the hold-down timer,
    an operator or a reload); `fact_ns` is when that monitor observed the fact.

    The shm exporter, first in the table, is the publication: it calls `mark_published()` once
    the NCCL plugin can see the change, so everyone after it reports the same detection time,
    from the fact to the publication.
    """

    transitions: Sequence[Transition]
    first_seq: int
    table_changed: bool
    unix_offset_s: float  # wall clock minus CLOCK_MONOTONIC, to date the transitions
    monitor: str = ""
    fact_ns: int | None = None
    published_ns: int | None = None
    _events: tuple[EventView, ...] | None = field(default=None, repr=False)

    def mark_published(self, now_ns: int) -> None:
        self.published_ns = now_ns

    @property
    def detection_ns(self) -> int:
        """Fact observed -> state published; 0 when not measured (no fact, or not published)."""
        if not self.fact_ns or self.published_ns is None:
            return 0
        return max(0, self.published_ns - self.fact_ns)

    def events(self) -> tuple[EventView, ...]:
        """The transitions as the API and the log show them (built once, after publication)."""
        if self._events is None:
            detection = self.detection_ns
            self._events = tuple(
                EventView(self.first_seq + i, tr.ifname, int(tr.old), int(tr.new),
                          int(tr.reason), tr.detail, tr.epoch,
                          self.unix_offset_s + tr.at_ns / 1e9, detection)
                for i, tr in enumerate(self.transitions))
        return self._events


class EngineState(Protocol):
    """What exporters may read of the engine (read only, on the event-loop thread)."""

    settings: Settings  # the running settings: replaced on reload
    ifnames: list[str]
    policy: Policy
    clock: Callable[[], int]
    next_seq: int  # the sequence number the next transition gets

    @property
    def backups(self) -> Mapping[str, str]: ...

    @property
    def backup_sets(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def inventory(self) -> Mapping[str, NicInfo]: ...


class Exporter(Protocol):
    """Start, receive every update, stop."""

    name: str

    async def start(self, state: EngineState) -> None:
        """Acquire what the exporter needs (a file, a port) before the first update; `state`
        is the engine's, to read from here on."""

    def export(self, update: Update) -> None:
        """Consume one update. On the event-loop thread: must not block."""

    async def stop(self) -> None:
        """Release everything; no update arrives after this."""
