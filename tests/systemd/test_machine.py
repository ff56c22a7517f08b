"""The booted system's tear-down: complete even when what ran inside it failed."""
from __future__ import annotations

from pathlib import Path

import pytest
from machine import Machine
from rootfs import cached_rootfs


def test_a_failed_check_still_powers_off_and_leaves_nothing(tmp_path: Path) -> None:
    machine = Machine(cached_rootfs(), {}, tmp_path / "console.log")
    with pytest.raises(AssertionError, match="a check failed"), machine:
        machine.run("systemd-run", "--unit=busy", "sleep", "infinity")  # a unit still running
        leader = machine.leader
        raise AssertionError("a check failed")
    assert machine.proc is not None and machine.proc.returncode == 0  # powered off, not killed
    assert not Path(f"/proc/{leader}").exists()
    assert machine.cgroups and not any(c.exists() for c in machine.cgroups)
    mounts = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    assert str(machine.rootfs) not in mounts
