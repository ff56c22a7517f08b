"""Static facts about each NIC that the plugin needs beside its state: addresses, PCI path,
RDMA device. Read at start and refreshed when a link appears or on the statistics interval;
none of it is on the failure-detection path."""
from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute


@dataclass(frozen=True)
class NicInfo:
    ifname: str
    ifindex: int = 0
    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()
    pci_path: str = ""  # realpath of <sysfs>/class/net/<if>/device, "" for virtual NICs
    rdma_dev: str = ""
    rdma_port: int = 0
    speed_mbps: int = 0  # 0: unknown (veth reports -1)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:  # absent, or EINVAL for attributes of a down interface
        return ""


def _sysfs_info(ifname: str, sysfs_root: Path) -> tuple[str, str, int, int]:
    """(pci_path, rdma_dev, rdma_port, speed_mbps) from sysfs (Documentation/ABI/testing/
    sysfs-class-net: speed in Mb/s; <if>/device/infiniband/<ibdev> for the RDMA function)."""
    net = sysfs_root / "class" / "net" / ifname
    device = net / "device"
    pci_path = os.path.realpath(device) if device.exists() else ""
    rdma_dev, rdma_port = "", 0
    ib = device / "infiniband"
    if ib.is_dir():
        devs = sorted(p.name for p in ib.iterdir())
        if devs:
            rdma_dev = devs[0]
            port = _read(net / "dev_port")  # 0-based port of a multi-port function
            rdma_port = (int(port) if port.isdigit() else 0) + 1
    speed = _read(net / "speed")
    speed_mbps = int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else 0
    return pci_path, rdma_dev, rdma_port, speed_mbps


def read_inventory(ifnames: Iterable[str], sysfs_root: str | Path = "/sys",
                   netns: str = "") -> dict[str, NicInfo]:
    """NicInfo for each existing interface among `ifnames` (absent ones are left out)."""
    wanted = set(ifnames)
    root = Path(sysfs_root)
    out: dict[str, NicInfo] = {}
    kwargs = {"netns": netns, "flags": 0} if netns else {}
    with IPRoute(**kwargs) as ipr:
        index_of = {}
        for link in ipr.get_links():
            name = link.get("ifname")
            if name in wanted:
                index_of[link["index"]] = name
        addrs: dict[str, tuple[list[str], list[str]]] = {n: ([], []) for n in index_of.values()}
        for msg in ipr.get_addr():
            name = index_of.get(msg["index"])
            addr = msg.get("address")
            if name is None or addr is None:
                continue
            v4, v6 = addrs[name]
            if msg["family"] == socket.AF_INET:
                v4.append(addr)
            elif not ipaddress.IPv6Address(addr).is_link_local:
                v6.append(addr)
    for index, name in index_of.items():
        pci_path, rdma_dev, rdma_port, speed = _sysfs_info(name, root)
        v4, v6 = addrs[name]
        out[name] = NicInfo(name, index, tuple(v4), tuple(v6), pci_path, rdma_dev, rdma_port,
                            speed)
    return out
