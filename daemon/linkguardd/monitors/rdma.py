"""RDMA monitor: IB/RoCE ports from /sys/class/infiniband, port changes from verbs async events.

Formats are the kernel's (drivers/infiniband/core/sysfs.c; Documentation/ABI/stable/
sysfs-class-infiniband). Port state follows verbs events when a source exists (a child process
per device, see verbs_events.py); every `poll_interval_s` the tree is read again for devices
that came or went and, as the slow safety net when there are no verbs events, for port state.
Error counters are the rdma_counters monitor's. No /sys/class/infiniband is no data, not an
error.
"""
from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from linkguardd.facts import IbPortFact, VerbsEventFact
from linkguardd.monitors.base import FactSink, MonitorHealth
from linkguardd.monitors.polling import Polling
from linkguardd.monitors.verbs_events import ChildVerbsSource, VerbsEvent, VerbsSource

log = logging.getLogger(__name__)

UNKNOWN = "UNKNOWN"  # our word for an unreadable or unparsable state: never a kernel string
VERBS_RETRY_S = (1.0, 30.0)  # first and longest wait before restarting an ended event stream
PortKey = tuple[str, int]
PortReading = tuple[IbPortFact, list[str]]  # fact, errors


def parse_enum(text: str) -> tuple[int, str]:
    """'4: ACTIVE' -> (4, 'ACTIVE'): state ("%d: %s") and phys_state ("%u: %s")."""
    num, sep, name = text.strip().partition(":")
    if not sep or not name.strip():
        raise ValueError(f"expected 'N: NAME', got {text!r}")
    return int(num), name.strip()


def _line(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip() or None
    except OSError:  # ENOENT on removal; EINVAL for an empty GID entry
        return None


def rdma_devices(sysfs_root: Path) -> list[str]:
    try:
        return sorted(os.listdir(sysfs_root / "class/infiniband"))
    except FileNotFoundError:
        return []  # no RDMA on this host (or no ib_core): no data


def port_numbers(dev_dir: Path) -> list[int]:
    try:
        return sorted(int(p) for p in os.listdir(dev_dir / "ports") if p.isdigit())
    except FileNotFoundError:
        return []


def port_netdev(dev_dir: Path, port: int) -> str | None:
    """The netdev of an RDMA port, None if none is found."""
    # rxe/siw: `parent` is the netdev's name (drivers/infiniband/sw/rxe/rxe_verbs.c)
    if name := _line(dev_dir / "parent"):
        return name
    # RoCE: the netdev of the port's default GID (gid_attrs/ndevs/0; reads EINVAL on IB)
    if name := _line(dev_dir / "ports" / str(port) / "gid_attrs/ndevs/0"):
        return name
    # The PCI function's netdevs (IPoIB ibX on IB); with several, the one whose dev_port
    # (Documentation/ABI/testing/sysfs-class-net, 0-based) is this port.
    try:
        names = sorted(os.listdir(dev_dir / "device/net"))
    except OSError:
        return None
    if len(names) == 1:
        return names[0]
    return next((n for n in names if _line(dev_dir / "device/net" / n / "dev_port")
                 == str(port - 1)), None)


def read_port(sysfs_root: Path, dev: str, port: int) -> PortReading:
    """One port as the kernel shows it; errors name each file that could not be understood."""
    at_ns = time.monotonic_ns()  # before reading: orders readings that race (see _report)
    dev_dir = sysfs_root / "class/infiniband" / dev
    pdir = dev_dir / "ports" / str(port)
    errors: list[str] = []

    def enum(name: str) -> str:
        raw = _line(pdir / name)
        try:
            return parse_enum(raw or "")[1]
        except ValueError:
            errors.append(f"{dev}/{port} {name}: unreadable or unparsable {raw!r}")
            return UNKNOWN

    fact = IbPortFact(rdma_dev=dev, port=port, at_ns=at_ns, netdev=port_netdev(dev_dir, port),
                      state=enum("state"), phys_state=enum("phys_state"),
                      rate=_line(pdir / "rate") or "", link_layer=_line(pdir / "link_layer") or "")
    return fact, errors


def read_tree(sysfs_root: Path, devices: Iterable[str] | None = None) -> list[PortReading]:
    """Every port of `devices` (default: all). Blocking file I/O: run it in a thread."""
    return [read_port(sysfs_root, dev, port)
            for dev in (rdma_devices(sysfs_root) if devices is None else devices)
            for port in port_numbers(sysfs_root / "class/infiniband" / dev)]


def default_verbs_source() -> VerbsSource | None:
    """The child-process source when pyverbs is installed, else None (sysfs polling only)."""
    return ChildVerbsSource() if importlib.util.find_spec("pyverbs") is not None else None


class RdmaMonitor:
    """IbPortFact per watched port (at start, then on change), VerbsEventFact per verbs event
    followed by an IbPortFact of each port of that device. `interfaces` names netdevs or RDMA
    devices (None: every port). `verbs_source` None picks default_verbs_source()."""

    name = "rdma"

    def __init__(self, sysfs_root: str | Path = "/sys", interfaces: list[str] | None = None,
                 verbs_source: VerbsSource | None = None, poll_interval_s: float = 1.0) -> None:
        self.health = MonitorHealth()
        self._root = Path(sysfs_root)
        self._watch = frozenset(interfaces) if interfaces is not None else None
        self._source = verbs_source
        self._sink: FactSink = lambda fact: None
        self._ports: dict[PortKey, IbPortFact] = {}  # watched ports: the last reading reported
        self._polling = Polling(self.name, self._scan, poll_interval_s, self.health)
        self._tasks: dict[str, asyncio.Task[None]] = {}  # one verbs watcher per device

    def _watched(self, fact: IbPortFact) -> bool:
        return self._watch is None or fact.rdma_dev in self._watch or fact.netdev in self._watch

    async def start(self, sink: FactSink) -> None:
        self._sink = sink
        if self._source is None:
            self._source = default_verbs_source()
        await self._scan()
        if not self._ports:  # no child is started until a device appears (a later scan)
            log.info("rdma: no RDMA device under %s: idle until one appears",
                     self._root / "class/infiniband")
        elif self._source is None:
            log.info("rdma: no verbs events (pyverbs missing): port state read every %.1f s",
                     self._polling.interval_s)
        self._polling.start()

    async def stop(self) -> None:
        await self._polling.stop()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _scan(self) -> None:
        started = time.perf_counter()
        try:
            readings = await asyncio.to_thread(read_tree, self._root)
        except OSError as exc:  # e.g. EACCES on class/infiniband: keep what we know
            self.health.fail(f"rdma scan: {exc!r}")
            return
        errors: list[str] = []
        seen: set[PortKey] = set()
        for fact, errs in readings:
            if not self._watched(fact):
                continue
            seen.add((fact.rdma_dev, fact.port))
            errors += errs
            self._report(fact)
        for key in set(self._ports) - seen:  # device or port gone
            last = self._ports.pop(key)
            self._sink(replace(last, at_ns=time.monotonic_ns(), state="", phys_state="",
                               present=False))
        self._sync_watchers({dev for dev, _port in seen})
        self.health.last_duration_s = time.perf_counter() - started
        self.health.success = True
        if errors:
            self.health.fail("; ".join(errors[:3]))
            log.warning("rdma: %s", self.health.last_error)

    def _report(self, fact: IbPortFact, always: bool = False) -> None:
        """Emit a reading if it differs from the last one reported (or `always`), unless an
        overlapping read that started later was already reported."""
        last = self._ports.get((fact.rdma_dev, fact.port))
        if last is not None and (last.at_ns > fact.at_ns or
                                 (not always and replace(last, at_ns=fact.at_ns) == fact)):
            return
        self._ports[(fact.rdma_dev, fact.port)] = fact
        self._sink(fact)

    # --- verbs events ---------------------------------------------------------------------

    def _sync_watchers(self, devices: set[str]) -> None:
        if self._source is None:
            return
        for dev in set(self._tasks) - devices:
            self._tasks.pop(dev).cancel()
        loop = asyncio.get_running_loop()
        for dev in devices - set(self._tasks):
            self._tasks[dev] = loop.create_task(self._watch_verbs(dev))

    async def _watch_verbs(self, dev: str) -> None:
        assert self._source is not None
        first, longest = VERBS_RETRY_S
        backoff = first
        while True:
            events = self._source(dev)
            try:
                async for event in events:
                    backoff = first
                    await self._on_event(event)
            except Exception as exc:  # noqa: BLE001 - a broken source must not stop the monitor
                self.health.fail(f"verbs {dev}: {exc!r}")
            finally:
                await events.aclose()  # ends the child process now, not at garbage collection
            # The stream ended: no pyverbs, a dead device (DEVICE_FATAL) or a removed one.
            log.warning("rdma: verbs events of %s ended; retrying in %.0f s", dev, backoff)
            await self._reread(dev)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, longest)

    async def _on_event(self, event: VerbsEvent) -> None:
        now = time.monotonic_ns()
        ports = {p: f for (d, p), f in self._ports.items() if d == event.device}
        only = ports.get(event.port) if event.port is not None else (
            next(iter(ports.values())) if len(ports) == 1 else None)
        self._sink(VerbsEventFact(rdma_dev=event.device, event=event.event, at_ns=now,
                                  port=event.port, netdev=only.netdev if only else None))
        await self._reread(event.device)  # the event does not say which port: read them all

    async def _reread(self, dev: str) -> None:
        try:
            readings = await asyncio.to_thread(read_tree, self._root, [dev])
        except OSError as exc:  # the device is going away; the next scan reports it gone
            self.health.fail(f"rdma {dev}: {exc!r}")
            return
        for fact, _errors in readings:
            if self._watched(fact):
                self._report(fact, always=True)

