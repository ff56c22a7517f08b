"""ShmReader: reads the control channel through the same C reader the plugin uses.

Used by `linkguard-cli health --shm` (the heartbeat, for liveness probes) and by tests to check
what the plugin would see. Every "no daemon" condition of the C reader (missing, short, garbage,
wrong magic, newer major version, inconsistent layout) is a ShmUnavailable carrying its status.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from types import TracebackType
from typing import Self

from linkguardd.shm.layout import (
    HEADER_OFFSETS,
    LG_SHM_DEFAULT_PATH,
    LG_SHM_EVENT_SIZE,
    LG_SHM_HEADER_SIZE,
    LG_SHM_NIC_SIZE,
    LG_SHM_PATH_ENV,
    Event,
    HeaderInfo,
    NicEntry,
    ShmStatus,
)
from linkguardd.shm.native import LgShmReader, LgShmSnapshot, lib, strerror

_EVENT_BATCH = 256
# EBUSY is a try-result: the writer was preempted mid-update (likely on a loaded 2-core machine).
# Python callers are not latency-bound, so retry for up to ~100 ms before calling it "no daemon".
_BUSY_RETRIES = 100
_BUSY_SLEEP_S = 0.001


class ShmUnavailable(Exception):
    """The control channel cannot be used ("no daemon"); `status` is the C reader's status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        try:
            self.status: ShmStatus | int = ShmStatus(status)
        except ValueError:
            self.status = status
        self.message = message


def _resolve(path: str | os.PathLike[str] | None) -> str:
    """The path the C reader will use for `path` (same rule: argument, $LINKGUARD_SHM, default)."""
    if path is not None:
        return os.fspath(path)
    return os.environ.get(LG_SHM_PATH_ENV) or LG_SHM_DEFAULT_PATH


class ShmReader:
    """A read-only mapping of the control file, validated once at open."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = _resolve(path)
        self._lock = threading.Lock()
        self._r = LgShmReader()
        self._snap = LgShmSnapshot()
        self._seen_generation = -1
        status = lib().lg_shm_reader_open(ctypes.byref(self._r), self.path.encode())
        if status != ShmStatus.OK:
            raise ShmUnavailable(status, f"{self.path}: {strerror(status)}")
        self._open = True

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> ShmReader:
        return cls(path)

    def _ref(self) -> object:  # a ctypes byref() of the C reader
        if not self._open:
            raise ValueError(f"{self.path}: reader is closed")
        return ctypes.byref(self._r)

    def snapshot(self) -> tuple[int, list[NicEntry]]:
        """(generation, entries), consistent and sanitized by the C reader. Raises
        ShmUnavailable(EBUSY) only if the writer stays mid-update (it died there)."""
        with self._lock:
            for attempt in range(_BUSY_RETRIES):
                if attempt:
                    time.sleep(_BUSY_SLEEP_S)
                status = lib().lg_shm_snapshot_read(self._ref(), ctypes.byref(self._snap))
                if status != ShmStatus.EBUSY:
                    break
            if status != ShmStatus.OK:
                raise ShmUnavailable(status, f"{self.path}: {strerror(status)}")
            generation = int(self._snap.generation)
            raw = bytes(self._snap.nics)[: self._snap.nic_count * LG_SHM_NIC_SIZE]
            self._seen_generation = generation
        step = LG_SHM_NIC_SIZE
        count = len(raw) // step
        entries = [NicEntry.unpack(raw[i * step : (i + 1) * step], i, count)
                   for i in range(count)]
        return generation, entries

    def events_since(self, cursor: int) -> tuple[list[Event], int, bool]:
        """Every event after `cursor` now in the ring: (events, new cursor, lapped).

        lapped means events were lost (or the cursor came from another daemon): take a snapshot.
        Start a cursor at ring_head().
        """
        buf = (ctypes.c_uint8 * (LG_SHM_EVENT_SIZE * _EVENT_BATCH))()
        cur = ctypes.c_uint64(cursor)
        lapped_c = ctypes.c_int(0)
        events: list[Event] = []
        lapped = False
        with self._lock:
            ref = self._ref()
            slots = self._r.ring_mask + 1
            # Bounded like the C loop: at most a ring's worth plus what arrives meanwhile.
            for _ in range(slots // _EVENT_BATCH + 2):
                n = lib().lg_shm_events_read(ref, ctypes.byref(cur), buf, _EVENT_BATCH,
                                             ctypes.byref(lapped_c))
                lapped = lapped or bool(lapped_c.value)
                raw = bytes(buf)
                events.extend(
                    Event.unpack(raw[i * LG_SHM_EVENT_SIZE : (i + 1) * LG_SHM_EVENT_SIZE])
                    for i in range(n)
                )
                if n < _EVENT_BATCH:
                    break
        return events, int(cur.value), lapped

    def ring_head(self) -> int:
        with self._lock:
            return int(lib().lg_shm_ring_head(self._ref()))

    def generation(self) -> int:
        with self._lock:
            return int(lib().lg_shm_generation(self._ref()))

    def changed(self) -> bool:
        """True when the table changed since the last changed() or snapshot() (first call: True)."""
        generation = self.generation()
        if generation == self._seen_generation:
            return False
        self._seen_generation = generation
        return True

    def alive(self, timeout_ns: int = 1_000_000_000, now_ns: int | None = None) -> bool:
        """The heartbeat is within timeout_ns of now (CLOCK_MONOTONIC, as the daemon writes it)."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            return bool(lib().lg_shm_alive(self._ref(), now, timeout_ns) == ShmStatus.OK)

    def heartbeat_ns(self) -> int:
        """The daemon's last heartbeat, CLOCK_MONOTONIC ns (0: none): one aligned 8-byte load,
        which cannot tear against the writer's store, unlike a copy of the whole header."""
        with self._lock:
            self._ref()
            word = ctypes.c_uint64.from_address(self._r.hdr + HEADER_OFFSETS["heartbeat_ns"][0])
            return int(word.value)

    def replaced(self) -> bool:
        """The path now names another file than the mapped one (the daemon restarted)."""
        with self._lock:
            return bool(lib().lg_shm_replaced(self._ref(), self.path.encode()))

    def header(self) -> HeaderInfo:
        """The daemon's identity and counters. The hot words are plain reads here: fine for
        display, not a consistent snapshot (use snapshot() for the table)."""
        with self._lock:
            self._ref()
            raw = ctypes.string_at(self._r.hdr, LG_SHM_HEADER_SIZE)
        return HeaderInfo.unpack(raw)

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                lib().lg_shm_reader_close(ctypes.byref(self._r))

    @property
    def closed(self) -> bool:
        return not self._open

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_open", False):
            # interpreter shutdown may have torn down ctypes already
            with contextlib.suppress(Exception):
                self.close()
