"""lg_nccl_driver --idle-s over loopback (no root): connections set up and left idle before a
timed run, the stretch ended by SIGUSR2, no message before it ends, and a clear refusal where
the option makes no sense."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import DRIVER, build_plugin, free_port, local_starter, start_stream_pair

LOOPBACK = {"LINKGUARD_PAIRS": "lo"}
_PHASE = re.compile(r"lg_nccl_driver: (connected|traffic) t=(\d+\.\d+)")


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def phases(text: str) -> dict[str, int]:
    return {m[1]: int(float(m[2]) * 1e9) for m in _PHASE.finditer(text)}


def test_sigusr2_ends_the_idle_stretch_and_traffic_follows() -> None:
    pair = start_stream_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}", 0.5,
                             ["--conns", "3", "--size", "4096", "--idle-s", "600"],
                             env=LOOPBACK, timeout=120)
    try:
        deadline = time.monotonic() + 30
        while sum("connected t=" in ln.text for ln in pair.lines) < 2:
            assert pair.running() and time.monotonic() < deadline, "no 'connected' lines"
            time.sleep(0.05)
        time.sleep(0.3)
        assert pair.running()  # idle: 600 s unless told
        assert not any("traffic t=" in ln.text for ln in pair.lines)
        for proc in pair.procs.values():
            proc.send_signal(signal.SIGUSR2)  # the drivers this test started
        srv, cli = pair.wait(timeout=60)
    finally:
        pair.kill()
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-2000:])
        assert "comms=3 idle_s=600.000" in r.stderr
        t = phases(r.stderr)
        assert t["traffic"] - t["connected"] >= 300_000_000
        # Nothing completed while idle: the first completion comes after the stretch ended.
        assert all(c["first_ns"] >= t["traffic"] and c["completed"] > 0
                   for c in r.report["comms"])


def test_idle_s_needs_a_timed_run() -> None:
    proc = subprocess.run([str(DRIVER), "--role", "client", "--mgmt", "127.0.0.1:1",
                           "--idle-s", "5"], capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 2 and "--idle-s S" in proc.stderr
