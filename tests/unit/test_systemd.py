"""The systemd unit (systemd-analyze verify, and agreement with the daemon's settings), the
files generated from settings.py, and the sd_notify client."""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from linkguardd.api.server import MAX_CONNECTIONS_PER_SOCKET
from linkguardd.main import OPEN_FILES
from linkguardd.sdnotify import SdNotifier, watchdog_interval_s
from linkguardd.settings import (
    Settings,
    admin_socket_exposure,
    render_environment_file,
    render_example_toml,
)

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD / "linkguardd.service"


def directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd package")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify wants ExecStart's binary to exist; the installed one is $PREFIX/bin/linkguardd
    unit = tmp_path / "linkguardd.service"
    unit.write_text(re.sub(r"(?m)^ExecStart=\S+", f"ExecStart={sys.executable}",
                           UNIT.read_text()))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                         text=True, timeout=120, check=False)
    ours = [ln for ln in (out.stdout + out.stderr).splitlines() if "linkguardd" in ln]
    assert out.returncode == 0 and not ours, out.stdout + out.stderr  # unknown keys only warn


def test_unit_has_what_the_daemon_relies_on() -> None:
    d = directives(UNIT)
    assert d["Type"] == ["notify"] and d["WatchdogSec"] and d["Restart"] == ["on-failure"]
    assert d["ExecStart"] == ["/usr/local/bin/linkguardd"]
    assert d["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert d["EnvironmentFile"] == ["-/etc/default/linkguardd"]
    assert d["ProtectSystem"] == ["strict"] and d["NoNewPrivileges"] == ["yes"]
    assert "CAP_NET_ADMIN" in d["CapabilityBoundingSet"][0].split()
    assert "CAP_NET_ADMIN" in d["AmbientCapabilities"][0].split()
    # both API sockets' connection caps fit, whatever systemd's default (issue 30, finding 4)
    assert d["LimitNOFILE"] == [str(OPEN_FILES)]
    assert OPEN_FILES > 2 * MAX_CONNECTIONS_PER_SOCKET + 1024


def test_unit_agrees_with_the_default_settings() -> None:
    d, s = directives(UNIT), Settings()
    jobs, admin = ("/run/" + name for name in d["RuntimeDirectory"][0].split())
    # The admin socket alone in a directory of its own: jobs are given the other one.
    assert os.path.dirname(s.grpc_socket) == admin and not admin_socket_exposure(s)
    assert os.path.dirname(s.grpc_ro_socket) == jobs
    assert os.path.dirname(s.plugin_verdict_socket) == jobs
    assert d["RuntimeDirectoryPreserve"] == ["yes"]  # sockets and pods' mounts outlive restarts
    assert s.state_dir == "/var/lib/" + d["StateDirectory"][0]
    # The control file lives in the same root-owned runtime directory (the plugin trusts a
    # file no one else can write; /dev/shm is world-writable), which the unit lets it write.
    assert os.path.dirname(s.shm_path) == jobs


def test_the_socket_groups_are_the_ones_sysusers_creates() -> None:
    created = {ln.split()[1] for ln in (SYSTEMD / "linkguard.sysusers").read_text().splitlines()
               if ln.startswith("g ")}
    assert {Settings().admin_group, Settings().reader_group} == created


@pytest.mark.parametrize("name, render", [("linkguardd.default", render_environment_file),
                                          ("linkguard.toml", render_example_toml)])
def test_generated_files_match_settings(request: pytest.FixtureRequest, name: str,
                                        render: Callable[[], str]) -> None:
    path = SYSTEMD / name
    if request.config.getoption("--update-golden"):
        path.write_text(render())
    assert path.read_text() == render(), f"{path} is stale: run pytest --update-golden"


def test_sysusers_lines() -> None:
    lines = [ln.split() for ln in (SYSTEMD / "linkguard.sysusers").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines == [["g", "linkguard", "-"], ["g", "linkguard-admin", "-"]]


# --- sd_notify ----------------------------------------------------------------------------------
@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest,
                  tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        address = name = str(tmp_path / "notify")
    else:
        address, name = f"\0lg-test-notify-{os.getpid()}", f"@lg-test-notify-{os.getpid()}"
    sock.bind(address)
    sock.settimeout(30)
    yield sock, name
    sock.close()


def test_messages(notify_socket: tuple[socket.socket, str]) -> None:
    sock, name = notify_socket
    n = SdNotifier({"NOTIFY_SOCKET": name})
    assert n.enabled and n.ready("3 NICs,  all UP")
    assert sock.recv(4096) == b"READY=1\nSTATUS=3 NICs, all UP"
    assert n.watchdog() and sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping() and sock.recv(4096) == b"STOPPING=1"
    assert n.reloading()
    assert re.fullmatch(rb"RELOADING=1\nMONOTONIC_USEC=\d+", sock.recv(4096))


def test_outside_systemd_nothing_is_sent() -> None:
    n = SdNotifier({})
    assert not n.enabled and not n.ready() and not n.watchdog()
    assert n.watchdog_s is None


def test_a_vanished_socket_is_not_an_error(tmp_path: Path) -> None:
    assert SdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone")}).ready() is False


@pytest.mark.parametrize("env, expected", [
    ({"WATCHDOG_USEC": "10000000"}, 10.0),
    ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": str(os.getpid())}, 10.0),
    ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "x"}, None),
    ({}, None),
])
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval_s(env) == expected


def test_run_watchdog_pings_only_while_healthy(notify_socket: tuple[socket.socket, str]) -> None:
    sock, name = notify_socket
    n = SdNotifier({"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "2000"})
    checks: list[bool] = [True, False, True]

    def healthy() -> bool:
        return checks.pop(0) if checks else True

    async def main() -> None:
        task = asyncio.create_task(n.run_watchdog(healthy))
        received = [await asyncio.to_thread(sock.recv, 4096) for _ in range(2)]
        task.cancel()
        assert received == [b"WATCHDOG=1", b"WATCHDOG=1"]
        assert not checks  # the second check said "unhealthy" and sent nothing

    asyncio.run(main())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd package")
def test_the_units_exposure_stays_low_with_the_hardening_it_relies_on(tmp_path: Path) -> None:
    """Issue 30, goals: `systemd-analyze security` at most 3.1 with LimitNOFILE set, and
    ProtectProc=invisible, IPAddressDeny=any + IPAddressAllow=localhost (tests/systemd checks
    that the daemon works under them)."""
    d = directives(UNIT)
    assert d["ProtectProc"] == ["invisible"]
    assert d["IPAddressDeny"] == ["any"] and d["IPAddressAllow"] == ["localhost"]
    unit = tmp_path / "linkguardd.service"
    unit.write_text(UNIT.read_text())
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)],
                         capture_output=True, text=True, timeout=120, check=False)
    level = re.search(r"Overall exposure level for linkguardd\.service: (\d+\.\d)", out.stdout)
    assert level, out.stdout + out.stderr
    assert float(level.group(1)) <= 3.1, out.stdout
