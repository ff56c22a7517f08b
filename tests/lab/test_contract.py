"""Callers with the habits of real ones (issue #13), on two lab hosts, in both transports: what
NCCL's own transports let succeed must succeed through linkguard too.

- A receiver that closes right after its last receive (no barrier): the sends it received were
  delivered, so none of them may fail, even when its last ACK is still unread on the sender's
  side when the goodbye arrives on the other path.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import LGTCP_SO, LINKGUARD_SO, build_plugin, lab_starter, run_pair

pytestmark = pytest.mark.lab
TRANSPORTS = {
    "native": {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0"},
    "wrap": {"LINKGUARD_PAIRS": "rail0:rail1,rail1:rail0", "LINKGUARD_INNER": str(LGTCP_SO),
             "LGTCP_IFS": "rail0,rail1"},
}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def pair(lab, args, env, port):
    return run_pair(lab_starter(lab, "b"), lab_starter(lab, "a"),
                    f"{lab.mgmt_address('b')}:{port}", args, env=env, plugin=LINKGUARD_SO,
                    timeout=60.0)


def assert_clean(*results) -> None:
    for r in results:
        assert r.ok, (r.report, r.stderr[-3000:])
        assert r.report["corrupt_messages"] == 0 and r.report["missing_messages"] == 0
        assert r.report["errors"] == []
        assert not re.search(r"with [1-9]\d* request\(s\) in flight", r.stderr), r.stderr[-3000:]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_receiver_closes_right_after_its_last_receive(lab, transport: str) -> None:
    env = TRANSPORTS[transport]
    # (a) one 4 KiB message each way on a send and a receive comm per side; each side checks
    # what it received and closes its comms at once. (The race it exercises, a goodbye read
    # before the last ACK, is made deterministic in plugin/tests/test_lying_peer.c.)
    for round_ in range(4):
        srv, cli = pair(lab, ["--size", "4096", "--count", "1", "--bidir", "--eager-close",
                              "--verbose"], env, 7100 + round_)
        assert_clean(srv, cli)
        assert srv.report["completions"] == cli.report["completions"] == 2
    # (b) a ring of the two: 32 receives of 5,200 bytes and 32 sends of 5,000 each way, every
    # buffer deregistered, then the send and receive comms closed (listen comms close after accept).
    srv, cli = pair(lab, ["--size", "5000", "--recv-extra", "200", "--count", "32", "--depth", "32",
                          "--bidir", "--eager-close", "--verbose"], env, 7110)
    assert_clean(srv, cli)
    assert srv.report["completions"] == cli.report["completions"] == 64


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_close_with_requests_in_flight_then_reconnect(lab, transport: str) -> None:
    """As NCCL does on abort: deregister and close every comm with requests still posted, then
    open new comms for the next round, ten times in one process: every round's new comms
    connect and move their share without an error, and every close succeeds."""
    srv, cli = pair(lab, ["--conns", "2", "--bidir", "--size", str(1 << 20), "--count", "16",
                          "--depth", "8", "--close-inflight", "--rounds", "10"],
                    TRANSPORTS[transport], 7120)
    for r in (srv, cli):
        assert r.ok, (r.report, r.stderr[-3000:])
        assert r.report["rounds"] == 10 and r.report["rounds_ok"] == 10, r.stderr[-3000:]
        assert r.report["corrupt_messages"] == 0

