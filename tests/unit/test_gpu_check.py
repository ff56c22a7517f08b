"""The CPU side of the real-NCCL check (tests/gpu/): NCCL log parsing, the rank's helpers and
arguments, the harness's arguments, the verdict and the result schema. No GPU, no torch, no
root; the whole flow runs as a dry run in tests/lab/test_gpu_check_flow.py.

The sample logs are built from NCCL's documented line shapes (see tests/gpu/nccl_log.py) and
the plugin's own format strings (plugin/src/proto/failover.c, upcall.h, core.c, health.c)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "tests" / "gpu"
for p in (str(REPO), str(GPU)):
    if p not in sys.path:
        sys.path.insert(0, p)

import nccl_check
import nccl_log
import nccl_rank
import result

H = "gpu-node:4242:4251 [0] NCCL INFO "
SAMPLE = "\n".join([
    "gpu-node:4242:4242 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to mgmt0",
    "gpu-node:4242:4242 [0] NCCL INFO Bootstrap: Using mgmt0:198.19.0.1<0>",
    H + "NET/Plugin: Plugin name set by env to /repo/plugin/build/libnccl-net-linkguard.so",
    H + "NET/Plugin: Loaded net plugin linkguard (v11)",
    H + "NET/linkguard: dev 0: rail0 backup rail1 speed 10000 Mb/s pci none (virtual) "
        "(from daemon)",
    H + "NET/linkguard: dev 1: rail1 backup rail0 speed 10000 Mb/s pci none (virtual) "
        "(from daemon)",
    H + "Using network linkguard",
    H + "Channel 00/0 : 0[0] -> 1[0] [send] via NET/linkguard/1",
    H + "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/linkguard/1",
    H + "Channel 01/0 : 0[0] -> 1[0] [send] via NET/linkguard/1/Shared",
    "MARK-CUT",
    H + "NET/linkguard: send conn 00c0ffee12345678: failover: primary path on NIC rail1 -> "
        "backup path on NIC rail0 (rail1 DOWN: carrier lost); epoch 1, replaying 3 message(s) "
        "from #17 (cursor was #20); switch took 0.41 ms",
    H + "NET/linkguard: recv conn 00c0ffee87654321: failover: primary path on NIC rail1 -> "
        "backup path on NIC rail0 at epoch 1 (asked by the sender); 0 partial receive(s) "
        "reset, resuming at message #40; switch took 0.12 ms",
    ("[2026-12-01 08:00:01] gpu-node:4242:4260 [0] misc/socket.cc:50 NCCL WARN "
     "NET/linkguard: send conn 00c0ffee12345678: primary path on NIC rail1 to 198.18.1.2 "
     "failed (connection reset) with 3 request(s) in flight"),
    "MARK-RESTORE",
    H + "NET/linkguard: send conn 00c0ffee12345678: reintegrated: backup path on NIC rail0 -> "
        "primary path on NIC rail1 (rail1 UP again); epoch 2, replaying 0 message(s) from "
        "#90 (cursor was #90); switch took 0.30 ms",
    "not an NCCL line at all",
    H + "NET/linkguard: recv conn 00c0ffee87654321: reintegrated: backup path on NIC rail0 -> "
        "primary path on NIC rail1 at epoch 2 (asked by the sender); 1 partial receive(s) "
        "reset, resuming at message #120; switch took 0.09 ms",
]) + "\n"


def sample_log(tmp_path: Path) -> tuple[Path, int, int]:
    """The sample as a NCCL_DEBUG_FILE, with the byte offsets of its two marks."""
    path = tmp_path / "nccl.log"
    path.write_text(SAMPLE)
    return path, SAMPLE.index("MARK-CUT"), SAMPLE.index("MARK-RESTORE")


# --- NCCL log lines ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    (H + "Using network Socket", ("gpu-node", 4242, 0, "INFO", "Using network Socket")),
    ("[2026-12-01 08:00:01] h-1.x:7:8 [3] transport/net.cc:99 NCCL WARN NET/linkguard: x",
     ("h-1.x", 7, 3, "WARN", "NET/linkguard: x")),
    ("h:1:2 [0] NCCL INFO ", ("h", 1, 0, "INFO", "")),
    ("h:1:2 [0] NCCL DEBUG x", None),
    ("plain text", None),
    ("", None),
])
def test_parse_line(text: str, want: tuple[Any, ...] | None) -> None:
    line = nccl_log.parse_line(text, 7)
    got = None if line is None else (line.host, line.pid, line.dev, line.level, line.msg)
    assert got == want
    if line is not None:
        assert line.pos == 7


def test_read_log_keeps_byte_offsets_and_a_missing_file_is_empty(tmp_path: Path) -> None:
    path, _, _ = sample_log(tmp_path)
    lines = nccl_log.read_log(path)
    assert len(lines) == 15  # every line but the two marks and the plain one
    for line in lines:
        assert SAMPLE.encode()[line.pos:].decode().startswith(
            ("gpu-node", "[2026")), line
    assert nccl_log.read_log(tmp_path / "absent.log") == []


def test_summarize_reads_the_net_the_devices_and_the_switches(tmp_path: Path) -> None:
    path, cut, restore = sample_log(tmp_path)
    s = nccl_log.summarize(nccl_log.read_log(path))
    assert s["plugins_loaded"] == [{"name": "linkguard", "version": 11}]
    assert s["networks"] == ["linkguard"]
    assert s["devices"] == ["NET/linkguard/1"]
    assert [c["dir"] for c in s["channels"]] == ["send", "receive", "send"]
    assert s["channels"][2]["flags"] == "/Shared"
    assert len(s["plugin_devices"]) == 2 and s["no_daemon"] == []
    assert len(s["warnings"]) == 1 and "failed (connection reset)" in s["warnings"][0]
    kinds = [(w["side"], w["kind"], w["from_nic"], w["to_nic"]) for w in s["switches"]]
    assert kinds == [("send", "failover", "rail1", "rail0"), ("recv", "failover", "rail1", "rail0"),
                     ("send", "reintegrated", "rail0", "rail1"),
                     ("recv", "reintegrated", "rail0", "rail1")]
    sw = s["switches"]
    assert nccl_log.count_switches(sw, "failover", before=cut) == 0
    assert nccl_log.count_switches(sw, "failover", after=cut) == 2
    assert nccl_log.count_switches(sw, "reintegrated", after=restore) == 2
    assert nccl_log.count_switches(sw, "failover", after=restore) == 0
    # NCCL connected through device 1, whose primary is rail1: that is the rail to cut.
    assert nccl_log.cut_rail(s) == 1


def test_channel_lines_of_other_nets_and_flags() -> None:
    lines = [nccl_log.parse_line(H + m, i) for i, m in enumerate([
        "Channel 03 : 15[a01d0] -> 6[a01c0] [receive] via NET/AWS Libfabric/3/GDRDMA",
        "Channel 00/0 : 3[3] -> 8[0] [send] via NET/IB/0(1)/GDRDMA",
        "Channel 00/0 : 0[0] -> 1[0] via P2P/CUMEM",
        "Using network Socket",
        "NET/Plugin: Loaded net plugin AWS Libfabric (v9)",
    ])]
    s = nccl_log.summarize(line for line in lines if line is not None)
    assert s["devices"] == ["NET/AWS Libfabric/3", "NET/IB/0"]
    assert s["networks"] == ["Socket"]
    assert s["plugins_loaded"] == [{"name": "AWS Libfabric", "version": 9}]
    assert nccl_log.cut_rail(s) is None  # no linkguard device used


def test_no_daemon_and_unknown_plugin_lines() -> None:
    msgs = [("NET/linkguard: linkguard: no daemon (no such file); failover relies on the "
             "plugin's own detection"),
            ("NET/linkguard: send conn 0123456789abcdef: standby backup path on NIC rail1 to "
             "198.18.1.2 lost (timeout); rebuilding it"),
            ("NET/linkguard: send conn 0123456789abcdef: switched: backup path on NIC rail1 -> "
             "backup path on NIC rail1 (rebuilt); epoch 3")]
    s = nccl_log.summarize(nccl_log.parse_line(H + m) for m in msgs)  # type: ignore[misc]
    assert s["no_daemon"] == ["no such file"]
    assert [w["kind"] for w in s["switches"]] == ["switched"]


def test_the_plugin_still_logs_the_switch_lines_the_parser_reads() -> None:
    """The parser follows plugin/src/proto/failover.c's format strings: keep them in step."""
    src = (REPO / "plugin" / "src" / "proto" / "failover.c").read_text()
    assert '"failover" : from == 1 && to == 0 ? "reintegrated" : "switched"' in src
    upcall_h = (REPO / "plugin" / "src" / "proto" / "upcall.h").read_text()  # lg_slot_name
    assert 'slot ? "backup" : "primary"' in upcall_h
    flat = re.sub(r'"\s*\n\s*"', "", src)  # join C's adjacent string literals
    assert '"send conn %016llx: %s: %s path on NIC %s -> %s path on NIC %s (%s); ' in flat
    assert '"recv conn %016llx: %s: %s path on NIC %s -> %s path on NIC %s at epoch ' in flat
    assert '"NET/linkguard: %s"' in (REPO / "plugin" / "src" / "runtime" / "log.c").read_text()
    assert '"dev %d: %s%s%s%s speed %d Mb/s' in (REPO / "plugin" / "src" / "abi" / "core.c").read_text()
    assert '"linkguard: no daemon (%s); ' in (REPO / "plugin" / "src" / "daemon" / "health.c").read_text()


# --- the rank's helpers and arguments ----------------------------------------------------------

def test_pattern_is_never_zero_and_its_sum_is_exact_in_float32() -> None:
    values = {nccl_rank.pattern(i, it) for i in range(3000) for it in (0, 1, 57)}
    assert min(values) == 1 and max(values) == nccl_rank.PATTERN_MOD
    assert nccl_rank.pattern(5, 0) != nccl_rank.pattern(5, 1)  # changes every iteration
    assert nccl_rank.sum_factor(2) == 3 and nccl_rank.sum_factor(4) == 10
    nccl_rank.check_exact(2)
    with pytest.raises(ValueError, match="too large"):
        nccl_rank.check_exact(300)


@pytest.mark.parametrize("text, want", [("1M", 1 << 20), ("256m", 256 << 20), ("4K", 4096),
                                        ("64", 64), ("1G", 1 << 30)])
def test_parse_size(text: str, want: int) -> None:
    assert nccl_rank.parse_size(text) == want


@pytest.mark.parametrize("text, match", [("0", "bad size"), ("1T", "bad size"), ("", "bad"),
                                         ("-1M", "bad size"), ("M", "bad size")])
def test_parse_size_rejects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        nccl_rank.parse_size(text)


def test_parse_sizes() -> None:
    assert nccl_rank.parse_sizes(nccl_rank.DEFAULT_SIZES)[::4] == [1 << 20, 16 << 20, 256 << 20]
    with pytest.raises(ValueError, match="multiple of 4"):
        nccl_rank.parse_sizes("1M,6")
    with pytest.raises(ValueError, match="no sizes"):
        nccl_rank.parse_sizes(" , ")


def test_bench_iters_and_bus_bandwidth() -> None:
    assert nccl_rank.bench_iters(1 << 20, 1 << 30) == 100  # capped
    assert nccl_rank.bench_iters(256 << 20, 1 << 30) == 4
    assert nccl_rank.bench_iters(1 << 30, 1 << 20) == 3  # at least 3
    algbw, busbw = nccl_rank.bus_bandwidth(2_000_000_000, 2.0, 2)
    assert algbw == pytest.approx(1.0) and busbw == pytest.approx(1.0)  # 2(n-1)/n = 1
    assert nccl_rank.bus_bandwidth(1_000_000_000, 1.0, 4)[1] == pytest.approx(1.5)


@pytest.mark.parametrize("argv, match", [
    (["--mode", "loop", "--rank", "2", "--master", "1.2.3.4:5", "--out", "x"], "--rank must"),
    (["--mode", "loop", "--rank", "0", "--world", "1", "--master", "h:1", "--out", "x"],
     "--world must"),
    (["--mode", "loop", "--rank", "0", "--master", "nohostport", "--out", "x"], "IP:PORT"),
    (["--mode", "bench", "--rank", "0", "--master", "h:1", "--out", "x", "--sizes", "1X"],
     "bad size"),
    (["--mode", "loop", "--rank", "0", "--master", "h:1", "--out", "x", "--elements", "1"],
     "--elements"),
    (["--mode", "spin", "--rank", "0", "--master", "h:1", "--out", "x"], "invalid choice"),
])
def test_rank_rejects_bad_arguments(argv: list[str], match: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        nccl_rank.parse_args(argv)
    assert exc.value.code == 2
    assert match in capsys.readouterr().err


def test_rank_without_torch_writes_its_exception(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    out = tmp_path / "r.json"
    rc = nccl_rank.main(["--mode", "loop", "--rank", "1", "--master", "198.18.0.1:29510",
                         "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 1 and data["ok"] is False and data["rank"] == 1
    assert data["exception"].startswith(("ImportError", "ModuleNotFoundError"))


FAKE_TORCH = REPO / "tests" / "unit" / "fake_torch"


def run_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str],
             **env: str) -> tuple[int, dict[str, Any]]:
    """nccl_rank.main over fake_torch (rank 0 of an emulated world of 2)."""
    monkeypatch.syspath_prepend(str(FAKE_TORCH))
    for name in ("torch", "torch.distributed"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "rank.json"
    full = [*argv, "--rank", "0", "--master", "198.19.0.1:29510", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["nccl_rank.py", *full])  # fake_torch reads --mode
    rc = nccl_rank.main(full)
    return rc, json.loads(out.read_text())


def test_loop_checks_every_element_and_stops_on_the_stop_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = tmp_path / "stop"
    real_exists = nccl_rank.os.path.exists
    calls = {"n": 0}

    def exists(path: str) -> bool:  # the stop file appears during the 5th iteration
        if path == str(stop):
            calls["n"] += 1
            return calls["n"] > 5
        return real_exists(path)

    monkeypatch.setattr(nccl_rank.os.path, "exists", exists)
    rc, r = run_rank(tmp_path, monkeypatch, ["--mode", "loop", "--elements", "64",
                                             "--stop-file", str(stop)])
    assert rc == 0 and r["ok"] and r["exception"] is None
    assert r["iterations"] == 6 and r["wrong_elements"] == 0 and r["bad_votes"] == 0
    assert len(r["iters"]) == 6 and r["elements"] == 64
    assert (r["torch"], r["nccl"], r["gpu"]) == ("0.0-fake", "0.0.0", "fake GPU")


def test_loop_counts_a_corrupted_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, r = run_rank(tmp_path, monkeypatch, ["--mode", "loop", "--elements", "32",
                                             "--max-iters", "5"], FAKE_TORCH_CORRUPT_CALL="3")
    assert rc == 0 and r["iterations"] == 5 and r["wrong_elements"] == 1


def test_loop_stops_when_the_peer_votes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, r = run_rank(tmp_path, monkeypatch, ["--mode", "loop", "--elements", "16"],
                     FAKE_TORCH_PEER_STOP_CALL="4")
    assert rc == 0 and r["iterations"] == 4 and r["wrong_elements"] == 0


def test_bench_rows_per_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, r = run_rank(tmp_path, monkeypatch, ["--mode", "bench", "--sizes", "64,256",
                                             "--budget-mib", "1"])
    assert rc == 0 and [row["bytes"] for row in r["rows"]] == [64, 256]
    assert all(row["wrong_elements"] == 0 and row["busbw_gbs"] > 0 for row in r["rows"])
    assert r["rows"][0]["iters"] == 100  # 1 MiB / 64 B, capped
    assert r["rows"][0]["busbw_gbs"] == pytest.approx(r["rows"][0]["algbw_gbs"])  # world 2


def test_rank_script_help_needs_no_torch() -> None:
    proc = subprocess.run([sys.executable, str(GPU / "nccl_rank.py"), "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "--stop-file" in proc.stdout


# --- the harness's arguments -------------------------------------------------------------------

def test_harness_defaults_differ_for_the_dry_run() -> None:
    gpu = nccl_check.parse_args(["--out", "/tmp/x"])
    dry = nccl_check.parse_args(["--out", "/tmp/x", "--dry-run"])
    assert gpu.sizes == nccl_rank.DEFAULT_SIZES and gpu.budget_mib == 1024
    assert (dry.sizes, dry.budget_mib) == ("1M,4M", 32)


@pytest.mark.parametrize("extra, match", [
    (["--fault-s", "0"], "--fault-s 0.0: must be 1..60"),
    (["--timeout-s", "5"], "--timeout-s"),
    (["--hold-down-ms", "-1"], "--hold-down-ms"),
    (["--sizes", "1M,3"], "multiple of 4"),
    (["--prefix", "xx"], "bad prefix"),
    (["--budget-mib", "0"], "--budget-mib"),
    (["--bogus"], "usage"),
])
def test_harness_rejects_bad_arguments(extra: list[str], match: str) -> None:
    with pytest.raises(nccl_check.ArgError, match=match):
        nccl_check.parse_args(["--out", "/tmp/x", *extra])


def test_harness_main_exits_2_on_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert nccl_check.main(["--out", "/tmp/x", "--steady-s", "99"]) == 2
    assert "--steady-s 99.0: must be 0..60" in capsys.readouterr().err


def test_iteration_maxima_split_at_the_cut_and_the_restore() -> None:
    rows = [[1.0, 5.0], [2.0, 7.0], [10.0, 300.0], [10.5, 9.0], [21.0, 40.0], [22.0, 6.0]]
    got = nccl_check.iteration_maxima(rows, 10_000_000_000, 20_000_000_000)
    assert got == {"before_cut": 7.0, "fault": 300.0, "after_restore": 40.0}
    assert nccl_check.iteration_maxima([], 1, 2) is None


def test_teardown_goes_on_when_a_step_fails(tmp_path: Path) -> None:
    calls: list[str] = []

    class Ranks:
        def kill(self) -> None:
            calls.append("ranks")
            raise OSError("no such process")

    class Lab:
        def down(self) -> None:
            calls.append("lab")

    problems = nccl_check.teardown(Lab(), [], Ranks(), tmp_path)  # type: ignore[arg-type]
    assert calls == ["ranks", "lab"]
    assert problems == ["teardown: ranks: OSError: no such process"]


# --- verdict and schema ------------------------------------------------------------------------

def good_log() -> dict[str, Any]:
    return {"networks": ["linkguard"], "plugins_loaded": [{"name": "linkguard", "version": 11}],
            "devices": ["NET/linkguard/0"], "plugin_devices": ["dev 0: rail0 backup rail1 ..."],
            "no_daemon": [], "warnings": [], "channels": [],
            "switches": [{"kind": "failover", "pos": 150}, {"kind": "reintegrated", "pos": 250}]}


def good_rank() -> dict[str, Any]:
    return {"ok": True, "iterations": 500, "wrong_elements": 0, "exception": None,
            "returncode": 0}


def section(mode: str = "gpu", **changes: Any) -> tuple[dict[str, Any], list[str]]:
    ranks = {"a": good_rank(), "b": good_rank()}
    logs = {"a": good_log(), "b": good_log()}
    for fn in changes.values():
        fn(ranks, logs)
    return result.failover_section(mode, ranks, logs, {"a": 100, "b": 100}, {"a": 200, "b": 200})


def test_failover_verdict_passes_a_clean_run() -> None:
    sec, failures = section()
    assert failures == []
    assert sec["logs"]["a"]["failovers_after_cut"] == 1
    assert sec["logs"]["b"]["reintegrations_after_restore"] == 1


@pytest.mark.parametrize("change, match", [
    (lambda r, lg: r["a"].update(wrong_elements=3), "a: 3 wrong element"),
    (lambda r, lg: r["b"].update(ok=False, exception="DistBackendError: NCCL error"),
     "b: DistBackendError"),
    (lambda r, lg: r["a"].update(ok=False, returncode=-9), "a: the rank failed (exit -9)"),
    (lambda r, lg: r["b"].update(iterations=0), "b: no iteration"),
    (lambda r, lg: r["a"].update(bad_votes=1), "stop vote"),
    (lambda r, lg: lg["a"].update(switches=[{"kind": "failover", "pos": 50},
                                            {"kind": "reintegrated", "pos": 250}]),
     "a: no failover line from the plugin after the cut"),
    (lambda r, lg: lg["b"].update(switches=[{"kind": "failover", "pos": 150},
                                            {"kind": "reintegrated", "pos": 180}]),
     "b: no reintegration line"),
    (lambda r, lg: lg["a"].update(no_daemon=["heartbeat stale"]), "without its daemon"),
    (lambda r, lg: lg["b"].update(networks=["Socket"]), "b: NCCL used network(s) ['Socket']"),
    (lambda r, lg: lg["a"].update(devices=["NET/linkguard/0", "NET/Socket/0"]),
     "not only NET/linkguard"),
    (lambda r, lg: lg["a"].update(devices=[]), "no logged device"),
    (lambda r, lg: lg["b"].update(plugins_loaded=[]), "Loaded net plugin linkguard"),
    (lambda r, lg: lg.pop("b"), "b: no log"),
])
def test_failover_verdict_fails(change: Any, match: str) -> None:
    _, failures = section(x=change)
    assert any(match in f for f in failures), failures


def test_the_dry_run_does_not_ask_for_nccls_own_lines() -> None:
    def no_nccl(r: Any, lg: Any) -> None:
        for log in lg.values():
            log.update(networks=[], devices=[], plugins_loaded=[])
    assert section("dry-run", x=no_nccl)[1] == []
    assert section("gpu", x=no_nccl)[1] != []


def bench_runs(lg_rows: list[dict[str, Any]], sock_rows: list[dict[str, Any]]
               ) -> dict[str, dict[str, dict[str, Any]]]:
    def mk(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"ok": True, "exception": None, "rows": rows}
    return {"linkguard": {"a": mk(lg_rows), "b": mk(lg_rows)},
            "socket": {"a": mk(sock_rows), "b": mk(sock_rows)}}


def bench_logs(lg_net: str = "linkguard", sock_net: str = "Socket") -> dict[str, Any]:
    def log(net: str) -> dict[str, Any]:
        return {**good_log(), "networks": [net], "devices": [f"NET/{net}/0"],
                "plugins_loaded": [{"name": "linkguard", "version": 11}]}
    return {"linkguard": {h: log(lg_net) for h in "ab"}, "socket": {h: log(sock_net) for h in "ab"}}


def test_bandwidth_ratio_per_size() -> None:
    runs = bench_runs([{"bytes": 1 << 20, "busbw_gbs": 2.0}, {"bytes": 4 << 20, "busbw_gbs": 3.0}],
                      [{"bytes": 1 << 20, "busbw_gbs": 4.0}])
    sec, failures = result.bandwidth_section("gpu", runs, bench_logs())
    assert failures == []
    assert sec["rows"] == [
        {"bytes": 1 << 20, "linkguard_gbs": 2.0, "baseline_gbs": 4.0, "ratio": 0.5},
        {"bytes": 4 << 20, "linkguard_gbs": 3.0, "baseline_gbs": None, "ratio": None}]
    assert "Socket" in sec["baseline"] and sec["networks"]["socket"]["a"] == ["Socket"]


def test_bandwidth_verdict_fails_on_wrong_data_or_the_wrong_net() -> None:
    runs = bench_runs([{"bytes": 1 << 20, "busbw_gbs": 2.0, "wrong_elements": 5}],
                      [{"bytes": 1 << 20, "busbw_gbs": 4.0}])
    _, failures = result.bandwidth_section("gpu", runs, bench_logs(sock_net="linkguard"))
    assert any("5 wrong element(s) at 1048576 B" in f for f in failures)
    assert any("bandwidth socket: a: NCCL used network(s) ['linkguard'], not Socket" in f
               for f in failures)


def full_result() -> dict[str, Any]:
    doc = result.new_result("gpu", "2026-12-01T08:00:00+00:00")
    doc["failover"] = section()[0]
    doc["bandwidth"] = result.bandwidth_section(
        "gpu", bench_runs([{"bytes": 1 << 20, "busbw_gbs": 2.0}],
                          [{"bytes": 1 << 20, "busbw_gbs": 4.0}]), bench_logs())[0]
    doc.update(ok=True, duration_s=12.5, artifacts=["result.json"])
    return doc


def test_a_complete_result_follows_the_schema_and_survives_json() -> None:
    doc = json.loads(json.dumps(full_result()))
    assert result.validate(doc) == []
    text = "\n".join(result.summary_lines(doc))
    assert "PASS" in text and "0.500" in text


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("failures"), "failures: missing"),
    (lambda d: d.update(schema="other/2"), "schema: 'other/2'"),
    (lambda d: d.update(mode="cpu"), "mode: 'cpu'"),
    (lambda d: d.update(failures=["x"]), "ok is true but failures are listed"),
    (lambda d: d.update(bandwidth=None), "ok without a bandwidth section"),
    (lambda d: d.update(failover=None), "ok without a failover section"),
    (lambda d: d["failover"]["ranks"].pop("b"), "failover.ranks.b"),
    (lambda d: d["failover"]["logs"]["a"].pop("failovers_after_cut"), "failover.logs.a"),
    (lambda d: d["bandwidth"]["rows"][0].pop("ratio"), "bandwidth.rows[0]"),
    (lambda d: d.update(duration_s="long"), "duration_s"),
])
def test_validate_names_what_is_wrong(change: Any, match: str) -> None:
    doc = full_result()
    change(doc)
    assert any(match in p for p in result.validate(doc)), result.validate(doc)
