"""systemd tier: linkguard installed from its wheelhouse into a booted Debian 12, driven with
systemctl (root only; `make test-systemd`). One system per run, always powered off."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from machine import Machine
from rootfs import cached_rootfs

REPO = Path(__file__).resolve().parents[2]
INSIDE = "/mnt/linkguard"  # the wheelhouse's directory, bound read-only
# members of the groups linkguard and linkguard-admin, and of neither
READER, ADMIN, STRANGER = "reader", "oncall", "stranger"
NICS = ("rail0", "rail1")


def wheelhouse() -> Path:
    """LG_WHEELHOUSE (make test-systemd sets it), else `make wheelhouse` now."""
    if path := os.environ.get("LG_WHEELHOUSE"):
        return Path(path)
    out = subprocess.run(["make", "-s", "wheelhouse"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return REPO / out.strip().splitlines()[-1]


def install(machine: Machine, tarball: Path) -> None:
    """What docs/operators.md tells an operator to do on a host, then the test's NICs and users."""
    unpacked = tarball.name.removesuffix(".tar.gz")
    machine.sh(f"""
        mkdir -p /root/dist && tar -xzf {INSIDE}/{tarball.name} -C /root/dist
        /root/dist/{unpacked}/scripts/install.sh --nccl-conf
        systemd-sysusers
        systemctl daemon-reload
        useradd --no-create-home --groups linkguard {READER}
        useradd --no-create-home --groups linkguard-admin {ADMIN}
        useradd --no-create-home {STRANGER}
        for nic in {' '.join(NICS)}; do  # veth pairs: carrier while both ends are up
            ip link add "$nic" type veth peer name "$nic-peer"
            ip link set "$nic-peer" up && ip link set "$nic" up
        done
        echo 'interfaces = [{", ".join(f'"{n}"' for n in NICS)}]' >> /etc/linkguard/linkguard.toml
    """, timeout=300)


@pytest.fixture(scope="session")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    if os.geteuid() != 0:
        pytest.fail("the systemd tier needs root (systemd-nspawn)")
    tarball = wheelhouse()
    logs = tmp_path_factory.mktemp("systemd")
    m = Machine(cached_rootfs(), {str(tarball.parent): INSIDE}, logs / "console.log")
    with m:
        try:
            install(m, tarball)
            yield m
        finally:
            journal = m.run("journalctl", "--no-pager", "-u", "linkguardd", check=False)
            (logs / "linkguardd.journal").write_text(journal.stdout)
