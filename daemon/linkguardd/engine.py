"""The daemon's core loop: monitors -> policy -> shared memory, API, metrics and logs.

Facts arrive on the event-loop thread through `on_fact`; the policy decides at once and the
transition is in shared memory before `on_fact` returns, so detection latency is the monitor's
receive time plus a few microseconds of policy and publishing. Time-driven changes (hold-down,
flap damping) run from a timer set to the policy's next deadline: there is no polling loop.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from linkguardd.facts import CountersFact, DomFact, Fact, LinkFact, LinkRenamedFact
from linkguardd.inventory import NicInfo, read_inventory
from linkguardd.monitors.base import Monitor, MonitorHealth
from linkguardd.policy import Policy, Transition
from linkguardd.settings import Settings
from linkguardd.shm.layout import (
    LG_NIC_F_ADMIN_UP,
    LG_NIC_F_CARRIER,
    LG_NIC_F_PRESENT,
    LG_NIC_F_RDMA,
    Event,
    NicEntry,
)
from linkguardd.shm.writer import ShmWriter
from linkguardd.state_file import SavedDrain, StateNotSaved, StateStore
from linkguardd.states import NicState, Reason
from linkguardd.transition_log import format_transition
from linkguardd.view import EventView, NicView, UnknownNic

log = logging.getLogger("linkguardd")

SHM_NIC_CAPACITY = 64  # LG_SHM_MAX_NICS: more NICs than any GPU server has
SHM_RING_SLOTS = 1024  # ~ hours of transitions at realistic rates; readers re-sync on a lap
MONITOR_STOP_TIMEOUT_S = 3.0  # systemd's stop timeout is 90 s; be well inside it
HISTORY = 1024  # events kept for the API's Watch/ListEvents resume
# Addresses change rarely and a link that appears triggers a refresh of its own; each refresh
# costs ~8 ms of CPU (a netlink dump), so the periodic one is slow. Not on the detection path.
INVENTORY_REFRESH_S = 30.0


class Engine:
    """Owns the policy and the publisher; implements view.DaemonView for the API."""

    def __init__(self, settings: Settings, ifnames: Sequence[str], backups: Mapping[str, str],
                 monitors: Iterable[Monitor], clock: Callable[[], int] = time.monotonic_ns,
                 on_transition: Callable[[Transition, int], None] | None = None) -> None:
        self.settings = settings
        self.ifnames = list(ifnames)
        self.backups = dict(backups)
        self.monitors = list(monitors)
        self.clock = clock
        self.on_transition = on_transition
        self.policy = Policy(settings.policy_config(), self.ifnames, clock())
        self.inventory: dict[str, NicInfo] = {}
        self.counters: dict[str, dict[str, int]] = {n: {} for n in self.ifnames}
        self.history: collections.deque[EventView] = collections.deque(maxlen=HISTORY)
        self.subscribers: set[asyncio.Queue[EventView]] = set()
        self.writer: ShmWriter | None = None
        self.state = StateStore(settings.state_dir)
        self.last_heartbeat_ns = 0
        self.ready = asyncio.Event()
        self._deadline: asyncio.TimerHandle | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the shm file, run the monitors' initial scans, publish the first table."""
        saved = self.state.open()
        self.writer = ShmWriter(self.settings.shm_path, SHM_NIC_CAPACITY, SHM_RING_SLOTS,
                                first_seq=saved.next_seq)
        self.heartbeat()
        self._restore_drains(saved.drains)  # the first table published already has them
        await self.refresh_inventory()
        for monitor in self.monitors:
            await monitor.start(self.on_fact)
        self._publish(self.policy.settle(self.clock()), fact_ns=None, force=True)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeat_loop(), name="heartbeat"),
                       loop.create_task(self._inventory_loop(), name="inventory")]
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
        if self.writer:
            self.writer.close(unlink=True)
            self.writer = None
        self.state.close()

    async def reload(self, settings: Settings, ifnames: Sequence[str],
                     backups: Mapping[str, str], monitors: Iterable[Monitor]) -> None:
        """SIGHUP: new settings; NICs kept keep their state, epoch and flap damping."""
        for monitor in reversed(self.monitors):
            await monitor.stop()
        self.settings, self.ifnames, self.backups = settings, list(ifnames), dict(backups)
        for name in self.ifnames:
            self.counters.setdefault(name, {})
        now = self.clock()
        # Published before the monitors restart, so their facts land after it in epoch order.
        self._publish(self.policy.reconfigure(self.ifnames, settings.policy_config(), now),
                      fact_ns=None, force=True)
        await self.refresh_inventory()
        self.monitors = list(monitors)
        for monitor in self.monitors:
            await monitor.start(self.on_fact)
        self._publish(self.policy.settle(self.clock()), fact_ns=None, force=True)
        # New hold-down/damping settings move a RECOVERING NIC's deadline even when no state
        # changed (and _publish re-arms the timer only on a transition).
        self._schedule_deadline()

    # ---- facts -----------------------------------------------------------------------------
    def on_fact(self, fact: Fact) -> None:
        """FactSink for every monitor: decide and publish before returning."""
        now = self.clock()
        if isinstance(fact, CountersFact) and fact.ifname in self.counters:
            self.counters[fact.ifname].update(fact.counters)
        transitions = self.policy.apply(fact, now)
        force = isinstance(fact, (LinkRenamedFact, DomFact)) or (
            isinstance(fact, LinkFact) and self._link_info_changed(fact))
        self._publish(transitions, fact_ns=getattr(fact, "at_ns", None), force=force)
        if isinstance(fact, LinkFact) and fact.present and fact.ifname not in self.inventory:
            asyncio.get_running_loop().create_task(self.refresh_inventory())

    def _link_info_changed(self, fact: LinkFact) -> bool:
        info = self.inventory.get(fact.ifname)
        return info is None or info.ifindex != fact.ifindex

    def _on_deadline(self) -> None:
        self._deadline = None
        self._publish(self.policy.tick(self.clock()), fact_ns=None)
        self._schedule_deadline()  # also when the tick changed nothing (e.g. damping still on)

    def _schedule_deadline(self) -> None:
        when = self.policy.next_deadline_ns()
        if self._deadline:
            self._deadline.cancel()
            self._deadline = None
        if when is not None:
            delay = max(0.0, (when - self.clock()) / 1e9)
            self._deadline = asyncio.get_running_loop().call_later(delay, self._on_deadline)

    # ---- publishing ------------------------------------------------------------------------
    def _entries(self) -> list[NicEntry]:
        index = {name: i for i, name in enumerate(self.ifnames)}
        out = []
        for name in self.ifnames:
            rec = self.policy.records[name]
            info = self.inventory.get(name, NicInfo(name))
            link = rec.link
            backup = self.backups.get(name, "")
            out.append(NicEntry(
                name=name, state=int(rec.state), reason=int(rec.reason), epoch=rec.epoch,
                last_change_ns=rec.since_ns, backup_index=index.get(backup, -1),
                flags=_flags(link, info), ifindex=info.ifindex,
                speed_mbps=info.speed_mbps, ipv4=info.ipv4, ipv6=info.ipv6,
                rdma_dev=info.rdma_dev, rdma_port=info.rdma_port, pci_path=info.pci_path))
        return out

    def _publish(self, transitions: list[Transition], fact_ns: int | None,
                 force: bool = False) -> None:
        if self.writer is None:
            return
        if transitions or force:
            self.writer.publish_table(self._entries())
        index = {name: i for i, name in enumerate(self.ifnames)}
        for tr in transitions:
            detected_ns = max(0, tr.at_ns - fact_ns) if fact_ns else 0
            seq = self.writer.push_event(Event(
                time_ns=tr.at_ns, epoch=tr.epoch, fact_ns=fact_ns or tr.at_ns,
                nic_index=index.get(tr.ifname, 0xFFFFFFFF), old_state=int(tr.old),
                new_state=int(tr.new), reason=int(tr.reason), name=tr.ifname))
            self.state.issued(seq)
            view = EventView(seq, tr.ifname, int(tr.old), int(tr.new), int(tr.reason),
                             tr.detail, tr.epoch, self._unix_time(tr.at_ns), detected_ns)
            self.history.append(view)
            for queue in self.subscribers:
                queue.put_nowait(view)
            print(format_transition(view, self.settings.log_format), flush=True)
            if self.on_transition:
                self.on_transition(tr, detected_ns)
        if transitions:
            self._schedule_deadline()

    def heartbeat(self) -> None:
        if self.writer:
            self.last_heartbeat_ns = self.clock()
            self.writer.heartbeat(self.last_heartbeat_ns)

    async def _heartbeat_loop(self) -> None:
        period = self.settings.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(period)
            self.heartbeat()

    async def refresh_inventory(self) -> None:
        try:
            fresh = await asyncio.to_thread(read_inventory, self.ifnames,
                                            self.settings.sysfs_root, self.settings.netns)
        except OSError as exc:  # netns gone, netlink refused: keep what we had
            log.warning("inventory refresh failed: %s", exc)
            return
        if fresh != self.inventory:
            self.inventory = fresh
            self._publish([], fact_ns=None, force=True)

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
            backup=self.backups.get(name, ""), present=bool(link and link.present),
            carrier=bool(link and link.carrier), operstate=link.operstate if link else "UNKNOWN",
            speed_mbps=info.speed_mbps or None, epoch=rec.epoch,
            since_monotonic_ns=rec.since_ns, since_unix=self._unix_time(rec.since_ns),
            counters=counters,
            dom_status=dom.status if dom else "no_module",
            dom_warnings=dom.warnings if dom else (), dom_alarms=dom.alarms if dom else (),
            dom=dom.diagnostics if dom else None, rdma_device=info.rdma_dev,
            flap_penalty=self.policy.penalty(name, self.clock()),
            drain_reason=rec.drain_note if rec.drained else "")

    def events_since(self, seq: int) -> list[EventView]:
        return [e for e in self.history if e.seq > seq]

    def subscribe(self) -> asyncio.Queue[EventView]:
        queue: asyncio.Queue[EventView] = asyncio.Queue()
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[EventView]) -> None:
        self.subscribers.discard(queue)

    def drain(self, name: str, reason: str) -> NicView:
        """Raises UnknownNic; StateNotSaved once the drain is in effect but not on disk."""
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.drain(name, self.clock(), reason), fact_ns=None)
        self.state.set_drains(self._drains())
        return self.nic(name)

    def undrain(self, name: str) -> NicView:
        if name not in self.policy.records:
            raise UnknownNic(name)
        self._publish(self.policy.undrain(name, self.clock()), fact_ns=None)
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
        self._publish(transitions, fact_ns=None, force=True)

    def dump(self) -> dict[str, Any]:
        return {
            "settings": {f.name: _plain(getattr(self.settings, f.name))
                         for f in fields(self.settings)},
            "nics": [{**asdict(v), "state": NicState(v.state).name,
                      "reason": Reason(v.reason).name, "dom": None} for v in self.nics()],
            "backups": self.backups,
            "inventory": {k: asdict(v) for k, v in self.inventory.items()},
            "monitors": {k: asdict(v) for k, v in self.monitor_health().items()},
            "events": [asdict(e) for e in self.history],
        }

    def monitor_health(self) -> Mapping[str, MonitorHealth]:
        return {m.name: m.health for m in self.monitors}

    def heartbeat_age_s(self) -> float:
        return (self.clock() - self.last_heartbeat_ns) / 1e9 if self.last_heartbeat_ns else 0.0


def _flags(link: LinkFact | None, info: NicInfo) -> int:
    flags = LG_NIC_F_RDMA if info.rdma_dev else 0
    if link is not None and link.present:
        flags |= LG_NIC_F_PRESENT
        flags |= LG_NIC_F_CARRIER if link.carrier else 0
        flags |= LG_NIC_F_ADMIN_UP if link.admin_up else 0
    return flags


def _plain(value: Any) -> Any:
    """Settings values as JSON-serialisable data (mappings are read-only proxies)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value
