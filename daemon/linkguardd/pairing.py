"""Backup sets: configured ones first, else the closest other NIC in PCIe/NUMA terms.

A NIC's backup set is an ordered list of other NICs, nearest first; the plugin spreads a device's
connections' backup paths over it (docs/failover.md, "Backup sets"). A pair is a set of one.
backup_sets() is a pure function over NicTopology rows; read_topology() builds those rows from a
sysfs root (injectable: tests use a fake tree in the real layout).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from linkguardd.shm.layout import LG_NO_BACKUP, LG_SHM_MAX_BACKUPS

NO_BACKUP = LG_NO_BACKUP  # the NIC table's backup index when a NIC has none
MAX_SET = LG_SHM_MAX_BACKUPS  # a set is published whole in the NIC's shm entry
ALL = "all"  # a set value: every other monitored NIC
EVERY_NIC = "*"  # a pairs key: the set of every NIC not listed by name (only `all`)
MEMBER_SEP = "+"  # rail1+rail2+rail3
# Locality policies, nearest first within a set: same PCI switch, then the same NUMA node, then
# the rest (same-switch); NUMA node only (numa); none, list order (any).
LOCALITY = ("same-switch", "numa", "any")
# dev_valid_name() in net/core/dev.c: < IFNAMSIZ (16) bytes, no '/', ':' or whitespace. '+'
# is allowed by the kernel but is the set separator here.
IFNAME = re.compile(r"^[^/:\s]{1,15}$")

# A host bridge directory (devices/pci0000:00) and a PCI function (0000:03:00.0), as named by
# drivers/pci/probe.c (pci_create_root_bus: "pci%04x:%02x"; pci_setup_device: "%04x:%02x:%02x.%d").
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_PCI_FUNCTION = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# Two NICs whose upstream chains share the host bridge and at least one PCI bridge below it sit
# behind the same root port or PCIe switch (or on the same multi-port card).
_SAME_SWITCH_DEPTH = 2


class PairingError(ValueError):
    """Configured backup sets that cannot be applied to the monitored NICs."""


@dataclass(frozen=True)
class NicTopology:
    """Where one NIC sits: its PCI ancestry and NUMA node (both unknown for virtual NICs)."""

    ifname: str
    pci_chain: tuple[str, ...] = ()  # host bridge first, the NIC's own function last
    numa_node: int | None = None  # None: unknown (sysfs says -1, or no device)

    @property
    def pci_address(self) -> str:
        return self.pci_chain[-1] if self.pci_chain else ""


# ---- configuration syntax -----------------------------------------------------------------
def parse_set(primary: str, text: str) -> tuple[str, ...] | None:
    """The members of one configured set, in the operator's order; None for `all`.

    Raises PairingError naming what is wrong: a bad name, an empty member, a duplicate, the NIC
    itself, `all` mixed with names, or more members than the shm entry holds."""
    where = f"pairs: {primary}"
    if primary == EVERY_NIC:
        if text.strip() != ALL:
            raise PairingError(f"pairs: {EVERY_NIC} takes only {ALL} (every other NIC), got "
                               f"{text!r}")
        return None
    if not IFNAME.match(primary) or MEMBER_SEP in primary:
        raise PairingError(f"pairs: {primary!r} is not a valid netdev name")
    members = tuple(m.strip() for m in text.split(MEMBER_SEP))
    if members == (ALL,):
        return None
    if "" in members:
        raise PairingError(f"{where}: empty member in backup set {text!r} (expected NAME or "
                           f"NAME{MEMBER_SEP}NAME..., or {ALL})")
    if ALL in members:
        raise PairingError(f"{where}: {ALL} cannot be combined with names ({text!r})")
    for name in members:
        if not IFNAME.match(name):
            raise PairingError(f"{where}: {name!r} is not a valid netdev name")
    if primary in members:
        raise PairingError(f"{where} is in its own backup set (a NIC cannot back up itself)")
    dup = sorted({m for m in members if members.count(m) > 1})
    if dup:
        raise PairingError(f"{where}: {', '.join(dup)} listed more than once in {text!r}")
    if len(members) > MAX_SET:
        raise PairingError(f"{where}: {len(members)} backups, at most {MAX_SET} "
                           "(LG_SHM_MAX_BACKUPS)")
    return members


def check_pairs(pairs: Mapping[str, str], known: Sequence[str] = ()) -> None:
    """Every configured set parses and names only NICs of `known` (when given)."""
    for primary, text in pairs.items():
        members = parse_set(primary, text)
        for name in (primary, *(members or ())):
            if known and name != EVERY_NIC and name not in known:
                raise PairingError(f"pairs: {name} is not in interfaces ({', '.join(known)})")


def format_set(members: Sequence[str]) -> str:
    """rail1+rail2, as the configuration spells a set."""
    return MEMBER_SEP.join(members)


# ---- choosing ------------------------------------------------------------------------------
def backup_sets(nics: Sequence[NicTopology], pairs: Mapping[str, str] | None = None,
                locality: str = LOCALITY[0]) -> list[list[int]]:
    """Each NIC's backup set as indices into `nics`, nearest first (empty: none).

    A configured set (`pairs`, by name, else its `*` entry) is ordered by `locality`, ties kept
    in the operator's order; `all` is every other NIC, ties in ring order (the following rails,
    wrapping), at most MAX_SET. A NIC not configured gets the one nearest NIC, so NICs of one
    locality group back each other up in a ring and no NIC carries two primaries' traffic while
    another backs up none.
    """
    if locality not in LOCALITY:
        raise PairingError(f"locality: must be one of {', '.join(LOCALITY)}; got {locality!r}")
    pairs = pairs or {}
    index = {n.ifname: i for i, n in enumerate(nics)}
    unknown = sorted(set(pairs) - set(index) - {EVERY_NIC})
    if unknown:
        raise PairingError(f"pairs: {', '.join(unknown)} is not monitored")
    configured = {name: parse_set(name, text) for name, text in pairs.items()}
    out: list[list[int]] = []
    for i, nic in enumerate(nics):
        if nic.ifname not in configured and EVERY_NIC not in configured:
            ring = _ring(i, len(nics))
            out.append(_by_locality(nics, nic, ring, locality)[:1])
            continue
        members = configured.get(nic.ifname)  # None: all (by name, or through *)
        if members is None:
            out.append(_by_locality(nics, nic, _ring(i, len(nics)), locality)[:MAX_SET])
            continue
        missing = [m for m in members if m not in index]
        if missing:
            raise PairingError(f"pairs: backup {', '.join(missing)} of {nic.ifname} is not "
                               "monitored")
        out.append(_by_locality(nics, nic, [index[m] for m in members], locality))
    return out


def choose_backups(nics: Sequence[NicTopology], pairs: Mapping[str, str] | None = None,
                   locality: str = LOCALITY[0]) -> list[int]:
    """The first (nearest) backup of each NIC, NO_BACKUP when there is none: what a reader of
    the pair-only layout (shm version 1) sees as backup_index."""
    return [s[0] if s else NO_BACKUP for s in backup_sets(nics, pairs, locality)]


def backup_sets_by_name(nics: Sequence[NicTopology], pairs: Mapping[str, str] | None = None,
                        locality: str = LOCALITY[0]) -> dict[str, tuple[str, ...]]:
    """backup_sets() keyed by name, members by name."""
    return {n.ifname: tuple(nics[j].ifname for j in s)
            for n, s in zip(nics, backup_sets(nics, pairs, locality))}


def backups_by_name(nics: Sequence[NicTopology],
                    pairs: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The first backup of each NIC by name (None: no backup)."""
    return {k: (v[0] if v else None) for k, v in backup_sets_by_name(nics, pairs).items()}


def _ring(i: int, n: int) -> list[int]:
    return [(i + step) % n for step in range(1, n)]  # the following rails, wrapping


def _by_locality(nics: Sequence[NicTopology], nic: NicTopology, candidates: list[int],
                 locality: str) -> list[int]:
    """`candidates` nearest first; a stable sort keeps the given order among equals."""
    return sorted(candidates, key=lambda j: _closeness(nic, nics[j], locality), reverse=True)


def _closeness(a: NicTopology, b: NicTopology, locality: str) -> tuple[int, bool]:
    """(depth of the shared PCI bridge chain when it makes a switch, same NUMA node); the
    policy turns off what it ignores. A deeper shared chain is nearer (the same card)."""
    shared = _common_prefix(a.pci_chain[:-1], b.pci_chain[:-1])
    switch = shared if locality == "same-switch" and shared >= _SAME_SWITCH_DEPTH else 0
    same_numa = locality != "any" and a.numa_node is not None and a.numa_node == b.numa_node
    return (switch, same_numa)


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
