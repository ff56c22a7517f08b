"""The daemon's core loop: monitors -> policy -> exporters (shared memory, history, log, metrics).

The engine is handed its monitors and exporters (core.py builds them) and knows them only by
their interfaces; the API and /metrics read it through engine_view.EngineView.

Facts arrive on the event-loop thread through `on_fact`; the policy decides at once and every
exporter has the change before `on_fact` returns, the shm file first, so detection latency is
the monitor's receive time plus a few microseconds of policy and publishing. Time-driven changes
(hold-down, flap damping) run from a timer set to the policy's next deadline: there is no
polling loop. Each change reaches the exporters one way: one Update, in the order they were handed.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from linkguardd.census.store import CensusStore
from linkguardd.exporters import Exporter, Update
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
from linkguardd.monitors.base import FactSink, Monitor
from linkguardd.policy import Policy, Transition
from linkguardd.settings import Settings
from linkguardd.state_file import SavedDrain, StateNotSaved, StateStore
from linkguardd.verdicts.store import Note, VerdictStore
from linkguardd.view import UnknownNic

log = logging.getLogger("linkguardd")

MONITOR_STOP_TIMEOUT_S = 3.0  # systemd's stop timeout is 90 s; be well inside it
# Addresses change rarely and a link that appears triggers a refresh of its own; each refresh
# costs ~8 ms of CPU (a netlink dump), so the periodic one is slow. Not on the detection path.
INVENTORY_REFRESH_S = 30.0
# Each NIC's backup set, nearest first (main.resolve_nics); one name is a set of one.
BackupSets = Mapping[str, str | Sequence[str]]


def _sets(backups: BackupSets) -> dict[str, tuple[str, ...]]:
    return {k: (v,) if isinstance(v, str) else tuple(v) for k, v in backups.items() if v}


class Engine:
    """Runs the policy on the monitors' facts and hands each decision to `exporters`, in order
    (exporters.Exporters.in_order() in the daemon); an exporter reads the engine as an
    exporters.EngineState."""

    def __init__(self, settings: Settings, ifnames: Sequence[str], backups: BackupSets,
                 monitors: Iterable[Monitor], exporters: Iterable[Exporter],
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
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
        self.exporters = list(exporters)
        self.ready = asyncio.Event()
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_at: int | None = None  # what the timer is set for: policy or verdicts
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def backups(self) -> dict[str, str]:
        """Each NIC's first (nearest) backup: the pair of shm version 1 and of drain checks."""
        return {k: v[0] for k, v in self.backup_sets.items()}

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the exporters (the shm file), run the monitors' initial scans, publish the
        first table."""
        saved = self.state.open()
        self.next_seq = saved.next_seq  # numbers continue across restarts
        for exporter in self.exporters:
            await exporter.start(self)
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
            self.census.reject(fact.reason, fact.count)
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
            rejects = self.verdict_rejects
            rejects[fact.reason] = rejects.get(fact.reason, 0) + fact.count
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

    # ---- operator commands (engine_view.EngineView serves them) -----------------------------
    def drain(self, name: str, reason: str) -> None:
        """Raises UnknownNic; StateNotSaved once the drain is in effect but not on disk."""
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.drain(name, self.clock(), reason))
        self.state.set_drains(self._drains())

    def undrain(self, name: str) -> None:
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.undrain(name, self.clock()))
        self.state.set_drains(self._drains())

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
