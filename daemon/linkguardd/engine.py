"""The daemon's core loop: monitors -> policy -> exporters (shared memory, history, log, metrics).

Facts arrive on the event-loop thread through `on_fact`; the policy decides at once and every
exporter has the change before `on_fact` returns, the shm file first, so detection latency is
the monitor's receive time plus a few microseconds of policy and publishing. Time-driven changes
(hold-down, flap damping) run from a timer set to the policy's next deadline: there is no
polling loop. Each change reaches the exporters one way: one Update, in exporters.EXPORTERS order.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar

from linkguardd.census.store import CensusStore, JobTraffic
from linkguardd.exporters import EngineState, Exporter, Update, build_exporters
from linkguardd.exporters.history import HistoryExporter
from linkguardd.exporters.shm import ShmExporter
from linkguardd.facts import (
    CountersFact,
    DomFact,
    Fact,
    LinkFact,
    LinkRenamedFact,
    PluginCensusFact,
    PluginCensusRejectedFact,
    PluginVerdictFact,
    PluginVerdictRejectedFact,
)
from linkguardd.inventory import NicInfo, read_inventory
from linkguardd.monitors.base import FactSink, Monitor, MonitorHealth
from linkguardd.policy import Policy, Transition
from linkguardd.settings import Settings
from linkguardd.state_file import SavedDrain, StateNotSaved, StateStore
from linkguardd.states import NicState, Reason
from linkguardd.verdicts.store import Note, VerdictStore
from linkguardd.view import EventView, NicView, PluginVerdictView, UnknownNic, WatchQueue

log = logging.getLogger("linkguardd")

MONITOR_STOP_TIMEOUT_S = 3.0  # systemd's stop timeout is 90 s; be well inside it
# Addresses change rarely and a link that appears triggers a refresh of its own; each refresh
# costs ~8 ms of CPU (a netlink dump), so the periodic one is slow. Not on the detection path.
INVENTORY_REFRESH_S = 30.0
E = TypeVar("E")
# Each NIC's backup set, nearest first (main.resolve_nics); one name is a set of one.
BackupSets = Mapping[str, str | Sequence[str]]


def _sets(backups: BackupSets) -> dict[str, tuple[str, ...]]:
    return {k: (v,) if isinstance(v, str) else tuple(v) for k, v in backups.items() if v}


class Engine:
    """Owns the policy and the exporters; implements view.DaemonView for the API.

    `exporters` builds the consumers from the engine (default: exporters.EXPORTERS)."""

    def __init__(self, settings: Settings, ifnames: Sequence[str], backups: BackupSets,
                 monitors: Iterable[Monitor], clock: Callable[[], int] = time.monotonic_ns,
                 exporters: Callable[[EngineState], list[Exporter]] = build_exporters) -> None:
        self.settings = settings
        self.ifnames = list(ifnames)
        self.backup_sets = _sets(backups)
        self.monitors = list(monitors)
        self.clock = clock
        self.policy = Policy(settings.policy_config(), self.ifnames, clock())
        self.inventory: dict[str, NicInfo] = {}
        self.counters: dict[str, dict[str, int]] = {n: {} for n in self.ifnames}
        self.verdicts = VerdictStore(settings.plugin_verdict_ttl_s, self.ifnames)
        self.verdict_rejects: dict[str, int] = {}  # reason -> datagrams, for /metrics
        self.census = CensusStore(settings.plugin_census_ttl_s, self.ifnames)
        self.state = StateStore(settings.state_dir)
        self.next_seq = 1  # the next event's sequence number (the shm ring's too): see start()
        self.exporters = exporters(self)
        self.ready = asyncio.Event()
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_at: int | None = None  # what the timer is set for: policy or verdicts
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def backups(self) -> dict[str, str]:
        """Each NIC's first (nearest) backup: the pair of shm version 1 and of drain checks."""
        return {k: v[0] for k, v in self.backup_sets.items()}

    def exporter(self, kind: type[E]) -> E | None:
        return next((e for e in self.exporters if isinstance(e, kind)), None)

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the exporters (the shm file), run the monitors' initial scans, publish the
        first table."""
        saved = self.state.open()
        self.next_seq = saved.next_seq  # numbers continue across restarts
        for exporter in self.exporters:
            await exporter.start()
        self._restore_drains(saved.drains)  # the first table published already has them
        await self.refresh_inventory()
        await self._start_monitors()
        self._publish(self.policy.settle(self.clock()), force=True)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._inventory_loop(), name="inventory")]
        self.ready.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for monitor in reversed(self.monitors):
            try:  # a read stuck in the kernel must not keep a stopping daemon alive
                await asyncio.wait_for(monitor.stop(), MONITOR_STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("monitor %s did not stop within %g s; leaving it behind",
                            monitor.name, MONITOR_STOP_TIMEOUT_S)
        if self._deadline:
            self._deadline.cancel()
        for exporter in reversed(self.exporters):
            await exporter.stop()
        self.state.close()

    async def reload(self, settings: Settings, ifnames: Sequence[str],
                     backups: BackupSets, monitors: Iterable[Monitor]) -> None:
        """SIGHUP: new settings; NICs kept keep their state, epoch and flap damping."""
        for monitor in reversed(self.monitors):
            await monitor.stop()
        self.settings, self.ifnames = settings, list(ifnames)
        self.backup_sets = _sets(backups)
        for name in self.ifnames:
            self.counters.setdefault(name, {})
        self.verdicts.configure(settings.plugin_verdict_ttl_s, self.ifnames)
        self.census.configure(settings.plugin_census_ttl_s, self.ifnames)
        now = self.clock()
        # Published before the monitors restart, so their facts land after it in epoch order.
        self._publish(self.policy.reconfigure(self.ifnames, settings.policy_config(), now),
                      force=True)
        await self.refresh_inventory()
        self.monitors = list(monitors)
        await self._start_monitors()
        self._publish(self.policy.settle(self.clock()), force=True)
        # New hold-down/damping settings move a RECOVERING NIC's deadline even when no state
        # changed (and _publish re-arms the timer only on a transition).
        self._schedule_deadline()

    async def _start_monitors(self) -> None:
        for monitor in self.monitors:
            await monitor.start(self._sink(monitor.name))

    def _sink(self, monitor: str) -> FactSink:
        return lambda fact: self.on_fact(fact, monitor)

    # ---- facts -----------------------------------------------------------------------------
    def on_fact(self, fact: Fact, monitor: str = "") -> None:
        """FactSink of every monitor (`monitor` names it): decide and publish before returning."""
        now = self.clock()
        if isinstance(fact, (PluginVerdictFact, PluginVerdictRejectedFact)):
            self._on_plugin_verdict(fact, now)
            return
        if isinstance(fact, PluginCensusFact):  # shown when read: no event, no state change
            self.census.report(fact)
            return
        if isinstance(fact, PluginCensusRejectedFact):
            self.census.reject(fact.reason)
            return
        if isinstance(fact, CountersFact) and fact.ifname in self.counters:
            self.counters[fact.ifname].update(fact.counters)
        transitions = self.policy.apply(fact, now)
        force = isinstance(fact, (LinkRenamedFact, DomFact)) or (
            isinstance(fact, LinkFact) and self._link_info_changed(fact))
        self._publish(transitions, force=force, monitor=monitor,
                      fact_ns=getattr(fact, "at_ns", None))
        if isinstance(fact, CountersFact) and not transitions:
            self._schedule_deadline()  # an error rate over its limit moves a clean window's end
        if isinstance(fact, LinkFact) and fact.present and fact.ifname not in self.inventory:
            asyncio.get_running_loop().create_task(self.refresh_inventory())

    def _on_plugin_verdict(self, fact: PluginVerdictFact | PluginVerdictRejectedFact,
                           now: int) -> None:
        """A job's word on a NIC: shown and recorded, never a state change (verdicts/store.py)."""
        if isinstance(fact, PluginVerdictRejectedFact):
            self.verdict_rejects[fact.reason] = self.verdict_rejects.get(fact.reason, 0) + 1
            return
        notes = self.verdicts.report(fact)
        self._publish(self._noted(notes, now), monitor="plugin_verdicts")
        self._schedule_deadline()  # the new report's expiry

    def _noted(self, notes: list[Note], now: int) -> list[Transition]:
        """Notes as events: the NIC's state and epoch stay what they are."""
        out = []
        for note in notes:
            rec = self.policy.records.get(note.ifname)
            if rec is not None:
                out.append(Transition(note.ifname, rec.state, rec.state, note.reason, rec.epoch,
                                      now, note.detail))
        return out

    def _link_info_changed(self, fact: LinkFact) -> bool:
        info = self.inventory.get(fact.ifname)
        return info is None or info.ifindex != fact.ifindex

    def _on_deadline(self) -> None:
        self._deadline, self._deadline_at = None, None
        now = self.clock()
        self._publish(self.policy.tick(now) + self._noted(self.verdicts.expire(now), now))
        self._schedule_deadline()  # also when the tick changed nothing (e.g. damping still on)

    def _schedule_deadline(self) -> None:
        times = (self.policy.next_deadline_ns(), self.verdicts.next_expiry_ns())
        when = min((t for t in times if t is not None), default=None)
        if self._deadline and when == self._deadline_at:
            return  # already set for it (counter samples ask ten times a second)
        if self._deadline:
            self._deadline.cancel()
            self._deadline = None
        self._deadline_at = when
        if when is not None:
            delay = max(0.0, (when - self.clock()) / 1e9)
            self._deadline = asyncio.get_running_loop().call_later(delay, self._on_deadline)

    # ---- publishing ------------------------------------------------------------------------
    def _publish(self, transitions: list[Transition], force: bool = False, monitor: str = "",
                 fact_ns: int | None = None) -> None:
        """One update to every exporter, in table order (the shm file first)."""
        if not transitions and not force:
            return
        update = Update(transitions, self.next_seq, force, time.time() - self.clock() / 1e9,
                        monitor, fact_ns)
        self.next_seq += len(transitions)
        if transitions:
            self.state.issued(self.next_seq - 1)
        for exporter in self.exporters:
            exporter.export(update)
        if transitions:
            self._schedule_deadline()

    async def refresh_inventory(self) -> None:
        try:
            fresh = await asyncio.to_thread(read_inventory, self.ifnames,
                                            self.settings.sysfs_root, self.settings.netns)
        except OSError as exc:  # netns gone, netlink refused: keep what we had
            log.warning("inventory refresh failed: %s", exc)
            return
        if fresh != self.inventory:
            self.inventory = fresh
            self._publish([], force=True)

    async def _inventory_loop(self) -> None:
        while True:
            await asyncio.sleep(INVENTORY_REFRESH_S)
            await self.refresh_inventory()

    def _unix_time(self, monotonic_ns: int) -> float:
        return time.time() - (self.clock() - monotonic_ns) / 1e9

    # ---- view.DaemonView -------------------------------------------------------------------
    def nics(self) -> list[NicView]:
        return [self.nic(name) for name in self.ifnames]

    def nic(self, name: str) -> NicView:
        rec = self.policy.records.get(name)
        if rec is None:
            raise UnknownNic(name)
        link, dom, info = rec.link, rec.dom, self.inventory.get(name, NicInfo(name))
        counters = dict(self.counters.get(name, {}))
        if link is not None and link.carrier_changes is not None:
            counters["carrier_changes"] = link.carrier_changes
        return NicView(
            name=name, state=int(rec.state), reason=int(rec.reason),
            backup=self.backups.get(name, ""), backup_set=self.backup_sets.get(name, ()),
            present=bool(link and link.present),
            carrier=bool(link and link.carrier), operstate=link.operstate if link else "UNKNOWN",
            speed_mbps=info.speed_mbps or None, epoch=rec.epoch,
            since_monotonic_ns=rec.since_ns, since_unix=self._unix_time(rec.since_ns),
            counters=counters,
            dom_status=dom.status if dom else "no_module",
            dom_warnings=dom.warnings if dom else (), dom_alarms=dom.alarms if dom else (),
            dom=dom.diagnostics if dom else None, rdma_device=info.rdma_dev,
            flap_penalty=self.policy.penalty(name, self.clock()),
            drain_reason=rec.drain_note if rec.drained else "",
            dom_flags_seen=dom.flags_seen if dom else {},
            counter_rates={name: rate for (_, name), rate in sorted(rec.last_rates.items())},
            counters_over=tuple(sorted({name for _, name in rec.error_rates})),
            plugin_verdicts=tuple(PluginVerdictView(r.fact, self._unix_time(r.first_ns),
                                                    self._unix_time(r.last_ns), r.count,
                                                    self._unix_time(self.verdicts.expires_ns(r)))
                                  for r in self.verdicts.reports(name)),
            traffic=self.census.nic_traffic(name, self.clock()))

    def events_since(self, seq: int) -> list[EventView]:
        history = self.exporter(HistoryExporter)
        return history.since(seq) if history else []

    def subscribe(self) -> WatchQueue:
        history = self.exporter(HistoryExporter)
        assert history is not None, "no history exporter: nothing to watch"
        return history.subscribe()

    def unsubscribe(self, queue: WatchQueue) -> None:
        history = self.exporter(HistoryExporter)
        if history is not None:
            history.unsubscribe(queue)

    def drain(self, name: str, reason: str) -> NicView:
        """Raises UnknownNic; StateNotSaved once the drain is in effect but not on disk."""
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.drain(name, self.clock(), reason))
        self.state.set_drains(self._drains())
        return self.nic(name)

    def undrain(self, name: str) -> NicView:
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.undrain(name, self.clock()))
        self.state.set_drains(self._drains())
        return self.nic(name)

    def head_seq(self) -> int:
        return self.state.last_seq

    def _drains(self) -> dict[str, str]:
        return {n: r.drain_note for n, r in self.policy.records.items() if r.drained}

    def _restore_drains(self, drains: Mapping[str, SavedDrain]) -> None:
        """A drain outlives the daemon that took it: back in force before anything is read."""
        transitions: list[Transition] = []
        for name, drain in drains.items():
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(drain.since_unix))
            if name not in self.policy.records:
                log.warning("state: dropping the saved drain of %s (since %s: %s): it is not "
                            "monitored any more", name, when, drain.reason)
                continue
            transitions += self.policy.drain(name, self.clock(), drain.reason)
            log.info("state: %s stays DRAINED across the restart (drained since %s: %s)",
                     name, when, drain.reason)
        try:
            self.state.set_drains(self._drains())
        except StateNotSaved:
            pass  # logged by the store; the drains are in force all the same
        self._publish(transitions, force=True)

    def dump(self) -> dict[str, Any]:
        return {
            "settings": {f.name: _plain(getattr(self.settings, f.name))
                         for f in fields(self.settings)},
            "nics": [{**asdict(v), "state": NicState(v.state).name,
                      "reason": Reason(v.reason).name, "dom": None} for v in self.nics()],
            "backups": self.backups,
            "backup_sets": {k: list(v) for k, v in self.backup_sets.items()},
            "inventory": {k: asdict(v) for k, v in self.inventory.items()},
            "monitors": {k: asdict(v) for k, v in self.monitor_health().items()},
            "events": [asdict(e) for e in self.events_since(0)],
            "census": self.census.dump(self.clock()),
        }

    def monitor_health(self) -> Mapping[str, MonitorHealth]:
        return {m.name: m.health for m in self.monitors}

    def jobs(self) -> list[JobTraffic]:
        return self.census.jobs(self.clock())

    def census_counts(self) -> tuple[int, Mapping[str, int]]:
        return self.census.process_count(self.clock()), self.census.rejected

    def plugin_verdict_counts(self) -> tuple[Mapping[tuple[str, str], int], Mapping[str, int]]:
        return self.verdicts.accepted, self.verdict_rejects

    def heartbeat_age_s(self) -> float:
        """Safe from any thread (the metrics server's): see ShmExporter.heartbeat_age_s."""
        shm = self.exporter(ShmExporter)
        return shm.heartbeat_age_s() if shm else 0.0


def _plain(value: Any) -> Any:
    """Settings values as JSON-serialisable data (mappings are read-only proxies)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value
