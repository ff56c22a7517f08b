"""The real-NCCL check's whole flow without a GPU: tests/gpu/run_nccl_check.sh --dry-run.

The same script a GPU machine runs: set-up, a real lab, a linkguardd per host, the rail cut
under verified traffic through the plugin and restored, the bandwidth phase, the JSON result,
the artifacts and the teardown; lg_nccl_driver stands in for the torch ranks (what differs on
a GPU is tested from sample logs in tests/unit/test_gpu_check.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from linkguard_lab import netns
from linkguard_lab.lab import Lab

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
from ranks import TorchRanks
from result import validate

from bench.plugin_driver import LINKGUARD_SO

SCRIPT = REPO / "tests" / "gpu" / "run_nccl_check.sh"
pytestmark = pytest.mark.lab


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def start(out: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env}
    return subprocess.Popen(["bash", str(SCRIPT), *args], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def left_behind(prefix: str) -> list[str]:
    names = [n for n in netns.list_netns() if n.startswith(f"{prefix}-")]
    return names + [str(p) for p in Path("/dev/shm").glob(f"{prefix}-*")]


def test_dry_run_passes_and_cleans_up(tmp_path: Path) -> None:
    proc = start(tmp_path, "--dry-run", "--steady-s", "1", "--fault-s", "2")
    console, _ = proc.communicate(timeout=300)
    doc: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    assert proc.returncode == 0 and doc["ok"], console
    assert validate(doc) == [] and doc["mode"] == "dry-run" and doc["failures"] == []
    fo = doc["failover"]
    for host in ("a", "b"):
        assert fo["ranks"][host]["iterations"] > 0 and fo["ranks"][host]["wrong_elements"] == 0
        assert fo["logs"][host]["failovers_after_cut"] >= 1
        assert fo["logs"][host]["reintegrations_after_restore"] >= 1
        assert fo["logs"][host]["failovers_before_cut"] == 0
    assert fo["cut_rail"] == 0 and fo["restore_at_iteration"] > fo["cut_at_iteration"] > 0
    assert fo["daemon"]["down"]["reason"] == "CARRIER_LOST" and fo["daemon"]["up"] is not None
    assert [r["bytes"] for r in doc["bandwidth"]["rows"]] == [1 << 20, 4 << 20]
    assert all(r["ratio"] > 0 for r in doc["bandwidth"]["rows"])
    assert doc["lab"]["torn_down"] and left_behind(doc["lab"]["prefix"]) == []
    assert set(doc["artifacts"]) == {"result.json", "logs.tar.gz", "console.log"}
    assert "PASS" in (tmp_path / "console.log").read_text()
    with tarfile.open(tmp_path / "logs.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"daemon-a-stdout.log", "daemon-b-stdout.log", "driver-failover.txt"} <= names


def test_sigterm_mid_run_still_tears_down_and_reports(tmp_path: Path) -> None:
    proc = start(tmp_path, "--dry-run", "--steady-s", "1", "--fault-s", "20")
    try:
        deadline = time.monotonic() + 120
        log = tmp_path / "console.log"
        while "cut a rail" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, f"ended before the cut: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, "no cut within 120 s"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)  # the script we started, by its PID
        console, _ = proc.communicate(timeout=120)
    doc = json.loads((tmp_path / "result.json").read_text())
    assert proc.returncode == 1 and not doc["ok"], console
    assert any("SystemExit" in f for f in doc["failures"]), doc["failures"]
    assert doc["lab"]["torn_down"] and left_behind(doc["lab"]["prefix"]) == []
    assert validate(doc) == []


@pytest.mark.parametrize("args, env, message", [
    ([], {"LG_GPU_TIMEOUT_S": "soon"}, "LG_GPU_TIMEOUT_S=soon: seconds, >= 90"),
    (["--dry-run", "--fault-s", "0"], {}, "--fault-s 0.0: must be 1..60"),
    # Not a dry run, and the ranks' python has no torch (a stand-in that fails every import).
    ([], {"LG_GPU_RANK_PYTHON": "{tmp}/no-torch"}, "no-torch has no torch with a CUDA device"),
])
def test_bad_input_exits_2_with_a_message(tmp_path: Path, args: list[str], env: dict[str, str],
                                         message: str) -> None:
    (tmp_path / "no-torch").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "no-torch").chmod(0o755)
    proc = start(tmp_path, *args, **{k: v.format(tmp=tmp_path) for k, v in env.items()})
    console, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and message in console, console
    assert not (tmp_path / "result.json").exists()


def test_torch_ranks_start_in_their_hosts_with_nccls_environment(lab: Lab, tmp_path: Path
                                                                 ) -> None:
    """TorchRanks' plumbing over tests/unit/fake_torch (no GPU here): each rank in its own
    lab host, with the environment that makes NCCL use linkguard (or Socket on rail0), the
    harness's PYTHONPATH left out, progress read, a common stop, results and bench rows."""
    fake = REPO / "tests" / "unit" / "fake_torch"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    ranks = TorchRanks(lab, tmp_path, elements=64, max_s=60, python=str(python))
    ranks.start_loop()
    deadline = time.monotonic() + 60
    while ranks.progress() < 20:
        assert ranks.running() and time.monotonic() < deadline
        time.sleep(0.05)
    assert ranks.marks() == {"a": 0, "b": 0}  # fake_torch writes no NCCL log
    ranks.stop()
    results = ranks.wait(60)
    seen = {h: json.loads((tmp_path / f"rank-failover-{h}.json.env.json").read_text())
            for h in ("a", "b")}
    for rank, host in enumerate(("a", "b")):
        r, env = results[host], seen[host]["env"]
        assert r["ok"] and r["rank"] == rank and r["returncode"] == 0, r
        assert r["iterations"] >= 20 and r["wrong_elements"] == 0
        assert {"rail0", "rail1", "mgmt0"} <= set(seen[host]["ifnames"])
        assert env["NCCL_NET"] == "linkguard" and env["NCCL_NET_PLUGIN"] == str(LINKGUARD_SO)
        assert Path(env["NCCL_NET_PLUGIN"]).is_absolute() and env["NCCL_SOCKET_IFNAME"] == "mgmt0"
        assert env["LINKGUARD_SHM"] == f"/dev/shm/{lab.prefix}-{host}"
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == str(
            ranks.log("failover", host))
        assert env["PYTHONPATH"] == str(fake)
    assert seen["a"]["env"]["NCCL_HOSTID"] != seen["b"]["env"]["NCCL_HOSTID"]

    bench = ranks.bench("socket", "64,128", 1, 60)
    assert [row["bytes"] for row in bench["a"]["rows"]] == [64, 128] and bench["b"]["ok"]
    env = json.loads((tmp_path / "rank-socket-b.json.env.json").read_text())["env"]
    assert env["NCCL_NET"] == "Socket" and env["NCCL_SOCKET_IFNAME"] == "rail0"
    assert "NCCL_NET_PLUGIN" not in env and "LINKGUARD_SHM" not in env
