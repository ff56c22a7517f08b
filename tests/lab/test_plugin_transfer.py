"""The plugin moving data between two lab hosts, driven by lg_nccl_driver like NCCL's proxy.

Every byte is verified by the driver. Host b is the server (receiver), host a the client;
handles travel over the management network; dev 0 is the pair rail0 (primary) : rail1
(backup). Sized to keep the file under ~3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import (
    DRIVER,
    LGTCP_SO,
    LINKGUARD_SO,
    build_plugin,
    lab_starter,
    props,
    run_pair,
)

pytestmark = pytest.mark.lab
PAIRS = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}
GIB = 1 << 30


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def pair(lab, args, env=None, plugin=LINKGUARD_SO, timeout=90.0, port=7000, **kw):
    return run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                    f"{lab.mgmt_address('b')}:{port}", args, env={**PAIRS, **(env or {})},
                    plugin=plugin, timeout=timeout, **kw)


def assert_clean(*results) -> None:
    for r in results:
        assert r.ok, (r.report, r.stderr[-2000:])
        assert r.report["corrupt_messages"] == 0 and r.report["missing_messages"] == 0
        assert r.report["errors"] == []


@pytest.mark.parametrize("size,depth", [(65536, 8), (1 << 20, 2), (4 << 20, 8), (1000003, 1)],
                         ids=["64K-d8", "1M-d2", "4M-d8", "odd-d1"])
def test_one_gib_every_byte_verified(lab, size: int, depth: int) -> None:
    srv, cli = pair(lab, ["--size", str(size), "--depth", str(depth), "--bytes", str(GIB)])
    assert_clean(srv, cli)
    count = -(-GIB // size)
    assert srv.report["bytes_received"] == count * size >= GIB
    assert srv.report["completions"] == count
    assert srv.report["device"] == "rail0"


@pytest.mark.parametrize("version", [8, 9, 10, 11, 12])
def test_every_entry_point(lab, version: int) -> None:
    srv, cli = pair(lab, ["--version", str(version), "--size", "262144", "--bytes", str(GIB // 4),
                          "--bidir", "--conns", "2", "--recv-extra", "4096", "--optional"])
    assert_clean(srv, cli)
    assert srv.report["version"] == cli.report["version"] == version
    assert srv.report["bytes_received"] == cli.report["bytes_received"] == GIB // 4


def test_both_paths_are_built_and_backup_can_be_disabled(lab) -> None:
    srv, cli = pair(lab, ["--size", "65536", "--count", "16", "--verbose"])
    assert_clean(srv, cli)
    # Sender's dev 0: primary rail0, standby path on rail1, both connected.
    assert re.search(r"send conn \w+ on dev 0: 2 path\(s\)", cli.stderr), cli.stderr
    assert re.search(r"recv conn \w+ on dev 0: 2 path\(s\)", srv.stderr), srv.stderr
    srv, cli = pair(lab, ["--size", "65536", "--count", "16", "--verbose"],
                    env={"LINKGUARD_BACKUP": "0"})
    assert_clean(srv, cli)
    assert re.search(r"send conn \w+ on dev 0: 1 path\(s\)", cli.stderr), cli.stderr


def test_dead_backup_nic_at_connect_runs_unprotected(lab) -> None:
    lab.cut("b", 1)  # b's rail1 switch port down: SYNs to b's backup address go nowhere
    t0 = time.monotonic()
    srv, cli = pair(lab, ["--size", "65536", "--count", "64", "--verbose"],
                    env={"LINKGUARD_BACKUP_GRACE_MS": "500"})
    assert_clean(srv, cli)
    assert time.monotonic() - t0 < 10
    assert re.search(r"backup path via NIC rail1 to 198\.18\.1\.2:\d+ unavailable", cli.stderr)
    assert re.search(r"send conn \w+ on dev 0: 1 path\(s\)", cli.stderr)
    assert re.search(r"recv conn \w+ on dev 0: 1 path\(s\)", srv.stderr)


def test_dead_primary_nic_at_connect_is_a_clear_bounded_error(lab) -> None:
    lab.cut("b", 0)
    t0 = time.monotonic()
    srv, cli = pair(lab, ["--size", "65536", "--count", "16"], timeout=5,
                    env={"LINKGUARD_CONNECT_TIMEOUT_MS": "2000"})
    assert time.monotonic() - t0 < 30
    assert cli.report["errors"][0]["call"] == "connect" and not cli.ok
    assert re.search(r"connect from NIC rail0 \(198\.18\.0\.1\) to the peer.s primary NIC rail0 at "
                     r"198\.18\.0\.2:\d+ failed", cli.stderr)
    assert not srv.ok


def test_second_device_runs_on_rail1(lab) -> None:
    srv, cli = pair(lab, ["--dev", "1", "--size", "1048576", "--count", "64"])
    assert_clean(srv, cli)
    assert srv.report["device"] == "rail1"


def test_many_comms_at_once(lab) -> None:
    srv, cli = pair(lab, ["--conns", "64", "--bidir", "--size", "65536", "--count", "64",
                          "--depth", "8"])
    assert_clean(srv, cli)
    assert srv.report["completions"] == cli.report["completions"] == 2 * 64 * 64


def test_close_with_requests_in_flight(lab) -> None:
    srv, cli = pair(lab, ["--conns", "4", "--bidir", "--size", str(4 << 20), "--count", "40",
                          "--close-inflight"], timeout=60)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-2000:])  # every close returned success
        assert r.report["close_inflight"] is True and r.report["corrupt_messages"] == 0


def test_peer_killed_mid_transfer_gives_an_error_not_a_hang(lab) -> None:
    mgmt = f"{lab.mgmt_address('b')}:7001"
    common = ["--plugin", str(LINKGUARD_SO), "--mgmt", mgmt, "--size", str(1 << 20),
              "--count", "100000", "--timeout", "60"]
    env = dict(os.environ, **PAIRS)
    tx0 = lab.tx_bytes("a", 0)
    srv = lab.popen("b", [str(DRIVER), "--role", "server", *common], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.1)
    cli = lab.popen("a", [str(DRIVER), "--role", "client", *common], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Well into the transfer: on a busy machine the setup alone may take seconds.
    deadline = time.monotonic() + 60
    while lab.tx_bytes("a", 0) - tx0 < 32 << 20:
        assert cli.poll() is None and time.monotonic() < deadline, "no traffic on rail0"
        time.sleep(0.05)
    srv.send_signal(signal.SIGKILL)  # the server process we started, by PID
    srv.wait(timeout=10)
    t0 = time.monotonic()
    out, err = cli.communicate(timeout=30)
    assert time.monotonic() - t0 < 15
    report = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert cli.returncode == 1 and report["ok"] is False
    assert report["errors"] and report["errors"][0]["call"] in ("test", "isend")
    assert report["errors"][0]["code"] == 6  # ncclRemoteError
    assert report["corrupt_messages"] == 0
    assert "failed" in err and "rail0" in err  # the WARN names the NIC


def test_standalone_lgtcp_plugin(lab) -> None:
    srv, cli = pair(lab, ["--size", "1048576", "--bytes", str(GIB // 4), "--bidir"],
                    plugin=LGTCP_SO, env={"LGTCP_IFS": "rail0,rail1"})
    assert_clean(srv, cli)
    assert srv.report["plugin"] == "lgtcp" and srv.report["device"] == "rail0"


def test_automatic_pairing_in_a_host(lab) -> None:
    report, proc = props({}, run=lambda argv, **kw: lab.run("a", argv, **kw))
    assert proc.returncode == 0, proc.stderr
    names = [d["name"] for d in report["devices"]]
    assert names[:2] == ["rail0", "rail1"] and "lo" not in names


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_under_valgrind(lab) -> None:
    vg = ["valgrind", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite",
          "--track-fds=no", "-q"]
    srv, cli = pair(lab, ["--version", "12", "--conns", "2", "--bidir", "--size", "300000",
                          "--count", "40", "--depth", "4"], timeout=120, server_prefix=vg)
    assert_clean(srv, cli)
    assert srv.returncode == 0, srv.stderr[-4000:]
    assert "definitely lost" not in srv.stderr and "Invalid" not in srv.stderr
    # Closing with requests in flight, under valgrind too.
    srv, cli = pair(lab, ["--version", "12", "--conns", "2", "--bidir", "--size", "1000000",
                          "--count", "40", "--close-inflight"], timeout=120, server_prefix=vg,
                    port=7002)
    assert srv.returncode == 0 and srv.report["ok"], srv.stderr[-4000:]
    assert "definitely lost" not in srv.stderr and "Invalid" not in srv.stderr
