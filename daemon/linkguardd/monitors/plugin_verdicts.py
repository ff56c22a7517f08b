"""PluginVerdictMonitor: the unix datagram socket on which jobs' NCCL plugins report what they
judged about a NIC (plugin/src/daemon/verdict.h) and their connection census (plugin/src/daemon/census.h),
told apart by magic and turned into PluginVerdictFacts and PluginCensusFacts.

Who may send: anyone on the host (the socket is 0666, and pods reach it through their
read-only mount of /run/linkguard: connect/sendto on a socket needs no writable mount). So the
kernel says who sent each datagram (SO_PASSCRED: pid and uid, in the daemon's namespaces);
each kind has a token bucket per uid and one that all uids share, so neither kind starves the
other; every field is validated (verdicts/wire.py, census/wire.py), and a rejected datagram is
counted (a PluginVerdictRejectedFact or PluginCensusRejectedFact) and logged at most once a
minute. The loop never blocks on it: the socket is non-blocking and each wake-up reads a
bounded batch.

A flood costs the loop as little as a datagram can: while a kind's shared bucket is empty,
every datagram of that kind would be refused whoever sent it, so it is *shed* right after it is
read (its kind is its first four bytes): no credentials parsed, no decoding, no bucket of its
uid. A batch's shed datagrams reach the engine as one rejected fact with their count, and the
socket is not read again until that bucket has a token (SHED_PAUSE_MIN_S at least): a flood
keeps the queue full, so reading on would keep the loop busy (and, to the kernel's scheduler,
never idle) for datagrams it must refuse; the kernel refuses them instead (EAGAIN, up to
net.unix.max_dgram_qlen queued).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import socket
import stat
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from linkguardd.bind_dir import private_bind_dir
from linkguardd.census import wire as census_wire
from linkguardd.datagram import Rejected
from linkguardd.facts import Fact, PluginCensusRejectedFact, PluginVerdictRejectedFact
from linkguardd.monitors.base import FactSink, MonitorHealth
from linkguardd.verdicts import wire as verdict_wire

log = logging.getLogger(__name__)

BATCH = 64  # datagrams per wake-up, then the loop runs other work
# Per uid: one process per GPU reporting each (NIC, kind) at most once a second (the plugin's
# limit) is well under 64/s; a burst of 128 covers every rank reporting one fault at once.
RATE_PER_S = 64.0
BURST = 128.0
MAX_SENDERS = 1024  # uids with a bucket; the least recently seen goes first
# All uids together: a user with a subuid range (or a user-namespaced pod) can send as
# thousands of uids, so the per-uid buckets alone do not bound the sum. Four uids' worth.
GLOBAL_RATE_PER_S = 4 * RATE_PER_S
GLOBAL_BURST = 2 * BURST
# Census (plugin/src/daemon/census.h): each process sends at most 10 a second (LG_CENSUS_MIN_INTERVAL_MS), 1 a
# second while nothing changes; 8 GPUs' processes all changing during a failover is 80/s.
CENSUS_RATE_PER_S = 128.0
CENSUS_BURST = 256.0
CENSUS_GLOBAL_RATE_PER_S = 4 * CENSUS_RATE_PER_S
CENSUS_GLOBAL_BURST = 2 * CENSUS_BURST
REJECT_LOG_INTERVAL_S = 60.0
# A flood that empties a shared bucket is read at most this often: every wake-up of the loop
# waits for a CPU behind the flood's senders, so fewer is better, and the queue holds
# net.unix.max_dgram_qlen (10) datagrams a read: about the shared buckets' rates, 256 and 512/s.
SHED_PAUSE_MIN_S = 0.02
_CREDS = struct.Struct("iII")  # struct ucred: pid, uid, gid (socket(7) SCM_CREDENTIALS)
_READ_SIZE = max(verdict_wire.SIZE, census_wire.SIZE) + 1  # one more: a longer one is seen
_ANCILLARY_SIZE = socket.CMSG_SPACE(_CREDS.size)


class TokenBuckets:
    """A token bucket per uid (at most MAX_SENDERS, the least recently seen evicted) and one
    that all uids share: a user with a subuid range (or a user-namespaced pod) can send as
    thousands of uids, so the per-uid buckets alone do not bound the sum."""

    def __init__(self, rate_per_s: float, burst: float, global_rate_per_s: float,
                 global_burst: float) -> None:
        self.rate_per_s, self.burst = rate_per_s, burst
        self.global_rate_per_s, self.global_burst = global_rate_per_s, global_burst
        self._buckets: dict[int, tuple[float, int]] = {}  # uid -> (tokens, at_ns)
        self._global: tuple[float, int] | None = None  # every uid's datagrams: (tokens, at_ns)
        # Until then the shared bucket holds no whole token, so allow() refuses every uid.
        self.refusing_until_ns = 0

    def allow(self, uid: int, now: int) -> bool:
        """One token from the uid's bucket and one from the global one, or refused."""
        # A uid new to a full table may be one that was just evicted: it starts empty, so
        # cycling through more uids than the table holds wins no fresh bursts.
        start = 0.0 if len(self._buckets) >= MAX_SENDERS else self.burst
        tokens, at = self._buckets.pop(uid, (start, now))
        tokens = _refill(tokens, at, now, self.rate_per_s, self.burst)
        if len(self._buckets) >= MAX_SENDERS:
            del self._buckets[next(iter(self._buckets))]  # dict order: least recently seen
        shared = _refill(*(self._global or (self.global_burst, now)), now,
                         self.global_rate_per_s, self.global_burst)
        allowed = tokens >= 1 and shared >= 1
        self._buckets[uid] = (tokens - 1 if allowed else tokens, now)
        shared -= 1 if allowed else 0
        self._global = (shared, now)
        # _refill() reaches 1 token then: (1 - shared) tokens at global_rate_per_s
        self.refusing_until_ns = now + math.ceil((1 - shared) * 1e9 / self.global_rate_per_s) \
            if shared < 1 else 0
        return allowed

    def refusal(self, uid: int) -> str:
        return (f"uid {uid} sends more than {self.rate_per_s:g}/s, or all uids more than "
                f"{self.global_rate_per_s:g}/s")


@dataclass(frozen=True)
class _Kind:
    """One kind of datagram on the socket: how it is decoded, limited and counted."""

    name: str
    decode: Callable[[bytes, int, int, int], Fact]
    rejected: Callable[[str, int, int, int, int], Fact]  # reason, pid, uid, at_ns, count
    buckets: TokenBuckets


class PluginVerdictMonitor:
    """Monitor "plugin_verdicts"; `path` "" disables it (no socket)."""

    name = "plugin_verdicts"

    def __init__(self, path: str, interfaces: Sequence[str],
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = path
        self.interfaces = frozenset(interfaces)
        self.clock = clock
        self.health = MonitorHealth()
        self._sock: socket.socket | None = None
        self._sink: FactSink | None = None
        self._verdicts = _Kind("verdict", verdict_wire.decode, PluginVerdictRejectedFact,
                               TokenBuckets(RATE_PER_S, BURST, GLOBAL_RATE_PER_S, GLOBAL_BURST))
        self._census = _Kind("census", self._decode_census, PluginCensusRejectedFact,
                             TokenBuckets(CENSUS_RATE_PER_S, CENSUS_BURST,
                                          CENSUS_GLOBAL_RATE_PER_S, CENSUS_GLOBAL_BURST))
        self._unlogged: dict[str, int] = {}  # "kind reason" -> rejections since the last line
        self._resume: asyncio.TimerHandle | None = None  # set while a flood pauses reading
        self._logged_ns = 0

    async def start(self, sink: FactSink) -> None:
        self._sink = sink
        if not self.path:
            return
        try:
            self._sock = self._bind()
        except OSError as exc:  # no verdicts: failover never depends on them
            self.health.fail(f"{self.path}: {exc.strerror or exc}")
            log.error("plugin verdicts not received: cannot bind %s: %s", self.path,
                      exc.strerror or exc)
            return
        asyncio.get_running_loop().add_reader(self._sock.fileno(), self.read_batch)

    async def stop(self) -> None:
        sock, self._sock = self._sock, None
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if sock is None:
            return
        with contextlib.suppress(ValueError, RuntimeError):  # loop closing: nothing to remove
            asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _bind(self) -> socket.socket:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                raise OSError(0, "exists and is not a socket: not removing it")
            if _bound(self.path):  # a second daemon must not steal a live one's socket
                raise OSError(0, "another process receives verdicts there")
            os.unlink(self.path)  # a stale socket of an earlier daemon
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        bind_dir = private_bind_dir(self.path)  # chmod there, where nothing can be swapped in
        bound = os.path.join(bind_dir, "s")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK
                             | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(bound)
            os.chmod(bound, 0o666)  # any job's user may report; the kernel names the sender
            os.rename(bound, self.path)
        except OSError:
            sock.close()
            raise
        finally:
            shutil.rmtree(bind_dir, ignore_errors=True)
        return sock

    # ---- receiving -----------------------------------------------------------------------
    def read_batch(self) -> int:
        """Reads what is queued, at most BATCH datagrams; returns how many were read."""
        n = 0
        shed: dict[str, list[Any]] = {}  # kind -> [kind, count, the last one's ancillary, at]
        kind_of, clock = self._kind_of, self.clock
        while self._sock is not None and n < BATCH:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(_READ_SIZE, _ANCILLARY_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.health.fail(f"recvmsg: {exc}")
                break
            n += 1
            now = clock()
            datagram = kind_of(data)
            if now < datagram.buckets.refusing_until_ns and ancillary:
                entry = shed.get(datagram.name)
                if entry is None:
                    shed[datagram.name] = [datagram, 1, ancillary, now]
                else:
                    entry[1:] = entry[1] + 1, ancillary, now
                continue
            self._take(data, ancillary)
        for datagram, count, ancillary, now in shed.values():
            pid, uid = _sender(ancillary)
            exc = Rejected("rate_limited", datagram.buckets.refusal(uid))
            self._reject(datagram, exc, pid, uid, now, count)
        if shed:
            until = min(entry[0].buckets.refusing_until_ns for entry in shed.values())
            self._pause(max(until, self.clock() + int(SHED_PAUSE_MIN_S * 1e9)))
        return n

    @property
    def paused(self) -> bool:
        """Whether a flood has stopped the reading until a shared bucket has a token."""
        return self._resume is not None

    def _pause(self, until_ns: int) -> None:
        if self._sock is None or self._resume is not None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._sock.fileno())
        self._resume = loop.call_later(max(0.0, (until_ns - self.clock()) / 1e9), self.resume)

    def resume(self) -> None:
        """Read again (the pause's timer calls it)."""
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
            if self._sock is not None:
                asyncio.get_running_loop().add_reader(self._sock.fileno(), self.read_batch)

    def _take(self, data: bytes, ancillary: list[tuple[int, int, bytes]]) -> None:
        assert self._sink is not None
        now = self.clock()
        pid, uid = _sender(ancillary)
        datagram = self._kind_of(data)
        try:
            if uid < 0:
                raise Rejected("no_credentials", "the kernel gave no sender credentials")
            if not datagram.buckets.allow(uid, now):
                raise Rejected("rate_limited", datagram.buckets.refusal(uid))
            fact = datagram.decode(data, pid, uid, now)
            nic = getattr(fact, "ifname", None)
            if nic is not None and nic not in self.interfaces:
                raise Rejected("unknown_nic", f"{nic} is not a monitored NIC")
        except Rejected as exc:
            self._reject(datagram, exc, pid, uid, now)
            return
        self._sink(fact)

    def _kind_of(self, data: bytes) -> _Kind:
        return self._census if data[:4] == census_wire.MAGIC else self._verdicts

    def _reject(self, datagram: _Kind, exc: Rejected, pid: int, uid: int, now: int,
                count: int = 1) -> None:
        assert self._sink is not None
        self._sink(datagram.rejected(exc.reason, pid, uid, now, count))
        self._log_rejection(datagram.name, exc, pid, uid, now, count)

    def _decode_census(self, data: bytes, pid: int, uid: int, now: int) -> Fact:
        """A census, its lines of NICs not monitored left out (the rest of it is good)."""
        fact = census_wire.decode(data, pid, uid, now)
        return replace(fact, nics=tuple(n for n in fact.nics if n.ifname in self.interfaces))

    def _log_rejection(self, kind: str, exc: Rejected, pid: int, uid: int, now: int,
                       count: int = 1) -> None:
        key = f"{kind} {exc.reason}"
        self._unlogged[key] = self._unlogged.get(key, 0) + count
        if self._logged_ns and now - self._logged_ns < REJECT_LOG_INTERVAL_S * 1e9:
            return
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self._unlogged.items()))
        log.warning("plugin datagrams rejected (%s; at most one such line a minute); "
                    "the last, a %s from pid %d uid %d: %s", counts, kind, pid, uid, exc)
        self._unlogged.clear()
        self._logged_ns = now


def _sender(ancillary: list[tuple[int, int, bytes]]) -> tuple[int, int]:
    """(pid, uid) from SCM_CREDENTIALS; (-1, -1) when the kernel gave none."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and \
                len(payload) >= _CREDS.size:
            pid, uid, _ = _CREDS.unpack_from(payload)
            return pid, uid
    return -1, -1


def _refill(tokens: float, at_ns: int, now_ns: int, rate_per_s: float, burst: float) -> float:
    return min(burst, tokens + (now_ns - at_ns) / 1e9 * rate_per_s)


def _bound(path: str) -> bool:
    """Whether a live socket is bound at `path` (a stale file refuses connect())."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True
