"""DomMonitor: polls each NIC's optical module EEPROM and reports DomFacts.

The kernel sends no notification for module diagnostics (nic-monitoring.md §1.5), so this monitor
is a timer. Reads block (I2C behind netlink), so they run in worker threads, one per NIC, bounded
by `read_timeout_s`. A failed read (EPERM without CAP_NET_ADMIN, EIO, a missing namespace) emits
no fact: the previous condition stands and `health` says what failed. "No module" is a fact with
status "no_module" and a successful poll.

Latched flags: SFF-8636 and CMIS alarm/warning/LOS/fault flags latch in the module and are
cleared by the read that returns them, so the daemon is their only reader and a flag it read
exists nowhere else. Every read's flags go into that poll's DomFact (the policy sees each one),
and they are also OR-ed into a per-NIC set kept until `consume_flags()` takes it; `latest()`
shows the diagnostics with that set. Each DomFact also carries how many reads returned each
flag so far (linkguard_transceiver_flags_total). A human running `ethtool -m` on the same
module steals flags from us, and we from them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from linkguardd.dom.common import ModuleDiagnostics, UndecodableError
from linkguardd.dom.decode import decode
from linkguardd.dom.reader import ModuleEepromReader, NoModuleError, PageReader
from linkguardd.facts import DomFact
from linkguardd.monitors.base import FactSink, MonitorHealth
from linkguardd.monitors.polling import Polling

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Read:
    """One NIC's outcome of one poll; status "error" means the read failed (no fact)."""

    ifname: str
    at_ns: int
    status: str
    diagnostics: ModuleDiagnostics | None = None
    detail: str = ""


class DomMonitor:
    """Monitor "dom": one DomFact per configured NIC every `interval_s` seconds."""

    name = "dom"

    def __init__(
        self,
        interfaces: Sequence[str],
        netns: str | None = None,
        interval_s: float = 10.0,
        page_reader: PageReader | None = None,
        read_timeout_s: float = 5.0,
    ) -> None:
        if interval_s <= 0 or read_timeout_s <= 0:
            raise ValueError(f"interval_s and read_timeout_s must be > 0: {interval_s}, "
                             f"{read_timeout_s}")
        self.interfaces = tuple(interfaces)
        self.netns = netns
        self.interval_s = interval_s
        self.read_timeout_s = read_timeout_s
        self.health = MonitorHealth()
        self._reader: PageReader = page_reader or ModuleEepromReader()
        self._sink: FactSink | None = None
        self._polling = Polling(self.name, self.poll_once, interval_s, self.health)
        # A read can hang in the driver (firmware I2C access); it is never started twice.
        self._inflight: dict[str, asyncio.Future[_Read]] = {}
        self._latest: dict[str, ModuleDiagnostics] = {}
        self._seen: dict[str, set[str]] = {}  # flags read since the last consume_flags()
        self._flag_counts: dict[str, dict[str, int]] = {}  # reads returning each flag

    async def start(self, sink: FactSink) -> None:
        self._sink = sink
        await self.poll_once()
        self._polling.start()

    async def stop(self) -> None:
        await self._polling.stop()
        self._sink = None

    def latest(self, ifname: str) -> ModuleDiagnostics | None:
        """The last decoded diagnostics, flags = all seen since the last consume_flags()."""
        diagnostics = self._latest.get(ifname)
        if diagnostics is None:
            return None
        return dataclasses.replace(
            diagnostics, flags=frozenset(self._seen.get(ifname, ())) | diagnostics.flags
        )

    def consume_flags(self, ifname: str) -> frozenset[str]:
        """Take (and forget) the flags seen on `ifname` since the previous call."""
        return frozenset(self._seen.pop(ifname, ()))

    async def poll_once(self) -> None:
        """Read every NIC once (concurrently), then report in configuration order."""
        started = time.monotonic()
        reads = await asyncio.gather(*(self._read_bounded(ifname) for ifname in self.interfaces))
        errors = []
        for read in reads:
            if read.status == "error":
                errors.append(f"{read.ifname}: {read.detail}")
                continue  # nothing observed: keep the previous condition rather than guess
            self._record(read)
            if self._sink is not None:
                self._sink(self._fact(read))
        if errors:
            self.health.fail("; ".join(errors))
        else:
            self.health.success, self.health.last_error = True, ""
        self.health.last_duration_s = time.monotonic() - started

    async def _read_bounded(self, ifname: str) -> _Read:
        """The NIC's read, reusing one still in flight; a read past the timeout is a failure
        this poll, and its result is taken by a later poll when it finally completes."""
        future = self._inflight.get(ifname)
        if future is None:
            future = asyncio.ensure_future(asyncio.to_thread(self._read, ifname))
            self._inflight[ifname] = future
        try:
            read = await asyncio.wait_for(asyncio.shield(future), self.read_timeout_s)
        except TimeoutError:
            detail = f"module read still running after {self.read_timeout_s:g} s"
            return _Read(ifname, time.monotonic_ns(), "error", detail=detail)
        self._inflight.pop(ifname, None)
        return read

    def _read(self, ifname: str) -> _Read:
        """Worker thread: read and decode one module. Never raises."""
        try:
            pages = self._reader(ifname, self.netns)
        except NoModuleError as exc:  # a no-data result, not a failure
            return _Read(ifname, time.monotonic_ns(), "no_module", detail=exc.strerror or "")
        except UndecodableError as exc:
            return _Read(ifname, time.monotonic_ns(), "undecodable", detail=str(exc))
        except Exception as exc:  # noqa: BLE001 - EPERM, EIO, a missing netns...: a failed read
            detail = f"{type(exc).__name__}: {exc}"
            return _Read(ifname, time.monotonic_ns(), "error", detail=detail)
        at_ns = time.monotonic_ns()
        try:
            return _Read(ifname, at_ns, "ok", diagnostics=decode(pages))
        except UndecodableError as exc:
            return _Read(ifname, at_ns, "undecodable", detail=str(exc))
        except Exception as exc:
            log.exception("dom decoder failed on %s", ifname)
            return _Read(ifname, at_ns, "undecodable", detail=f"decoder error: {exc!r}")

    def _record(self, read: _Read) -> None:
        if read.diagnostics is None:
            self._latest.pop(read.ifname, None)
            return
        self._latest[read.ifname] = read.diagnostics
        if read.diagnostics.flags:
            self._seen.setdefault(read.ifname, set()).update(read.diagnostics.flags)
            counts = self._flag_counts.setdefault(read.ifname, {})
            for flag in read.diagnostics.flags:
                counts[flag] = counts.get(flag, 0) + 1

    def _fact(self, read: _Read) -> DomFact:
        diagnostics = read.diagnostics
        return DomFact(
            ifname=read.ifname,
            at_ns=read.at_ns,
            status=read.status,
            warnings=diagnostics.warnings() if diagnostics else (),
            alarms=diagnostics.alarms() if diagnostics else (),
            detail=read.detail,
            diagnostics=diagnostics,
            flags_seen=dict(self._flag_counts.get(read.ifname, {})),
        )
