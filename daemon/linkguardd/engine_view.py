"""The engine as the operator surfaces see it: view.DaemonView over a running Engine.

The gRPC API and /metrics read only this (main.py hands it to them); the engine itself only runs
the policy and feeds its exporters. Reads come from the engine's state, the event history from
the history exporter and the heartbeat from the shm exporter, each handed over by main.py; an
operator's drain is the engine's command, then read back here.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from linkguardd.census.store import JobTraffic
from linkguardd.engine import Engine
from linkguardd.exporters.history import HistoryExporter
from linkguardd.exporters.shm import ShmExporter
from linkguardd.inventory import NicInfo
from linkguardd.monitors.base import MonitorHealth
from linkguardd.states import NicState, Reason
from linkguardd.verdicts.store import Report
from linkguardd.view import EventView, NicView, PluginVerdictView, UnknownNic, WatchQueue

# A report's view is kept from one status to the next (a flood leaves 256 reports on a NIC, and
# every status shows them all) until the report changes, the time to live does, or the wall
# clock moves this far against the monotonic one (its dates would be off by that much).
UNIX_OFFSET_SLACK_S = 1e-3


class EngineView:
    """view.DaemonView of `engine`; on the event-loop thread except heartbeat_age_s()."""

    def __init__(self, engine: Engine, history: HistoryExporter, heartbeat: ShmExporter) -> None:
        self.engine = engine
        self.history = history
        self.heartbeat = heartbeat
        # NIC -> id(report) -> (report, unix offset, time to live, its view)
        self._verdict_views: dict[str, dict[int, tuple[Report, float, int, PluginVerdictView]]] = {}

    def nics(self) -> list[NicView]:
        return [self.nic(name) for name in self.engine.ifnames]

    def nic(self, name: str) -> NicView:
        engine = self.engine
        rec = engine.policy.records.get(name)
        if rec is None:
            raise UnknownNic(name)
        link, dom, info = rec.link, rec.dom, engine.inventory.get(name, NicInfo(name))
        now = engine.clock()
        unix_offset = time.time() - now / 1e9  # one for the NIC: a status shows 256 reports
        counters = dict(engine.counters.get(name, {}))
        if link is not None and link.carrier_changes is not None:
            counters["carrier_changes"] = link.carrier_changes
        return NicView(
            name=name, state=int(rec.state), reason=int(rec.reason),
            backup=engine.backups.get(name, ""), backup_set=engine.backup_sets.get(name, ()),
            present=bool(link and link.present),
            carrier=bool(link and link.carrier), operstate=link.operstate if link else "UNKNOWN",
            speed_mbps=info.speed_mbps or None, epoch=rec.epoch,
            since_monotonic_ns=rec.since_ns, since_unix=unix_offset + rec.since_ns / 1e9,
            counters=counters,
            dom_status=dom.status if dom else "no_module",
            dom_warnings=dom.warnings if dom else (), dom_alarms=dom.alarms if dom else (),
            dom=dom.diagnostics if dom else None, rdma_device=info.rdma_dev,
            flap_penalty=engine.policy.penalty(name, now),
            drain_reason=rec.drain_note if rec.drained else "",
            dom_flags_seen=dom.flags_seen if dom else {},
            counter_rates={name: rate for (_, name), rate in sorted(rec.last_rates.items())},
            counters_over=tuple(sorted({name for _, name in rec.error_rates})),
            plugin_verdicts=self._plugin_verdicts(name, unix_offset),
            traffic=engine.census.nic_traffic(name, now))

    def _plugin_verdicts(self, name: str, unix_offset: float) -> tuple[PluginVerdictView, ...]:
        """The NIC's reports as views, newest first, each built once (UNIX_OFFSET_SLACK_S)."""
        verdicts = self.engine.verdicts
        kept, fresh = self._verdict_views.get(name, {}), {}
        for r in verdicts.reports(name):
            entry = kept.get(id(r))
            if entry is None or entry[0] is not r or entry[2] != verdicts.ttl_ns or \
                    abs(entry[1] - unix_offset) > UNIX_OFFSET_SLACK_S:
                entry = (r, unix_offset, verdicts.ttl_ns, PluginVerdictView(
                    r.fact, unix_offset + r.first_ns / 1e9, unix_offset + r.last_ns / 1e9,
                    r.count, unix_offset + verdicts.expires_ns(r) / 1e9, r.detail))
            fresh[id(r)] = entry
        self._verdict_views[name] = fresh
        return tuple(entry[3] for entry in fresh.values())

    def events_since(self, seq: int) -> list[EventView]:
        return self.history.since(seq)

    def subscribe(self) -> WatchQueue:
        return self.history.subscribe()

    def unsubscribe(self, queue: WatchQueue) -> None:
        self.history.unsubscribe(queue)

    def drain(self, name: str, reason: str) -> NicView:
        """Raises UnknownNic; StateNotSaved once the drain is in effect but not on disk."""
        self.engine.drain(name, reason)
        return self.nic(name)

    def undrain(self, name: str) -> NicView:
        self.engine.undrain(name)
        return self.nic(name)

    def head_seq(self) -> int:
        return self.engine.state.last_seq

    def dump(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "settings": {f.name: _plain(getattr(engine.settings, f.name))
                         for f in fields(engine.settings)},
            "nics": [{**asdict(v), "state": NicState(v.state).name,
                      "reason": Reason(v.reason).name, "dom": None} for v in self.nics()],
            "backups": engine.backups,
            "backup_sets": {k: list(v) for k, v in engine.backup_sets.items()},
            "inventory": {k: asdict(v) for k, v in engine.inventory.items()},
            "monitors": {k: asdict(v) for k, v in self.monitor_health().items()},
            "events": [asdict(e) for e in self.events_since(0)],
            "census": engine.census.dump(engine.clock()),
        }

    def monitor_health(self) -> Mapping[str, MonitorHealth]:
        return {m.name: m.health for m in self.engine.monitors}

    def jobs(self) -> list[JobTraffic]:
        return self.engine.census.jobs(self.engine.clock())

    def census_counts(self) -> tuple[int, Mapping[str, int]]:
        census = self.engine.census
        return census.process_count(self.engine.clock()), census.rejected

    def plugin_verdict_counts(self) -> tuple[Mapping[tuple[str, str], int], Mapping[str, int]]:
        return self.engine.verdicts.accepted, self.engine.verdict_rejects

    def heartbeat_age_s(self) -> float:
        """Safe from any thread (the metrics server's): see ShmExporter.heartbeat_age_s."""
        return self.heartbeat.heartbeat_age_s()


def _plain(value: Any) -> Any:
    """Settings values as JSON-serialisable data (mappings are read-only proxies)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value
