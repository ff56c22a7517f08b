"""Round-trip latency (bench/rtt.py, issue #13): parsing a ping-pong report, the variants'
alternation, per-trial ratios and medians, the goal's verdict; and both ping-pong tools over
loopback (no root): lg_nccl_driver --pingpong through a plugin and lg_tcp_pingpong, each
checking the payload (a flipped byte is caught), and the TCP tool's argument errors."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import rtt
from bench.plugin_driver import LGTCP_SO, build_plugin, free_port, local_starter


def report(mn: float, p50: float, p99: float, n: int = 100) -> dict:
    return {"ok": True, "rtt_us": {"n": n, "warmup": 10, "min": mn, "p50": p50, "p99": p99,
                                   "mean": p50, "max": p99 * 2}}


# --- parsing and statistics -----------------------------------------------------------------

def test_rtt_summary_keeps_the_quantiles_and_checks_the_count() -> None:
    got = rtt.rtt_summary(report(10, 12, 30), count=100)
    assert got == {"min": 10.0, "p50": 12.0, "p99": 30.0, "max": 60.0, "n": 100}
    with_reply = {**report(10, 12, 30), "reply_us": {"n": 100, "min": 9, "p50": 11, "p99": 29}}
    assert rtt.rtt_summary(with_reply)["reply_p50"] == 11.0
    with pytest.raises(ValueError, match="100 samples, expected 50"):
        rtt.rtt_summary(report(10, 12, 30), count=50)


@pytest.mark.parametrize("bad,message", [
    ({"ok": False, "rtt_us": None, "failure": "timed out in a round trip"},
     "no rtt_us samples .*timed out in a round trip"),
    ({"rtt_us": {"n": 5, "min": 1, "p50": 2, "max": 4}}, "lacks p99"),
    ({"rtt_us": {"n": 5, "min": 3, "p50": 2, "p99": 4, "max": 5}}, "out of order"),
    ({"rtt_us": {"n": 5, "min": 0, "p50": 2, "p99": 4, "max": 5}}, "out of order"),
    ({"rtt_us": {"n": 5, "min": "1", "p50": 2, "p99": 4, "max": 5}}, "lacks min"),
])
def test_rtt_summary_names_what_is_wrong(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rtt.rtt_summary(bad)


def test_sizes_parse_and_bad_ones_are_named() -> None:
    assert rtt.size_list("8,64K,1M") == [8, 65536, 1 << 20]
    assert rtt.size_list("") == []
    for bad in ("8,x", "0", "64Q", "-8"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            rtt.size_list(bad)
    assert [rtt.size_label(n) for n in (8, 65536, 1 << 20, 1000)] == [
        "8 B", "64 KiB", "1 MiB", "1000 B"]


def test_alternate_rotates_which_variant_goes_first() -> None:
    assert rtt.alternate(["a", "b"], 0) == ["a", "b"]
    assert rtt.alternate(["a", "b"], 1) == ["b", "a"]
    assert rtt.alternate(["a", "b"], 2) == ["a", "b"]
    firsts = [rtt.alternate(["a", "b", "c"], t)[0] for t in range(6)]
    assert sorted(firsts) == ["a", "a", "b", "b", "c", "c"]


def test_rtt_trial_runs_every_size_and_variant_in_alternating_order() -> None:
    calls: list[tuple[str, int]] = []

    def runner(name: str, base: float):
        def run(size: int) -> dict:
            calls.append((name, size))
            return report(base + size, base + size + 1, base + size + 2)
        return run

    samples: rtt.Samples = {}
    runners = {"tcp": runner("tcp", 10), "plugin": runner("plugin", 20)}
    for t in range(2):
        rtt.rtt_trial(t, [8, 1024], runners, samples, 100)
    assert calls == [("tcp", 8), ("plugin", 8), ("tcp", 1024), ("plugin", 1024),
                     ("plugin", 8), ("tcp", 8), ("plugin", 1024), ("tcp", 1024)]
    assert [s["min"] for s in samples["plugin"][1024]] == [1044, 1044]
    with pytest.raises(ValueError, match="expected 5"):
        rtt.rtt_trial(0, [8], runners, {}, 5)


def test_compare_takes_medians_and_per_trial_ratios() -> None:
    samples: rtt.Samples = {
        "tcp": {8: [rtt.rtt_summary(report(10, 20, 40)), rtt.rtt_summary(report(20, 40, 80)),
                    rtt.rtt_summary(report(12, 30, 50))]},
        "plugin": {8: [rtt.rtt_summary(report(11, 30, 40)), rtt.rtt_summary(report(30, 40, 90)),
                       rtt.rtt_summary(report(12, 33, 60))]},
    }
    (row,) = rtt.compare(samples, "plugin", "tcp")
    assert row["size"] == 8 and row["trials"] == 3
    assert row["min"]["tcp"] == 12 and row["min"]["plugin"] == 12
    assert row["min"]["ratio"] == 1.0
    assert row["min"]["ratio_range"] == pytest.approx([1.0, 1.5])  # 12/12 .. 30/20
    assert row["p50"]["ratio"] == pytest.approx(33 / 30)
    assert row["p50"]["ratio_range"] == pytest.approx([1.0, 1.5])
    assert row["p50"]["ratio_median"] == pytest.approx(1.1)  # of 1.5, 1.0, 1.1
    assert rtt.goal_met([row], "min", 1.1)
    assert not rtt.goal_met([row], "p50", 1.05)
    samples["plugin"][8].pop()
    with pytest.raises(ValueError, match="2 plugin trials, 3 tcp"):
        rtt.compare(samples, "plugin", "tcp")


def test_markdown_table_and_verdict() -> None:
    samples: rtt.Samples = {"tcp": {8: [rtt.rtt_summary(report(10, 20, 40))],
                                    1 << 20: [rtt.rtt_summary(report(100, 200, 400))]},
                            "plugin": {8: [rtt.rtt_summary(report(10.5, 25, 40))],
                                       1 << 20: [rtt.rtt_summary(report(120, 210, 400))]}}
    res = rtt.result(samples, 100, "plugin", "tcp")
    labels = {"tcp": "plain TCP", "plugin": "native"}
    text = rtt.markdown(res, labels, ("min", 1.1))
    assert ("| 8 B | 10.0 / 20.0 / 40.0 | 10.5 / 25.0 / 40.0 | 1.050 | 1.250 | 1.000 "
            "| 1.050 (1.05 .. 1.05) |") in text
    assert "| 1 MiB |" in text
    assert "100 per run after 200 unrecorded" in text
    assert "at min <= 1.1 at every size (ratio of the medians of 1 trials): **NOT met**" in text
    samples["plugin"][1 << 20][0]["min"] = 105.0
    assert "**met**" in rtt.markdown(rtt.result(samples, 100, "plugin", "tcp"), labels,
                                     ("min", 1.1))
    assert rtt.result({}, 100, "plugin", "tcp")["table"] == []
    plain = rtt.markdown(rtt.result(samples, 100, "plugin", "tcp"), labels, None)
    assert "Goal" not in plain and "per-trial p50 ratio" in plain


# --- the tools over loopback ----------------------------------------------------------------

@pytest.fixture(scope="module")
def built() -> None:
    build_plugin()


def tcp_pair(size: int, client_args: tuple[str, ...] = (), spin: bool = False):
    return rtt.tcp_report(local_starter, local_starter, f"127.0.0.1:{free_port()}", size,
                          count=200, warmup=20, timeout=30, client_args=client_args, spin=spin)


@pytest.mark.parametrize("size,spin", [(8, False), (65536, False), (1 << 20, False),
                                       (8, True), (1 << 20, True)])
def test_tcp_pingpong_moves_checked_payloads(built, size: int, spin: bool) -> None:
    srv, cli = tcp_pair(size, spin=spin)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr)
        assert r.report["spin"] is spin
        assert r.report["verified"] is True and r.report["corrupt_messages"] == 0
        assert r.report["round_trips"] == 220 and r.report["size"] == size
    assert srv.report["rtt_us"] is None
    assert rtt.rtt_summary(cli.report, 200)["n"] == 200


def test_tcp_pingpong_catches_a_flipped_byte(built) -> None:
    srv, cli = tcp_pair(4096, ("--corrupt",))
    assert cli.ok  # the client does not check its own message
    assert not srv.ok and srv.report["corrupt_messages"] == 1
    assert "round trip 100: wrong byte at 2048" in srv.stderr  # count / 2


@pytest.mark.parametrize("args,message", [
    (["--role", "both", "--addr", "127.0.0.1:1"], "--role must be server or client"),
    (["--role", "client"], "--addr must be IPv4:PORT"),
    (["--role", "client", "--addr", "localhost:7"], "--addr must be IPv4:PORT"),
    (["--role", "client", "--addr", "127.0.0.1:0"], "port 1..65535"),
    (["--role", "client", "--addr", "127.0.0.1:7", "--size", "64Q"], "--size must be"),
    (["--role", "client", "--addr", "127.0.0.1:7", "--size", "0"], "--size must be"),
    (["--role", "client", "--addr", "127.0.0.1:7", "--count", "0"], "--count must be"),
    (["--role", "client", "--addr", "127.0.0.1:7", "--timeout", "x"], "--timeout must be"),
    (["--role", "client", "--addr", "127.0.0.1:7", "--bogus"], "unknown option"),
])
def test_tcp_pingpong_rejects_bad_arguments(built, args: list[str], message: str) -> None:
    p = subprocess.run([str(rtt.TCP_PINGPONG), *args], capture_output=True, text=True,
                       timeout=10, check=False)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert p.stdout == ""


PLUGINS = {
    "native": ({"LINKGUARD_PAIRS": "lo"}, rtt.LINKGUARD_SO),
    "wrap": ({"LINKGUARD_PAIRS": "lo", "LGTCP_IFS": "lo", "LINKGUARD_INNER": str(LGTCP_SO)},
             rtt.LINKGUARD_SO),
    "inner": ({"LGTCP_IFS": "lo"}, LGTCP_SO),
}


@pytest.mark.parametrize("transport", list(PLUGINS))
def test_driver_pingpong_through_each_plugin(built, transport: str) -> None:
    env, plugin = PLUGINS[transport]
    srv, cli = rtt.plugin_report(local_starter, local_starter, f"127.0.0.1:{free_port()}",
                                 65536, env, plugin, count=100, warmup=10, timeout=30)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-2000:])
        rep = r.report
        assert rep["mode"] == "pingpong" and rep["verified"] is True
        assert rep["corrupt_messages"] == rep["size_mismatches"] == 0 and rep["errors"] == []
        assert rep["completions"] == 2 * 110  # a send and a receive per round trip
        assert rep["bytes_received"] == rep["bytes_sent"] == 110 * 65536
    assert srv.report["rtt_us"] is None and srv.report["reply_us"] is None
    summary = rtt.rtt_summary(cli.report, 100)
    assert cli.report["reply_us"]["n"] == 100
    # Each round trip's reply is done no later than the round trip, so every quantile too.
    assert all(summary[f"reply_{q}"] <= summary[q] for q in rtt.QUANTILES), summary


def test_driver_pingpong_catches_a_flipped_byte(built) -> None:
    srv, cli = rtt.plugin_report(local_starter, local_starter, f"127.0.0.1:{free_port()}", 8,
                                 {"LINKGUARD_PAIRS": "lo"}, count=50, warmup=0, timeout=30,
                                 client_args=["--corrupt"])
    assert cli.ok and not srv.ok
    assert srv.report["corrupt_messages"] == 1
    assert "round trip 25: wrong byte at 0" in srv.stderr  # the word holding it


def test_driver_pingpong_options_must_agree(built) -> None:
    from bench.plugin_driver import run_pair
    srv, cli = run_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}",
                        ["--pingpong", "--size", "8", "--count", "10"],
                        env={"LINKGUARD_PAIRS": "lo"}, timeout=15,
                        client_args=["--warmup", "3"])
    assert not srv.ok and srv.report["failure"] == "client and server options differ"
    assert not cli.ok
