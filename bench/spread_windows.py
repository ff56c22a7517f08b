"""Pure helpers of bench/spread.py: a driver's progress samples, the rate over a window of
them, and the ratios after/before per device (issue 28's goals)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# lg_nccl_driver's progress line (plugin/tools/driver_stream.h, drv_progress_line).
_PROGRESS = re.compile(r"^lg_nccl_driver: (?:progress|stopping|end) t=(?P<t>\d+\.\d+) .*"
                       r"received_bytes=(?P<rx>\d+)")

Sample = tuple[int, int]  # (CLOCK_MONOTONIC ns, bytes received and verified so far)


def progress_samples(lines: Iterable[str]) -> list[Sample]:
    """The (t_ns, received_bytes) of every progress line among `lines`, in order."""
    out = []
    for text in lines:
        if m := _PROGRESS.match(text):
            out.append((int(float(m["t"]) * 1e9), int(m["rx"])))
    return out


def window_rate(samples: Sequence[Sample], start_ns: int, end_ns: int) -> float | None:
    """Bytes per second between the first sample at or after `start_ns` and the last at or
    before `end_ns`; None when fewer than two samples fall in the window."""
    inside = [s for s in samples if start_ns <= s[0] <= end_ns]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return None
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) * 1e9 / (t1 - t0)


def ratios(before: Mapping[int, float | None], after: Mapping[int, float | None]
           ) -> dict[str, object]:
    """Per device after/before, the slowest device's ratio and the total's. A device with no
    rate in either window counts as ratio 0 (it did not move data we could see)."""
    if set(before) != set(after):
        raise ValueError(f"devices differ: before {sorted(before)}, after {sorted(after)}")
    per = {d: (after[d] or 0.0) / b if b else 0.0 for d, b in before.items()}
    total_before = sum(b or 0.0 for b in before.values())
    total_after = sum(a or 0.0 for a in after.values())
    return {"per_device": per, "slowest": min(per.values()) if per else 0.0,
            "total": total_after / total_before if total_before else 0.0}
