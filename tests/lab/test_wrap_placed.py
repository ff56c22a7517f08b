"""Wrap mode's two completion models across cuts (docs/wrap-mode.md, "Completion").

Placed: a send completes on the inner plugin's own completion, without waiting for linkguard's
acknowledgement. The inner, linkguard's standalone lgtcp, completes a send only once its
receiver placed it, so LINKGUARD_INNER_PLACED's default ("auto") chooses placed for it.
Acknowledged (LINKGUARD_INNER_PLACED=0, what every plugin not known to place first gets): a
send completes on linkguard's acknowledgement. Across a cut on either host and the restore,
resync must stay exact in both: sends NCCL saw complete before the receiver counted them are
held by the receiver (never sent again from reused buffers), every other one is replayed. The
driver verifies every byte of every message, both directions, two connections each way
(test_failover.py's Run, with the wrap transport)."""

from __future__ import annotations

import pytest
from daemon_fixture import Daemons
from test_failover import (
    PER_ROLE,
    TRANSPORTS,
    WAIT_S,
    Run,
    built,  # noqa: F401  (autouse here too: the plugin is built)
    stamp,
)

from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

PLACED_SAYS = (r"wrap mode: a send completes when the inner plugin completes it"
               r".*\(linkguard's lgtcp completes a send on its receiver's")
ACKED_SAYS = (r"wrap mode: a send completes on linkguard's acknowledgement .*"
              r"\(LINKGUARD_INNER_PLACED=0\)")
MODELS = {
    "placed_by_default": ({}, PLACED_SAYS),
    "acknowledged": ({"LINKGUARD_INNER_PLACED": "0"}, ACKED_SAYS),
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_cut_on_each_side_then_restore(lab: Lab, daemons: Daemons, model: str) -> None:
    env, says = MODELS[model]
    run = Run(lab, daemons, env={**TRANSPORTS["wrap"], **env})
    assert run.lines(says), run.tail()
    for host in ("a", "b"):  # the sender's side of one direction, the receiver's of the other
        t = stamp()
        lab.cut(host, 0)
        run.wait_switches("failover", t)  # WAIT_S: a deadline, not a speed (bench-gray)
        run.assert_on(1)
        t = stamp()
        lab.restore(host, 0)
        run.wait_switches("reintegrated", t)
        run.assert_on(0)
        run.wait(lambda t=t: len(run.lines(r"backup path on NIC rail1 \(gen \d+\): inner "
                                           r"'lgtcp' (send|recv) comm #\d+ ready", t))
                 >= 2 * PER_ROLE, WAIT_S, "fresh inner comms on the backup paths")
    run.finish()
