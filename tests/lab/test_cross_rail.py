"""Cross-rail connections (issue #13), in both transports: NCCL's cross-NIC rings connect
dev 0 of one host to dev 1 of another, so a path joins NICs of two rails. On a routed fabric
(the lab's `routed` variant: the switch routes between the rail subnets) it works, every byte
verified and the bytes seen on the NICs of both rails; on a rail-only fabric it fails at once
with a WARN naming both NICs and their addresses (and a NIC that is down on the same rail is
not mistaken for that). That such a connection survives a cut of its
routed primary is in test_failover.py (test_cross_rail_cut_then_restore_on_a_routed_fabric).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import LGTCP_SO, LINKGUARD_SO, build_plugin, lab_starter, run_pair
from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab
PAIRS = {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"}
TRANSPORTS = {
    "native": PAIRS,
    "wrap": {**PAIRS, "LINKGUARD_INNER": str(LGTCP_SO), "LGTCP_IFS": "rail0,rail1"},
}
# Client a on dev 0 (rail0, backup rail1), server b on dev 1 (rail1, backup rail0): every path
# joins two rails, both ways.
CROSS = {"client_args": ["--dev", "0"], "server_args": ["--dev", "1"]}
MIB = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def nic_bytes(lab: Lab, host: str, rail: int, way: str) -> int:
    value = lab.sysfs(host, f"rail{rail}", f"statistics/{way}_bytes")
    assert value is not None, (host, rail, way)
    return int(value)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_cross_rail_connect_works_on_a_routed_fabric(lab_factory, transport: str) -> None:
    lab = lab_factory(routed=True)
    total = 64 * MIB
    counters = [("a", 0, "tx"), ("b", 1, "rx"), ("b", 1, "tx"), ("a", 0, "rx"),
                ("a", 1, "tx"), ("b", 0, "tx")]
    before = {c: nic_bytes(lab, *c) for c in counters}
    srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                        f"{lab.mgmt_address('b')}:7140",
                        ["--bidir", "--size", str(MIB), "--bytes", str(total), "--verbose"],
                        env=TRANSPORTS[transport], plugin=LINKGUARD_SO, timeout=60, **CROSS)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-3000:])
        assert r.report["errors"] == [] and r.report["corrupt_messages"] == 0
        assert r.report["missing_messages"] == 0 and r.report["bytes_received"] == total
        assert "[plugin WARN" not in r.stderr, r.stderr[-3000:]
    # Both paths of every connection were built: the standby joins the other two rails.
    assert re.search(r"send conn \w+ on dev 0: 2 path\(s\)", cli.stderr), cli.stderr[-3000:]
    assert re.search(r"send conn \w+ on dev 1: 2 path\(s\)", srv.stderr), srv.stderr[-3000:]
    moved = {c: nic_bytes(lab, *c) - before[c] for c in counters}
    # The data left a's rail0 and arrived on b's rail1 (and back): it crossed the router.
    for c in counters[:4]:
        assert moved[c] >= total, moved
    # The standby paths (a's rail1, b's rail0) carried only control messages.
    assert moved[("a", 1, "tx")] < total / 20 and moved[("b", 0, "tx")] < total / 20, moved


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_cross_rail_connect_on_a_rail_only_fabric_says_why(lab, transport: str) -> None:
    """Where the rails are not routed to each other (the default lab), the connect fails within
    its timeout with a WARN naming the NICs at both ends, their addresses and the reason,
    instead of a bare "No route to host"."""
    assert not lab.routed
    _srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                         f"{lab.mgmt_address('b')}:7130", ["--size", "4096", "--count", "4"],
                         env=TRANSPORTS[transport], plugin=LINKGUARD_SO, timeout=6, **CROSS)
    assert not cli.ok and cli.report["errors"][0]["call"] == "connect", cli.report
    warn = [ln for ln in cli.stderr.splitlines() if "WARN" in ln and "connect from NIC" in ln]
    assert warn, cli.stderr
    assert re.search(r"connect from NIC rail0 \(198\.18\.0\.1\) to the peer's primary NIC rail1 "
                     r"at 198\.18\.1\.2:\d+( failed)?: ", warn[0]), warn[0]
    assert "not routed to each other" in warn[0], warn[0]


def test_a_dead_peer_nic_on_the_same_rail_is_not_called_a_routing_problem(lab) -> None:
    """No answer on the NIC's own subnet (the peer's rail0 cut: its ARP goes unanswered) is a
    NIC or link that is down, not rails that are not routed to each other."""
    lab.cut("b", 0)
    _srv, cli = run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                         f"{lab.mgmt_address('b')}:7150", ["--size", "4096", "--count", "4"],
                         env={**PAIRS, "LINKGUARD_CONNECT_TIMEOUT_MS": "6000"},
                         plugin=LINKGUARD_SO, timeout=7)  # the server waits in vain that long
    assert not cli.ok and cli.report["errors"][0]["call"] == "connect", cli.report
    warn = [ln for ln in cli.stderr.splitlines() if "WARN" in ln and "connect from NIC" in ln]
    assert warn, cli.stderr
    assert re.search(r"connect from NIC rail0 \(198\.18\.0\.1\) to the peer's primary NIC rail0 "
                     r"at 198\.18\.0\.2:\d+ failed: ", warn[0]), warn[0]
    assert "own subnet" in warn[0] and "not routed" not in warn[0], warn[0]
