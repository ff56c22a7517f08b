"""Backup NIC selection: configured pairs first, else the closest other NIC in PCIe/NUMA terms.

choose_backups() is a pure function over NicTopology rows; read_topology() builds those rows
from a sysfs root (injectable: tests use a fake tree in the real layout).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

NO_BACKUP = -1  # shm ABI: the NIC table's backup index when a NIC has none

# A host bridge directory (devices/pci0000:00) and a PCI function (0000:03:00.0), as named by
# drivers/pci/probe.c (pci_create_root_bus: "pci%04x:%02x"; pci_setup_device: "%04x:%02x:%02x.%d").
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_PCI_FUNCTION = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# Two NICs whose upstream chains share the host bridge and at least one PCI bridge below it sit
# behind the same root port or PCIe switch (or on the same multi-port card).
_SAME_SWITCH_DEPTH = 2


class PairingError(ValueError):
    """Configured pairs that cannot be applied to the monitored NICs."""


@dataclass(frozen=True)
class NicTopology:
    """Where one NIC sits: its PCI ancestry and NUMA node (both unknown for virtual NICs)."""

    ifname: str
    pci_chain: tuple[str, ...] = ()  # host bridge first, the NIC's own function last
    numa_node: int | None = None  # None: unknown (sysfs says -1, or no device)

    @property
    def pci_address(self) -> str:
        return self.pci_chain[-1] if self.pci_chain else ""


def choose_backups(nics: Sequence[NicTopology],
                   pairs: Mapping[str, str] | None = None) -> list[int]:
    """The backup of each NIC as an index into `nics` (NO_BACKUP when there is none).

    Configured `pairs` (primary -> backup) win. Otherwise the candidate sharing the deepest PCI
    bridge (same PCIe switch), then one on the same NUMA node, then the next rail in list order,
    wrapping; ties go to the nearest following rail, so NICs of one group back each other up in
    a ring and no NIC carries two primaries' traffic while another backs up none.
    """
    index = {n.ifname: i for i, n in enumerate(nics)}
    out: list[int] = []
    for i, nic in enumerate(nics):
        wanted = (pairs or {}).get(nic.ifname)
        if wanted is not None:
            if wanted == nic.ifname:
                raise PairingError(f"pairs: {wanted} is paired with itself")
            if wanted not in index:
                raise PairingError(f"pairs: backup {wanted} of {nic.ifname} is not monitored")
            out.append(index[wanted])
            continue
        n = len(nics)
        candidates = [(i + step) % n for step in range(1, n)]  # following rails, wrapping
        if not candidates:
            out.append(NO_BACKUP)
            continue
        out.append(max(candidates, key=lambda j: _closeness(nic, nics[j], (j - i) % n)))
    unknown = sorted(set(pairs or {}) - set(index))
    if unknown:
        raise PairingError(f"pairs: {', '.join(unknown)} is not monitored")
    return out


def backups_by_name(nics: Sequence[NicTopology],
                    pairs: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """choose_backups() keyed by name (None: no backup)."""
    return {n.ifname: (nics[j].ifname if j != NO_BACKUP else None)
            for n, j in zip(nics, choose_backups(nics, pairs))}


def _closeness(a: NicTopology, b: NicTopology, distance: int) -> tuple[int, bool, int]:
    shared = _common_prefix(a.pci_chain[:-1], b.pci_chain[:-1])
    same_numa = a.numa_node is not None and a.numa_node == b.numa_node
    return (shared if shared >= _SAME_SWITCH_DEPTH else 0, same_numa, -distance)


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ---- sysfs reader --------------------------------------------------------------------------
def read_topology(ifnames: Iterable[str], sysfs_root: str | Path = "/sys") -> list[NicTopology]:
    """NicTopology of each name from <root>/class/net/<if>/device (Documentation/ABI/testing/
    sysfs-class-net: a link to the parent device). Missing or virtual NICs get empty rows."""
    root = Path(os.path.realpath(sysfs_root))
    return [_read_one(name, root) for name in ifnames]


def list_pci_netdevs(sysfs_root: str | Path = "/sys") -> list[str]:
    """Netdevs backed by a PCI device, in natural name order (rail2 before rail10)."""
    root = Path(os.path.realpath(sysfs_root))
    try:
        names = os.listdir(root / "class" / "net")
    except OSError:
        return []
    found = [n for n in names if _read_one(n, root).pci_chain]
    return sorted(found, key=_natural)


def _natural(name: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _read_one(ifname: str, root: Path) -> NicTopology:
    link = root / "class" / "net" / ifname / "device"
    if not link.exists():
        return NicTopology(ifname)  # absent, or virtual (veth, bridge): no device link
    real = Path(os.path.realpath(link))
    try:
        parts = real.relative_to(root / "devices").parts
    except ValueError:
        return NicTopology(ifname)
    chain = tuple(p for p in parts if _HOST_BRIDGE.match(p) or _PCI_FUNCTION.match(p))
    if not chain or not _PCI_FUNCTION.match(chain[-1]):
        return NicTopology(ifname)  # not on PCI (platform or USB device)
    # numa_node lives on the PCI function (Documentation/ABI/testing/sysfs-bus-pci); a virtio
    # netdev's device is the virtio child, so walk up to the function.
    func_dir = real
    while func_dir.name != chain[-1]:
        func_dir = func_dir.parent
    return NicTopology(ifname, chain, _read_numa(func_dir / "numa_node"))


def _read_numa(path: Path) -> int | None:
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None  # -1: the platform reports no NUMA affinity
