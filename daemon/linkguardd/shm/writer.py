"""ShmWriter: the daemon's side of the control channel, through the C writer.

Python packs whole entries into bytes and hands them to lg_shm_writer_update/push_event; it never
writes the mapping itself, because the seqlock and the ring need C11 release ordering (plain
stores from Python would be reordered on aarch64).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from linkguardd.shm.layout import (
    LG_SHM_DEFAULT_PATH,
    LG_SHM_MAX_NICS,
    Event,
    NicEntry,
)
from linkguardd.shm.native import lib


def _ensure_directory(path: str) -> None:
    """The control file's directory, made 0755 when missing (systemd's RuntimeDirectory= makes
    it otherwise). An existing one is left as it is: the plugin judges the file, not the
    directory, and a file planted there cannot take the daemon's rename target."""
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o755, exist_ok=True)


class ShmWriter:
    """Creates the control file (tmp + rename, mode 0644) and publishes into it.

    Thread-safe: ctypes releases the GIL during the C calls, so one lock serialises table
    updates, events and close (the C writer is single-producer). heartbeat() needs no lock
    against them (it writes only its own word) but must not race close().
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = LG_SHM_DEFAULT_PATH,
        nic_capacity: int = LG_SHM_MAX_NICS,
        ring_slots: int = 1024,
        first_seq: int = 1,
    ) -> None:
        self.path = os.fspath(path)
        self.nic_capacity = nic_capacity
        self.ring_slots = ring_slots
        self._lock = threading.Lock()
        _ensure_directory(os.path.dirname(self.path) or ".")
        err = ctypes.c_int(0)
        handle = lib().lg_shm_writer_create(
            self.path.encode(), nic_capacity, ring_slots, first_seq, ctypes.byref(err)
        )
        if not handle:
            raise OSError(err.value, f"cannot create {self.path}: {os.strerror(err.value)}")
        self._w: int | None = handle

    def _handle(self) -> int:
        if self._w is None:
            raise ValueError(f"{self.path}: writer is closed")
        return self._w

    def publish_table(self, entries: Sequence[NicEntry]) -> int:
        """Replaces the whole table under the seqlock; returns the new (even) generation."""
        if len(entries) > self.nic_capacity:
            raise ValueError(f"{len(entries)} NICs, capacity {self.nic_capacity}")
        data = b"".join(e.pack() for e in entries)  # validates every entry before any write
        with self._lock:
            generation: int = lib().lg_shm_writer_update(self._handle(), data, len(entries))
        if generation == 0:  # only when count > capacity, checked above
            raise ValueError("lg_shm_writer_update refused the table")
        return generation

    def push_event(self, event: Event) -> int:
        """Appends one event to the ring; returns its sequence number."""
        data = event.pack()
        with self._lock:
            seq: int = lib().lg_shm_writer_push_event(self._handle(), data)
        return seq

    def heartbeat(self, now_ns: int = 0) -> None:
        """Stores CLOCK_MONOTONIC ns (0: the C side reads the clock) as the heartbeat."""
        lib().lg_shm_writer_heartbeat(self._handle(), now_ns)

    def close(self, unlink: bool = True) -> None:
        """Unmaps; with unlink, removes the file unless a newer daemon has replaced it."""
        with self._lock:
            if self._w is None:
                return
            handle, self._w = self._w, None
            lib().lg_shm_writer_close(handle, int(unlink))

    @property
    def closed(self) -> bool:
        return self._w is None

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
        # A forgotten writer must not leak its mapping; keep the file (the daemon may be exiting
        # on purpose without a clean shutdown, and readers judge it by the heartbeat).
        if getattr(self, "_w", None) is not None:
            # interpreter shutdown may have torn down ctypes already
            with contextlib.suppress(Exception):
                self.close(unlink=False)
