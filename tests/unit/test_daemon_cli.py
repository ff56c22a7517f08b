"""`linkguardd --check-config`: the installed entry point, no root, nothing started.

A bad configuration must stop the daemon before anything starts, with exit status 2 and one
line on stderr that names the offending key (issue 3); a good one prints a summary and exits 0.
The real console script runs in a subprocess, so exit status and stream contents are what
systemd and an operator see.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LINKGUARDD = Path(sys.executable).parent / "linkguardd"


def check_config(tmp_path: Path, toml: str | None, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run --check-config with `toml` as the config file (None: a path that does not exist).

    Hermetic: an empty sysfs root (no host NIC is looked at), a shm path under tmp_path
    (asserted never created) and no LINKGUARD* variables from our environment."""
    config = tmp_path / "linkguard.toml"
    if toml is not None:
        config.write_text(toml)
    sysfs = tmp_path / "sys"
    sysfs.mkdir(exist_ok=True)
    shm = tmp_path / "shm"
    argv = [str(LINKGUARDD), "--check-config", "--config", str(config), "--sysfs-root",
            str(sysfs), "--shm-path", str(shm), "--metrics-address", "", *flags]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert not shm.exists(), "--check-config must not create the shared-memory file"
    return proc


@pytest.mark.parametrize(("toml", "flags", "key"), [
    ("hold_down = 500\n", (), "hold_down"),  # unknown key (a typo of hold_down_ms)
    ('hold_down_ms = "fast"\n', (), "hold_down_ms"),  # wrong type
    ("heartbeat_interval_ms = 500\n", (), "heartbeat_interval_ms"),  # above its maximum
    ('interfaces = ["rail0", "rail1"]\n[pairs]\nrail0 = "rail0"\n', (), "pairs"),  # itself
    ('interfaces = ["rail0", "rail0"]\n', (), "interfaces"),  # listed twice
    ("flap_reuse_threshold = 3000.0\n", (), "flap_reuse_threshold"),  # above suppress
    ('log_format = "xml"\n', (), "log_format"),  # not one of the choices
    ("", ("--hold-down-ms", "-5"), "--hold-down-ms"),  # a bad flag names the flag
], ids=["unknown", "type", "maximum", "self-pair", "duplicate", "together", "choice", "flag"])
def test_bad_config_exits_2_naming_the_key(tmp_path: Path, toml: str, flags: tuple[str, ...],
                                           key: str) -> None:
    proc = check_config(tmp_path, toml, *flags)
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert key in lines[0], lines[0]
    assert lines[0].startswith("linkguardd: ")
    assert proc.stdout == ""


def test_unreadable_config_exits_2(tmp_path: Path) -> None:
    missing = check_config(tmp_path, None)
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("config file not found")
    broken = check_config(tmp_path, "hold_down_ms = \n")
    assert broken.returncode == 2
    assert len(broken.stderr.strip().splitlines()) == 1 and "not valid TOML" in broken.stderr


def test_good_config_exits_0(tmp_path: Path) -> None:
    proc = check_config(tmp_path, 'interfaces = ["rail0", "rail1"]\nhold_down_ms = 500\n')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("configuration ok: nics=rail0,rail1 ")
    assert "rail0:rail1" in proc.stdout


def test_version_names_the_package_and_the_shm_layout() -> None:
    from linkguardd.shm.layout import LG_SHM_VERSION

    proc = subprocess.run([str(LINKGUARDD), "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("linkguardd 0.1.0 (shm layout ")
    assert f"shm layout {LG_SHM_VERSION}," in proc.stdout


def test_the_ro_socket_must_differ_from_the_admin_socket(tmp_path: Path) -> None:
    proc = check_config(tmp_path, 'grpc_socket = "/run/x.sock"\ngrpc_ro_socket = "/run/x.sock"\n')
    assert proc.returncode == 2 and "grpc_ro_socket: must differ from grpc_socket" in proc.stderr


@pytest.mark.parametrize("soft, hard, expected", [(256, 8192, "4096 8192"),
                                                  (256, 1024, "1024 1024"),
                                                  (8192, 8192, "8192 8192")])
def test_the_daemon_raises_its_open_file_limit_up_to_the_hard_one(soft: int, hard: int,
                                                                  expected: str) -> None:
    """Issue 30, finding 4: a soft limit of 1024 (systemd's default, many containers') is too
    few for both sockets' connection caps; the daemon takes what the hard limit allows."""
    code = ("import resource; from linkguardd.main import raise_open_file_limit; "
            "raise_open_file_limit(); print(*resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run(["prlimit", f"--nofile={soft}:{hard}", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.split() == expected.split(), out.stderr


def test_a_state_dir_others_can_write_stops_the_daemon_with_a_clear_error(
        tmp_path: Path) -> None:
    """Issue 30, finding 6: drains planted there would be published as the operator's."""
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o777)
    proc = check_config(tmp_path, "", "--state-dir", str(shared))
    assert proc.returncode == 2 and proc.stderr.startswith(f"linkguardd: state_dir {shared} is "
                                                           "writable by its group or others")
