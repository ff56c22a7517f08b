"""Wrap mode without a lab (no root): linkguard over an inner ncclNet plugin on loopback.

- data moves through the inner plugin (the standalone TCP transport, libnccl-net-lgtcp.so),
  every byte verified, through every ABI version linkguard exports;
- the device is named after its inner members and advertises their merged properties;
- an inner plugin that cannot be opened, is no ncclNet plugin, fails its init, has no devices
  or none that matches a NIC makes init fail cleanly with a WARN that names the problem.
The failover suite in wrap mode runs in the lab (tests/lab/test_failover.py, [wrap]).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import (
    LGTCP_SO,
    LINKGUARD_SO,
    VERSIONS,
    build_plugin,
    free_port,
    local_starter,
    props,
    run_pair,
)

FAKE_SO = LGTCP_SO.parent / "tests" / "libfake-inner.so"
WRAP = {"LINKGUARD_PAIRS": "lo", "LGTCP_IFS": "lo", "LINKGUARD_INNER": str(LGTCP_SO)}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()



def test_device_is_named_after_its_inner_members() -> None:
    report, proc = props(WRAP)
    assert proc.returncode == 0, proc.stderr
    dev = report["devices"][0]
    assert dev["name"] == "lo+none"  # the inner's device name (native mode says "lo")
    assert dev["ptrSupport"] == 1 and dev["maxRecvs"] == 8  # the inner lgtcp's, LINKGUARD_MAX_RECVS'
    report, proc = props({**WRAP, "LINKGUARD_MAX_RECVS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert report["devices"][0]["maxRecvs"] == 1  # at most LINKGUARD_MAX_RECVS


@pytest.mark.parametrize("version", VERSIONS)
def test_loopback_transfer_through_the_inner_plugin(version: int) -> None:
    srv, cli = run_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}",
                        ["--version", str(version), "--size", "300001", "--depth", "8",
                         "--count", "200", "--conns", "2", "--bidir", "--verbose"],
                        env=WRAP, plugin=LINKGUARD_SO, timeout=60)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-3000:])
        assert r.report["corrupt_messages"] == 0 and r.report["missing_messages"] == 0
        assert r.report["bytes_received"] == 2 * 200 * 300001
        # The data went through inner comms (one per connection and side), not our streams.
        assert r.stderr.count("inner 'lgtcp' send comm #0 ready") == 2, r.stderr[-3000:]
        assert r.stderr.count("inner 'lgtcp' recv comm #0 ready") == 2, r.stderr[-3000:]
        assert "WARN" not in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("env,culprit", [
    ({"LINKGUARD_INNER": "nosuch7"}, "cannot open libnccl-net-nosuch7.so"),
    ({"LINKGUARD_INNER": "libc.so.6"}, "exports none of ncclNetPlugin_v12..v8"),
    ({"LINKGUARD_INNER": str(LINKGUARD_SO)}, "LINKGUARD_INNER"),
    ({"LINKGUARD_INNER": str(FAKE_SO), "FAKE_INNER_MODE": "initfail"}, "init failed"),
    ({"LINKGUARD_INNER": str(FAKE_SO), "FAKE_INNER_MODE": "nodev"}, "has no devices"),
    # The fake's devices are fake0/fake1: neither is the NIC lo, by name or PCI path.
    ({"LINKGUARD_INNER": str(FAKE_SO)}, "cannot pair the inner plugin's devices"),
], ids=["missing", "not-a-plugin", "itself", "init-fails", "no-devices", "no-match"])
def test_a_bad_inner_plugin_fails_init_with_a_warn(env: dict[str, str], culprit: str) -> None:
    report, proc = props({**WRAP, **env})
    assert proc.returncode != 0
    assert report["ok"] is False and report["errors"][0]["call"] == "init"
    assert "WARN" in proc.stderr and culprit in proc.stderr, proc.stderr[-2000:]


def test_pairs_may_name_inner_devices(tmp_path: Path) -> None:
    """LINKGUARD_PAIRS=fake0 names an RDMA device: sysfs says it is the device of netdev lo
    (class/net/lo/device/infiniband/fake0, as the kernel lays it out), so lo carries the
    control channel and the inner device fake0 the data."""
    (tmp_path / "class/net/lo/device/infiniband/fake0").mkdir(parents=True)
    report, proc = props({**WRAP, "LINKGUARD_INNER": str(FAKE_SO), "LINKGUARD_PAIRS": "fake0",
                          "LINKGUARD_SYSFS_ROOT": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert [d["name"] for d in report["devices"]] == ["fake0+none"]
    # Without that sysfs entry the name matches no interface: a clear refusal.
    report, proc = props({**WRAP, "LINKGUARD_INNER": str(FAKE_SO), "LINKGUARD_PAIRS": "fake0"})
    assert proc.returncode != 0 and report["errors"][0]["call"] == "init"
    assert "inner device 'fake0' matches no network interface" in proc.stderr, proc.stderr
