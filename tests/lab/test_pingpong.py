"""Round trips on a lab rail (issue #13), run exactly as bench.plugin_bw and bench.wrap_bw run
them: lg_tcp_pingpong between the rail0 addresses (blocking and polling), and
lg_nccl_driver --pingpong through
linkguard native, linkguard wrapping lgtcp, and lgtcp alone, device 0 = rail0. No timing is
asserted: every run must finish clean with its payload checked both ways and the client's
samples complete, and a flipped byte through wrap mode must be caught."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import rtt
from bench.plugin_bw import PAIRS
from bench.plugin_driver import build_plugin, lab_starter
from bench.wrap_bw import MODES

pytestmark = pytest.mark.lab
COUNT = 100


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def test_every_variant_produces_checked_samples(lab) -> None:
    ports = itertools.count(7400)
    runners = {"tcp": rtt.lab_runner(lab, "tcp", ports, COUNT, warmup=10),
               "tcp-spin": rtt.lab_runner(lab, "tcp-spin", ports, COUNT, warmup=10),
               "native": rtt.lab_runner(lab, "plugin", ports, COUNT, warmup=10, env=PAIRS)}
    for mode, (plugin, env) in MODES.items():  # "direct" (lgtcp alone) and "wrap"
        runners[mode] = rtt.lab_runner(lab, "plugin", ports, COUNT, warmup=10, env=env,
                                       plugin=plugin)
    samples: rtt.Samples = {}
    seen: list[tuple[str, int]] = []

    def recording(name: str, run: rtt.Runner) -> rtt.Runner:
        def wrapped(size: int) -> dict:
            rep = run(size)
            seen.append((name, size))
            assert rep["role"] == "client" and rep["verified"] is True, rep
            assert rep["corrupt_messages"] == 0, rep
            if name.startswith("tcp"):
                assert rep["spin"] is (name == "tcp-spin")
                assert rep["address"].startswith(lab.address("b", 0) + ":")
                assert rep["round_trips"] == COUNT + 10
            else:
                assert rep["mode"] == "pingpong" and rep["size_mismatches"] == 0
                assert rep["completions"] == 2 * (COUNT + 10)
            return rep
        return wrapped

    rtt.rtt_trial(0, [8, 1 << 20], {k: recording(k, v) for k, v in runners.items()}, samples,
                  COUNT)
    assert sorted(seen) == sorted(itertools.product(runners, [8, 1 << 20]))
    for baseline, variant in (("tcp", "native"), ("tcp-spin", "native"), ("direct", "wrap")):
        rows = rtt.compare(samples, variant, baseline)
        assert [r["size"] for r in rows] == [8, 1 << 20]
        assert all(r[q]["ratio"] > 0 for r in rows for q in rtt.QUANTILES)


def test_a_flipped_byte_through_wrap_mode_is_caught(lab) -> None:
    plugin, env = MODES["wrap"]
    srv, cli = rtt.plugin_report(lab_starter(lab, "b"), lab_starter(lab, "a"),
                                 f"{lab.mgmt_address('b')}:7390", 65536, env, plugin,
                                 count=40, warmup=0, timeout=60, client_args=["--corrupt"])
    assert cli.ok, (cli.report, cli.stderr[-2000:])
    assert not srv.ok and srv.report["corrupt_messages"] == 1, srv.report
    assert "round trip 20: wrong byte at 32768" in srv.stderr
