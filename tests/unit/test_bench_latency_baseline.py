"""bench.plugin_bw's latency baseline (issue 24, goal 3): a ratio more than 10 % worse than the
baseline's is named, one within 10 % is not."""

from bench import plugin_bw


def result(ratio_8: float, ratio_64k: float) -> dict:
    row = lambda size, r: {"size": size, "min": {"ratio": r}, "p50": {"ratio": r}}
    return {"rtt": {"table": [row(8, ratio_8), row(65536, ratio_64k)]}}


def test_rows_keep_the_ratios_per_size() -> None:
    assert plugin_bw.baseline_rows(result(1.5, 1.0)) == {
        "8": {"min": 1.5, "p50": 1.5}, "65536": {"min": 1.0, "p50": 1.0}}


def test_worse_by_more_than_ten_percent_is_named() -> None:
    base = {"commit": "abc1234", "date": "today",
            "sizes": plugin_bw.baseline_rows(result(1.5, 1.0))}
    text, worse = plugin_bw.against_baseline(result(1.5 * 1.05, 1.0 * 1.2), base)
    assert worse
    lines = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "WORSE" not in lines["8 B"]
    assert "WORSE by more than 10 % at min, p50" in lines["64 KiB"]
    assert "abc1234" in text


def test_within_ten_percent_is_ok() -> None:
    base = {"commit": "abc1234", "date": "today", "sizes": plugin_bw.baseline_rows(result(1.5, 1.0))}
    assert not plugin_bw.against_baseline(result(1.6, 0.9), base)[1]
