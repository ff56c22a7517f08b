"""bench.spread's arithmetic without a lab (no root): the driver's progress lines read as
samples, the rate over a window of them, and the after/before ratios of issue 28's goals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.spread_windows import progress_samples, ratios, window_rate

S = 1_000_000_000


def line(what: str, t: float, rx: int) -> str:
    return (f"lg_nccl_driver: {what} t={t:.6f} elapsed=1.000 sent_bytes=0 received_bytes={rx} "
            f"completions=0 max_gap_ms=0.000 stall_ms=0.000 corrupt=0")


def test_progress_lines_become_samples_and_the_rest_is_ignored() -> None:
    lines = [line("progress", 10.5, 100), "NCCL INFO something else", line("end", 11.0, 300),
             "lg_nccl_driver: connected t=9.000000"]
    assert progress_samples(lines) == [(10_500_000_000, 100), (11 * S, 300)]


def test_window_rate_uses_the_first_and_last_sample_inside() -> None:
    samples = [(0, 0), (1 * S, 10), (2 * S, 30), (3 * S, 60), (4 * S, 100)]
    assert window_rate(samples, 1 * S, 3 * S) == pytest.approx(25.0)  # (60 - 10) / 2 s
    assert window_rate(samples, S // 2, 10 * S) == pytest.approx(30.0)  # (100 - 10) / 3 s


def test_window_rate_needs_two_samples() -> None:
    samples = [(0, 0), (5 * S, 50)]
    assert window_rate(samples, 1 * S, 4 * S) is None
    assert window_rate(samples, 5 * S, 9 * S) is None
    assert window_rate([], 0, S) is None


def test_ratios_per_device_slowest_and_total() -> None:
    got = ratios({0: 100.0, 1: 100.0, 2: 200.0}, {0: 75.0, 1: 50.0, 2: 200.0})
    assert got["per_device"] == {0: 0.75, 1: 0.5, 2: 1.0}
    assert got["slowest"] == 0.5
    assert got["total"] == pytest.approx(325 / 400)


def test_a_device_without_a_rate_counts_as_zero() -> None:
    got = ratios({0: 100.0, 1: None}, {0: None, 1: 20.0})
    assert got["per_device"] == {0: 0.0, 1: 0.0}
    assert got["slowest"] == 0.0 and got["total"] == pytest.approx(0.2)


def test_different_devices_are_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match=r"before \[0, 1\], after \[0\]"):
        ratios({0: 1.0, 1: 1.0}, {0: 1.0})
