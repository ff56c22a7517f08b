"""What survives a daemon restart: operator drains and the event sequence, in one JSON file.

<state_dir>/state.json (systemd StateDirectory=linkguard: /var/lib/linkguard):
  {"format": 1, "next_seq": 1061, "drains": {"rail1": {"reason": "swap optic",
                                                        "since_unix": 1764578000.0}}}
Written atomically: a temporary file in the same directory, fsync, rename over the old one,
fsync of the directory, so a crash leaves the old file or the new one, never a torn one.

The file steers what the daemon publishes, so it is trusted only in a directory no one but the
daemon's user can write (state_dir_problem, checked at start): the temporary file is made with
O_EXCL under a random name (mkstemp), the file is opened without following a symbolic link or
waiting on a FIFO and must be a regular file, and what it holds is checked as the API checks
an operator's drain.

Sequence numbers are monotonic across restarts, so `watch --since N` from before a restart
still means the same events. Writing the head on every event would put an fsync on every
transition, so numbers are reserved in blocks: the file holds a number no event has used yet
(`next_seq`), moved SEQ_RESERVE ahead whenever the events reach it. A clean stop writes the
exact next number; after a crash the next run skips at most SEQ_RESERVE numbers, never reuses one.
"""
from __future__ import annotations

import json
import logging
import math
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from linkguardd.validate import drain_reason_problem, nic_name_problem

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
FORMAT = 1
SEQ_RESERVE = 1024  # one fsync per 1024 transitions; a crash skips at most this many numbers
MAX_BYTES = 1 << 20  # far above any real file (a few hundred bytes a drain)


class StateFileError(Exception):
    """The state file exists but cannot be used (the message says why)."""


class StateNotSaved(OSError):
    """A change is in effect but could not be written: it will not survive a restart."""


@dataclass(frozen=True)
class SavedDrain:
    reason: str
    since_unix: float


@dataclass(frozen=True)
class SavedState:
    next_seq: int = 1
    drains: Mapping[str, SavedDrain] = field(default_factory=dict)


def state_dir_problem(state_dir: str) -> str:
    """Why `state_dir` must not hold the state file ('' when it may, or does not exist yet)."""
    if not state_dir:
        return ""
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        return ""  # created 0755 by the daemon at the first save
    except OSError as exc:
        return f"state_dir {state_dir}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"state_dir {state_dir} is not a directory"
    fix = f"chown {os.geteuid()} {state_dir} && chmod go-w {state_dir}, or set another state_dir"
    if st.st_uid != os.geteuid():
        return (f"state_dir {state_dir} is owned by uid {st.st_uid}, not by the daemon's "
                f"uid {os.geteuid()}: its owner could plant drains; {fix}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"state_dir {state_dir} is writable by its group or others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): they could plant drains or replace the "
                f"file; {fix}")
    return ""


def load(path: Path) -> SavedState:
    """The saved state; an absent file is a fresh host. Raises StateFileError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return SavedState()
    except OSError as exc:
        if os.path.islink(path):
            raise StateFileError("it is a symbolic link (never followed)") from None
        raise StateFileError(f"cannot read it: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StateFileError("it is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise StateFileError(f"it is larger than {MAX_BYTES} bytes")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateFileError(f"cannot read it: {exc}") from None
    finally:
        os.close(fd)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateFileError(f"not JSON: {exc}") from None
    return _parse(data)


def _parse(data: object) -> SavedState:
    if not isinstance(data, dict):
        raise StateFileError("not a JSON object")
    if data.get("format") != FORMAT:
        raise StateFileError(f"format {data.get('format')!r}, this linkguardd reads {FORMAT}")
    next_seq, drains = data.get("next_seq"), data.get("drains")
    if not isinstance(next_seq, int) or isinstance(next_seq, bool) or not 1 <= next_seq < 2**63:
        raise StateFileError(f"next_seq must be a positive integer, got {next_seq!r}")
    if not isinstance(drains, dict):
        raise StateFileError(f"drains must be an object, got {type(drains).__name__}")
    out = {}
    for nic, entry in drains.items():
        reason = entry.get("reason") if isinstance(entry, dict) else None
        since = entry.get("since_unix") if isinstance(entry, dict) else None
        if not isinstance(reason, str) or not isinstance(since, (int, float)) \
                or isinstance(since, bool) or not math.isfinite(since):
            raise StateFileError(f"drain of {nic!r}: expected {{reason, since_unix}}, "
                                 f"got {entry!r}")
        problem = nic_name_problem(nic) or drain_reason_problem(reason)
        if problem:
            raise StateFileError(f"drain of {nic!r}: {problem}")
        out[nic] = SavedDrain(reason, float(since))
    return SavedState(next_seq, out)


def save(path: Path, state: SavedState) -> None:
    """Atomically replace `path` (tmp + fsync + rename + directory fsync); raises OSError."""
    data = {"format": FORMAT, "next_seq": state.next_seq,
            "drains": {n: {"reason": d.reason, "since_unix": d.since_unix}
                       for n, d in sorted(state.drains.items())}}
    # O_EXCL under a name no one can guess: nothing planted in the directory is followed
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)  # readable as before (mkstemp makes it 0600)
            json.dump(data, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)  # replaces a symbolic link itself, never its target
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)  # the rename itself is durable only once the directory is
    finally:
        os.close(fd)


class StateStore:
    """The daemon's handle on its state file; state_dir "" keeps everything in memory only.

    open() once at start; issued(seq) after each event; set_drains() after each drain change;
    close() at a clean stop. Failures to write are logged (and raised by set_drains, so the
    API can tell the operator); the daemon never stops over its state file.
    """

    def __init__(self, state_dir: str) -> None:
        self.path = Path(state_dir) / STATE_FILE if state_dir else None
        self.last_seq = 0  # the newest event number issued
        self._reserved = 1  # no event number >= this has been issued or may be without a save
        self._drains: dict[str, SavedDrain] = {}

    def open(self) -> SavedState:
        """Load (a corrupt file is set aside and logged), then reserve the numbers to come."""
        saved = SavedState()
        if self.path is None:
            log.info("state: state_dir is empty: drains will not survive a restart")
            return saved
        try:
            saved = load(self.path)
        except StateFileError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            try:
                os.rename(self.path, aside)
                kept = f"kept as {aside}"
            except OSError as err:
                kept = f"could not be set aside ({err})"
            log.error("state: %s is unusable (%s): starting without saved drains (every NIC "
                      "follows its link) and numbering events from #1; the file %s",
                      self.path, exc, kept)
        self._drains = dict(saved.drains)
        self.last_seq = saved.next_seq - 1
        self._reserve(saved.next_seq + SEQ_RESERVE)
        return saved

    def issued(self, seq: int) -> None:
        self.last_seq = seq
        if seq + 1 >= self._reserved:
            self._reserve(seq + 1 + SEQ_RESERVE)

    def set_drains(self, drains: Mapping[str, str]) -> None:
        """Record the drains in effect (NIC -> reason); raises StateNotSaved."""
        now = time.time()
        fresh = {n: self._drains[n] if n in self._drains and self._drains[n].reason == r
                 else SavedDrain(r, now) for n, r in drains.items()}
        if fresh == self._drains:
            return
        self._drains = fresh
        problem = self._write(self._reserved)
        if problem:
            raise StateNotSaved(problem)

    def close(self) -> None:
        """A clean stop: the next run continues right after the last event."""
        self._write(self.last_seq + 1)

    def _reserve(self, upto: int) -> None:
        self._reserved = upto
        self._write(upto)

    def _write(self, next_seq: int) -> str:
        """'' when saved, else what went wrong (already logged)."""
        if self.path is None:
            return ""
        try:
            self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            save(self.path, SavedState(next_seq, self._drains))
        except OSError as exc:
            problem = f"cannot write {self.path}: {exc.strerror or exc}"
            log.error("state: %s; drains and event numbers will not survive a restart", problem)
            return problem
        return ""
