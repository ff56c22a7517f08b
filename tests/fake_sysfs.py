"""Netdevs in a fake sysfs tree laid out as the kernel does (unit and lab tests).

/sys/class/net/<if> -> ../../devices/<pci path>/net/<if>, and .../net/<if>/device -> the PCI
function (Documentation/ABI/testing/sysfs-class-net); numa_node sits on the PCI function
(Documentation/ABI/testing/sysfs-bus-pci).
"""
from __future__ import annotations

import os
from pathlib import Path


def add_nic(root: Path, ifname: str, device: str | None, numa: int | None = None,
            child: str | None = None) -> None:
    """A netdev under devices/<device> (a PCI function path), or a virtual one if None.
    `child` puts the netdev under a non-PCI child of the function (virtio0)."""
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    if device is None:
        netdir = root / "devices" / "virtual" / "net" / ifname
        netdir.mkdir(parents=True)
    else:
        func = root / "devices" / device
        func.mkdir(parents=True, exist_ok=True)
        if numa is not None:
            (func / "numa_node").write_text(f"{numa}\n")
        parent = func / child if child else func
        netdir = parent / "net" / ifname
        netdir.mkdir(parents=True)
        (netdir / "device").symlink_to(os.path.relpath(parent, netdir))
    (root / "class" / "net" / ifname).symlink_to(os.path.relpath(netdir, root / "class" / "net"))
