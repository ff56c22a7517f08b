"""`health --shm`: linkguardd's liveness from the heartbeat in its control file, not its API.

The daemon's loop stores CLOCK_MONOTONIC into the header every heartbeat_interval_ms
(exporters/shm.py): a fresh one is exactly "the loop runs". Reading it is a file read that no
other local user can saturate or block, unlike the read-only socket, whose connections any reader
can hold (issue 30): the Kubernetes liveness probe must not fail because a job did that.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass

from linkguard_cli.client import EXIT_UNREACHABLE, CliError
from linkguardd.shm.reader import ShmReader, ShmUnavailable

NO_HEARTBEAT = 0  # heartbeat_ns of a header whose writer never stored one


@dataclass(frozen=True)
class Heartbeat:
    pid: int  # the writer's, in its pid namespace (the probe runs in the daemon's container)
    heartbeat_ns: int
    now_ns: int  # CLOCK_MONOTONIC, read after the heartbeat

    @property
    def age_s(self) -> float:
        """Seconds since the heartbeat; negative only for another clock (a time namespace)."""
        return (self.now_ns - self.heartbeat_ns) / 1e9


def _unreachable(path: str, why: str) -> CliError:
    return CliError(f"cannot read linkguardd's heartbeat from {path}: {why}", EXIT_UNREACHABLE)


def _require_regular_file(path: str) -> None:
    """Says what the path is when it is no file at all (the C reader calls all of that ESYS).
    O_NONBLOCK: a FIFO planted at the path must not block the probe in open(2)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        hint = " (is linkguardd running? the path is its shm_path)"
        why = (e.strerror or str(e)) + (hint if e.errno == errno.ENOENT else "")
        raise _unreachable(path, why) from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISDIR(mode):
        raise _unreachable(path, "a directory, not linkguardd's control file")
    if not stat.S_ISREG(mode):
        raise _unreachable(path, "not a regular file (a FIFO, socket or device), not "
                                 "linkguardd's control file")


def read_heartbeat(path: str) -> Heartbeat:
    """The heartbeat of the daemon whose control file is `path`, validated by the plugin's own
    C reader (owner, size, magic, version, layout); CliError(EXIT_UNREACHABLE) otherwise."""
    _require_regular_file(path)
    try:
        reader = ShmReader(path)
    except ShmUnavailable as e:
        raise _unreachable(path, str(e).removeprefix(f"{path}: ")) from None
    with reader:
        pid = reader.header().daemon_pid
        beat = reader.heartbeat_ns()
        now = time.monotonic_ns()  # after the heartbeat: a live daemon's age is never negative
    return Heartbeat(pid, beat, now)


def verdict(beat: Heartbeat, max_age_s: float) -> str | None:
    """None when alive, else why not (the daemon counts as stalled)."""
    if beat.heartbeat_ns == NO_HEARTBEAT:
        return "no heartbeat written yet"
    age = beat.age_s
    if age < 0:
        return (f"heartbeat {-age:.3f} s in the future: not this host's CLOCK_MONOTONIC "
                "(another time namespace?)")
    if not age <= max_age_s:
        return f"heartbeat {age:.3f} s old (limit {max_age_s:g} s): its loop is stalled"
    return None


def who(beat: Heartbeat) -> str:
    return f"linkguardd pid {beat.pid}" if beat.pid else "linkguardd"
