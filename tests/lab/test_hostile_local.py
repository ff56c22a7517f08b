"""Issue 30: what one local user can do to a live daemon through the surfaces open to it.

Each test attacks a real linkguardd the way the review did (connections to the read-only
socket, datagrams to the verdict socket) and checks that the operator's surfaces still work.
Every loop is bounded in count; every wait is bounded in time.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from daemon_fixture import Daemons
from ops_helpers import describe, flood, open_files, run_cli

from linkguard_lab.lab import Lab
from linkguardd.api.server import MAX_CONNECTIONS_PER_SOCKET

pytestmark = pytest.mark.lab

FAST = ("--interfaces", "rail0,rail1", "--hold-down-ms", "500")
SYSTEMD_DEFAULT_NOFILE = 1024  # systemd's default soft limit, what the unit had before
FLOOD = 1100  # connections, as in the review: more than that limit


def test_a_connection_flood_on_the_read_only_socket_leaves_the_admin_socket_working(
        lab: Lab, daemons: Daemons) -> None:
    """Finding 4: 1100 idle connections to the read-only socket once exhausted a daemon with
    the default 1024 open files, and `status` and `drain` on the admin socket timed out.
    Each socket now has its own connection cap, below the limit together."""
    assert 2 * MAX_CONNECTIONS_PER_SOCKET < SYSTEMD_DEFAULT_NOFILE - 100
    limit = f"--nofile={SYSTEMD_DEFAULT_NOFILE}:{SYSTEMD_DEFAULT_NOFILE}"
    d = daemons.start(lab, "a", *FAST, wrapper=("prlimit", limit, "--"))
    with open_files(FLOOD + 256):
        held = flood(str(d.grpc_ro_socket), FLOOD)
        try:
            daemon_fds = len(list(Path(f"/proc/{d.pid}/fd").iterdir()))
            assert daemon_fds < SYSTEMD_DEFAULT_NOFILE - 100, daemon_fds
            status = run_cli(lab, "a", d.grpc_socket, "--timeout", "10", "status")
            assert status.returncode == 0, describe(status)
            drain = run_cli(lab, "a", d.grpc_socket, "--timeout", "10", "drain", "rail0",
                            "--reason", "flood", "--force")
            assert drain.returncode == 0, describe(drain)
        finally:
            for sock in held:
                sock.close()
    assert "Too many open files" not in d.stderr(), d.stderr()[-2000:]
    # Once the flood is gone, readers are served again.
    again = run_cli(lab, "a", d.grpc_ro_socket, "--timeout", "10", "status", "rail1")
    assert again.returncode == 0, describe(again)
    d.stop()
