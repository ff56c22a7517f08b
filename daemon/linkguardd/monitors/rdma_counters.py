"""RDMA error-counter monitor: every port's PMA error counters and the driver's transport
counters from /sys/class/infiniband, sampled every `poll_interval_s` (CountersFact, source
"rdma"). Raw cumulative values only; the policy turns them into rates.

Files and formats are the kernel's (drivers/infiniband/core/sysfs.c; Documentation/ABI/stable/
sysfs-class-infiniband): ports/<p>/counters/<name> is a PMA PortCounters field (IBA 16.1.3.5),
decimal, or "N/A (no PMA)"; ports/<p>/hw_counters/<name> is the driver's rdma_hw_stats,
"%llu\\n". A counter a device does not have is simply not read: not every NIC has every counter.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from linkguardd.facts import CountersFact
from linkguardd.monitors.base import FactSink, MonitorHealth
from linkguardd.monitors.polling import Polling
from linkguardd.monitors.rdma import port_netdev, port_numbers, rdma_devices

log = logging.getLogger(__name__)

# PMA PortCounters error fields (ports/<p>/counters/) and their width in bits (IBA 16.1.3.5,
# the PORT_PMA_ATTR table of sysfs.c). They stop at their maximum instead of wrapping.
PMA_COUNTERS: dict[str, int] = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_xmit_discards": 16, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
}
# Transport counters of the port's default counter set (ports/<p>/hw_counters/), as mlx5 names
# them (drivers/infiniband/hw/mlx5/counters.c, q counters: 32-bit in firmware, so they wrap).
HW_COUNTERS = ("out_of_sequence", "packet_seq_err", "duplicate_request", "local_ack_timeout_err",
               "rnr_nak_retry_err")
ERROR_COUNTERS = tuple(PMA_COUNTERS) + HW_COUNTERS
NO_PMA = "N/A (no PMA)"  # what a PMA counter reads on a device without a PMA
U64_MAX = 2**64 - 1  # every kernel counter is a u64: anything larger is not one
MAX_READ = 64  # bytes: a u64 in decimal is 20; a sysfs attribute is at most a page
SAID_MAX = 256
PortCounters = tuple[str, int, str | None, dict[str, int], list[str]]  # dev, port, netdev, ...


def parse_counter(text: str) -> int | None:
    """A counter file's content: a decimal u64, or None for "N/A (no PMA)"."""
    text = text.strip()
    if text == NO_PMA:
        return None
    if not text.isdigit() or not text.isascii():  # int() would also take "+1", "1_0", " 1"
        raise ValueError(f"not a decimal counter: {text[:24]!r}")
    value = int(text)
    if value > U64_MAX:
        raise ValueError(f"larger than a u64 counter: {text[:24]}...")
    return value


def read_counters(pdir: Path, errors: list[str]) -> dict[str, int]:
    """The error counters of one port directory present on this device; each file that cannot be
    understood adds an error naming it."""
    values: dict[str, int] = {}
    for sub, names in (("counters", PMA_COUNTERS), ("hw_counters", HW_COUNTERS)):
        for name in names:
            path = pdir / sub / name
            try:
                with open(path, "rb") as f:
                    raw = f.read(MAX_READ + 1)
            except OSError:
                continue  # no such counter on this device (ENOENT), or it vanished
            try:
                if len(raw) > MAX_READ:
                    raise ValueError(f"more than {MAX_READ} bytes")
                if (value := parse_counter(raw.decode("ascii", "replace"))) is not None:
                    values[name] = value
            except ValueError as exc:
                errors.append(f"{path}: unparsable counter ({exc})")
    return values


def read_all(sysfs_root: Path, devices: Iterable[str] | None = None) -> list[PortCounters]:
    """(device, port, netdev, counters, errors) of every port. Blocking: run it in a thread."""
    out: list[PortCounters] = []
    for dev in rdma_devices(sysfs_root) if devices is None else devices:
        dev_dir = sysfs_root / "class/infiniband" / dev
        for port in port_numbers(dev_dir):
            errors: list[str] = []
            values = read_counters(dev_dir / "ports" / str(port), errors)
            out.append((dev, port, port_netdev(dev_dir, port), values, errors))
    return out


def saturated(values: dict[str, int]) -> list[str]:
    """PMA counters stuck at their maximum: their increases are no longer visible."""
    return [n for n, v in values.items() if n in PMA_COUNTERS and v == 2**PMA_COUNTERS[n] - 1]


class RdmaCountersMonitor:
    """CountersFact(source="rdma") per watched port every poll. `interfaces` names netdevs or
    RDMA devices (None: every port). A sample's ifname is the port's netdev, or "<dev>/<port>"
    when it has none. No /sys/class/infiniband is no data, not an error."""

    name = "rdma_counters"

    def __init__(self, sysfs_root: str | Path = "/sys", interfaces: list[str] | None = None,
                 poll_interval_s: float = 1.0) -> None:
        self.health = MonitorHealth()
        self._root = Path(sysfs_root)
        self._watch = frozenset(interfaces) if interfaces is not None else None
        self._sink: FactSink = lambda fact: None
        self._polling = Polling(self.name, self.poll_once, poll_interval_s, self.health)
        self._said: set[str] = set()  # problems already logged (one line each, not one a poll)

    async def start(self, sink: FactSink) -> None:
        self._sink = sink
        await self.poll_once()
        self._polling.start()

    async def stop(self) -> None:
        await self._polling.stop()

    async def poll_once(self) -> None:
        started = time.perf_counter()
        try:
            ports = await asyncio.to_thread(read_all, self._root)
        except OSError as exc:  # e.g. EACCES on class/infiniband
            self.health.fail(f"rdma_counters: {exc!r}")
            return
        at_ns = time.monotonic_ns()
        errors: list[str] = []
        for dev, port, netdev, values, errs in ports:
            if self._watch is not None and dev not in self._watch and netdev not in self._watch:
                continue
            errors += errs
            for name in saturated(values):
                self._say(f"{dev}/{port} counters/{name} is at its maximum "
                          f"({values[name]}): new errors no longer show; clear it with "
                          f"`perfquery -R`")
            if values:
                self._sink(CountersFact(ifname=netdev or f"{dev}/{port}", at_ns=at_ns,
                                        counters=values, source="rdma"))
        self.health.last_duration_s = time.perf_counter() - started
        self.health.success, self.health.last_error = True, ""
        if errors:
            self.health.fail("; ".join(errors[:3]))
            for error in errors:
                self._say(error)

    def _say(self, problem: str) -> None:
        if problem not in self._said:
            if len(self._said) >= SAID_MAX:  # content that changes every poll: start over
                self._said.clear()
            self._said.add(problem)
            log.warning("rdma_counters: %s", problem)

