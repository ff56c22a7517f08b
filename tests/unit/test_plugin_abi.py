"""The plugin's ABI surface and a loopback smoke test, no root needed.

- exactly ncclNetPlugin_v8..v12 are exported (nothing else of ours), from both plugins;
- the exported tables have the documented shape (read with ctypes without calling anything);
- init/devices/getProperties through each version (lg_nccl_driver --props, a C logger);
- a bad LINKGUARD_PAIRS fails init with a WARN naming the culprit;
- two driver processes move data over loopback through every version, and the driver itself
  catches a corrupted byte.
"""

from __future__ import annotations

import ctypes
import subprocess
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

EXPORTS = {f"ncclNetPlugin_v{v}" for v in VERSIONS}
LOOPBACK = {"LINKGUARD_PAIRS": "lo", "LGTCP_IFS": "lo"}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def defined_dynamic_symbols(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("lib", [LINKGUARD_SO, LGTCP_SO], ids=["linkguard", "lgtcp"])
def test_exports_exactly_the_five_tables(lib: Path) -> None:
    assert defined_dynamic_symbols(lib) == EXPORTS



# Members after `name`, in order (reference §1.4-1.8), and which may be NULL.
V8_MEMBERS = ["init", "devices", "getProperties", "listen", "connect", "accept", "regMr",
              "regMrDmaBuf", "deregMr", "isend", "irecv", "iflush", "test", "closeSend",
              "closeRecv", "closeListen", "getDeviceMr", "irecvConsumed"]
MEMBERS = {8: V8_MEMBERS, 9: V8_MEMBERS + ["makeVDevice"], 10: V8_MEMBERS + ["makeVDevice"],
           11: V8_MEMBERS + ["makeVDevice", "finalize", "setNetAttr"],
           12: V8_MEMBERS + ["makeVDevice", "finalize", "setNetAttr"]}
MAY_BE_NULL = {"getDeviceMr", "irecvConsumed", "makeVDevice", "setNetAttr"}


@pytest.mark.parametrize("lib,name", [(LINKGUARD_SO, b"linkguard"), (LGTCP_SO, b"lgtcp")],
                         ids=["linkguard", "lgtcp"])
@pytest.mark.parametrize("version", VERSIONS)
def test_table_shape(lib: Path, name: bytes, version: int) -> None:
    so = ctypes.CDLL(str(lib))
    members = MEMBERS[version]
    table = (ctypes.c_void_p * (1 + len(members))).in_dll(so, f"ncclNetPlugin_v{version}")
    assert ctypes.cast(table[0], ctypes.c_char_p).value == name
    for i, member in enumerate(members, start=1):
        if member not in MAY_BE_NULL:
            assert table[i], f"v{version}.{member} is NULL"
    # v11+: NCCL calls finalize unconditionally.
    if version >= 11:
        assert table[1 + members.index("finalize")]


@pytest.mark.parametrize("version", VERSIONS)
def test_properties_every_version(version: int) -> None:
    report, proc = props(LOOPBACK, version=version)
    assert proc.returncode == 0, proc.stderr
    assert report["version"] == version and report["plugin"] == "linkguard"
    assert report["devices_rc"] == 0
    [dev] = report["devices"]
    assert dev["rc"] == 0 and dev["name"] == "lo"
    assert dev["pciPath"] is None  # virtual NIC
    assert dev["ptrSupport"] == 1 and dev["netDeviceType"] == 0
    assert dev["maxRecvs"] == 8 and dev["maxComms"] > 0 and dev["guid"] != 0  # LINKGUARD_MAX_RECVS
    assert dev["speed"] > 0
    assert 0 < dev["maxP2pBytes"] <= 1 << 40
    if version >= 9:
        assert dev["vdevs"] == 1


@pytest.mark.parametrize("pairs,culprit", [
    ("lo:lo", "'lo' is paired with itself"),
    ("lo:nosuch7", "unknown interface 'nosuch7'"),
    ("nosuch7", "unknown interface 'nosuch7'"),
])
def test_bad_pairs_fail_init_with_a_warn(pairs: str, culprit: str) -> None:
    report, proc = props({"LINKGUARD_PAIRS": pairs})
    assert proc.returncode != 0
    assert report["ok"] is False and report["errors"][0]["call"] == "init"
    assert "WARN" in proc.stderr and culprit in proc.stderr and "LINKGUARD_PAIRS" in proc.stderr


def loopback_pair(args: list[str], plugin: Path = LINKGUARD_SO, timeout: float = 60):
    return run_pair(local_starter, local_starter, f"127.0.0.1:{free_port()}", args,
                    env=LOOPBACK, plugin=plugin, timeout=timeout)


@pytest.mark.parametrize("version", VERSIONS)
def test_loopback_transfer_every_version(version: int) -> None:
    srv, cli = loopback_pair(["--version", str(version), "--size", "300001", "--depth", "8",
                              "--count", "200", "--conns", "2", "--bidir", "--recv-extra", "77"])
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr)
        assert r.report["version"] == version
        assert r.report["corrupt_messages"] == 0 and r.report["missing_messages"] == 0
    assert srv.report["bytes_received"] == 2 * 200 * 300001
    assert cli.report["bytes_received"] == 2 * 200 * 300001


def test_loopback_lgtcp() -> None:
    srv, cli = loopback_pair(["--size", "65536", "--count", "500", "--optional"], plugin=LGTCP_SO)
    assert srv.ok and cli.ok, (srv.report, srv.stderr, cli.stderr)
    assert srv.report["plugin"] == "lgtcp"


def test_driver_catches_a_corrupted_byte() -> None:
    srv, cli = loopback_pair(["--size", "4096", "--count", "64", "--corrupt"])
    assert cli.ok  # the sender cannot know
    assert srv.returncode == 1 and srv.report["ok"] is False
    assert srv.report["corrupt_messages"] == 1
    assert srv.report["completions"] == 64 and srv.report["errors"] == []
    assert "wrong byte at 2048" in srv.stderr


@pytest.mark.parametrize("value,advertised", [("1", 1), ("3", 3), ("9", 8), ("none", 8)])
def test_grouped_receives_are_advertised_as_set(value: str, advertised: int) -> None:
    """maxRecvs is LINKGUARD_MAX_RECVS, 8 by default (conn.h: tags match across every posted
    group, as NCCL's IB transport matches them); a bad value is named and the default kept."""
    report, proc = props({**LOOPBACK, "LINKGUARD_MAX_RECVS": value})
    assert proc.returncode == 0, proc.stderr
    assert report["devices"][0]["maxRecvs"] == advertised
    if value in ("9", "none"):
        assert "LINKGUARD_MAX_RECVS" in proc.stderr and value in proc.stderr
