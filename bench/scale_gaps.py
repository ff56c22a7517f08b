"""Per-connection traffic gaps in time windows, from lg_nccl_driver's gap files.

A connection has two ends (the sender's send comm, the receiver's recv comm, each in its own
driver process); its gap in a window is the longest interval between two consecutive
completions of either end that overlaps the window. A gap file (--gap-file) lists every gap
of at least the driver's --gap-list-ms as "comm start_ns end_ns open", one a line, uncapped:
it is read line by line, so a long run's millions of gaps need no memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ConnKey = tuple[int, int]  # (driver pair, connection index in it)


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    # A control window counts only gaps that ended before the fault (a gap the fault made
    # is the fault's, even where it began in the control stretch).
    ends_by_ns: int | None = None

    def takes(self, start_ns: int, end_ns: int) -> bool:
        if self.ends_by_ns is not None and end_ns > self.ends_by_ns:
            return False
        return start_ns <= self.end_ns and end_ns >= self.start_ns


def comm_conns(report: Mapping[str, Any]) -> dict[int, int]:
    """comm index -> connection index, from a driver report's "comms"."""
    return {int(c["comm"]): int(c["conn"]) for c in report.get("comms", [])}


def window_maxima(sources: Iterable[tuple[int, Path, Mapping[int, int]]],
                  windows: list[Window]) -> list[dict[ConnKey, float]]:
    """For each window, (pair, conn) -> its longest overlapping gap in ms, over gap files
    given as (pair, path, comm -> conn). Connections without a listed gap are absent."""
    out: list[dict[ConnKey, float]] = [{} for _ in windows]
    for pair, path, conns in sources:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                comm, s, e = int(parts[0]), int(parts[1]), int(parts[2])
                key = (pair, conns.get(comm, comm))
                ms = (e - s) / 1e6
                for w, best in zip(windows, out, strict=True):
                    if w.takes(s, e) and ms > best.get(key, 0.0):
                        best[key] = ms
    return out


def per_connection(maxima: Mapping[ConnKey, float], conns: Iterable[ConnKey],
                   floor_ms: float) -> list[float]:
    """One value per connection: its longest gap, or `floor_ms` (the shortest gap the driver
    lists) when none was listed."""
    return [max(maxima.get(k, floor_ms), floor_ms) for k in conns]
