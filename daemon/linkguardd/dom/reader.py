"""Read a module's EEPROM pages from the kernel (nic-monitoring.md §1.5): ethtool netlink
ETHTOOL_MSG_MODULE_EEPROM_GET by page and bank (kernel >= 5.13), else the legacy SIOCETHTOOL
ioctl. Blocking: the monitor calls it from a worker thread. Needs CAP_NET_ADMIN."""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

from linkguardd.dom.common import I2C_HIGH, I2C_LOW, UPPER, PageKey, Pages
from linkguardd.dom.decode import module_family, pages_from_ioctl

# What a driver says when there is no module to read: veth/lo have no module op (EOPNOTSUPP),
# the netdev is gone (ENODEV), or the driver rejects the request for an empty cage (EINVAL).
NO_MODULE_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL})

ETHTOOL_GENL_NAME = "ethtool"
ETHTOOL_MSG_MODULE_EEPROM_GET = 31  # uapi/linux/ethtool_netlink.h
HALF_PAGE = 128  # kernel net/ethtool/eeprom.c: at most 128 bytes, never across offset 128

SIOCETHTOOL = 0x8946  # uapi/linux/sockios.h
ETHTOOL_GMODULEINFO = 0x42  # struct ethtool_modinfo {u32 cmd, type, eeprom_len, reserved[8]}
ETHTOOL_GMODULEEEPROM = 0x43  # struct ethtool_eeprom {u32 cmd, magic, offset, len; u8 data[]}
IFREQ_SIZE = 40  # struct ifreq on 64-bit Linux: ifr_name[16] + 24-byte union (ifr_data at 16)
IOCTL_MAX_LEN = 640  # ETH_MODULE_SFF_8636_MAX_LEN, the largest layout ethtool knows

# get(i2c_address, page, bank, offset) -> 128 bytes
HalfPageGetter = Callable[[int, int, int, int], bytes]
# (ifname, netns) -> pages; raises NoModuleError when there is nothing to read
PageReader = Callable[[str, str | None], Pages]


class NoModuleError(OSError):
    """No module EEPROM to read (empty cage, a NIC without one such as a veth, or no netdev)."""


def no_module(exc: OSError, where: str) -> NoModuleError:
    code = exc.errno or errno.EOPNOTSUPP
    name = {errno.EOPNOTSUPP: "EOPNOTSUPP"}.get(code, errno.errorcode.get(code, str(code)))
    return NoModuleError(code, f"{os.strerror(code)} ({name}) reading {where}")


class NetlinkOpMissing(Exception):
    """The kernel has no ethtool netlink family, or it lacks MODULE_EEPROM_GET (< 5.13)."""


def read_plan(get: HalfPageGetter) -> dict[PageKey, bytes]:
    """Read the pages ethtool reads, deciding from what was read.

    SFP: A0h 0-127, A2h 0-127 if A0h byte 92 bit6 (DDM). SFF-8636: lower, upper 00h, page 03h
    unless flat (byte 2 bit2). CMIS: lower, upper 00h, and unless flat (byte 2 bit7) pages
    01h, 02h and page 11h of each bank that page 01h byte 142 advertises.
    """
    try:
        lower = get(I2C_LOW, 0, 0, 0)
    except OSError as exc:
        if exc.errno in NO_MODULE_ERRNOS:
            raise no_module(exc, "lower page 00h") from exc
        raise
    if len(lower) < 3:
        return {(I2C_LOW, 0, 0): lower}  # the decoder names what is short
    family = module_family(lower[0], lower[1])
    if family == "sff8472":
        pages = {(I2C_LOW, 0, 0): lower}
        if len(lower) > 92 and lower[92] & 0x40:  # SFF-8472 A0h byte 92 bit6: DDM implemented
            _optional(pages, get, (I2C_HIGH, 0, 0), 0)
        return pages
    if family is None:
        return {(I2C_LOW, 0, 0): lower}  # the decoder reports the unknown identifier
    pages = {(I2C_LOW, 0, 0): lower + get(I2C_LOW, 0, 0, UPPER)}
    if family == "sff8636" and not lower[2] & 0x04:  # SFF-8636 byte 2 bit2 Flat_mem
        _optional(pages, get, (I2C_LOW, 3, 0), UPPER)
    if family == "cmis" and not lower[2] & 0x80:  # CMIS byte 2 bit7 flat memory
        page01 = _optional(pages, get, (I2C_LOW, 1, 0), UPPER)
        _optional(pages, get, (I2C_LOW, 2, 0), UPPER)
        banks = {0: 1, 1: 2, 2: 4}.get(page01[142 - UPPER] & 0x03, 1) if page01 else 1
        for bank in range(banks):  # CMIS page 01h byte 142 bits 1-0: banks supported
            if _optional(pages, get, (I2C_LOW, 0x11, bank), UPPER) is None:
                break
    return pages


def _optional(
    pages: dict[PageKey, bytes], get: HalfPageGetter, key: PageKey, offset: int
) -> bytes | None:
    """Read an optional page; a page the driver refuses is left out, as ethtool does."""
    try:
        data = get(key[0], key[1], key[2], offset)
    except OSError as exc:
        if exc.errno in NO_MODULE_ERRNOS:
            return None
        raise
    pages[key] = data
    return data


def _open_ethtool(netns: str | None) -> Any:
    """An NlEthtool bound to the "ethtool" family; NetlinkOpMissing if the kernel has none."""
    from pyroute2 import NlEthtool  # imported lazily: the decoders need no pyroute2
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.generic.ethtool import ethtool_module_eeprom_msg

    # flags=0: never create a missing namespace (pyroute2's default is O_CREAT)
    nl = NlEthtool(netns=netns, flags=0) if netns else NlEthtool()
    try:
        nl.bind(ETHTOOL_GENL_NAME, ethtool_module_eeprom_msg)
    except NetlinkError as exc:
        nl.close()
        if exc.code == errno.ENOENT:
            raise NetlinkOpMissing("no ethtool generic netlink family") from exc
        raise OSError(exc.code, f"ethtool netlink: {exc}") from exc
    return nl


def netlink_has_module_eeprom(netns: str | None) -> bool:
    """Whether the kernel's ethtool family has MODULE_EEPROM_GET (CTRL_CMD_GETFAMILY op list)."""
    try:
        nl = _open_ethtool(netns)
    except NetlinkOpMissing:
        return False
    with nl:
        ops = nl.discovery(ETHTOOL_GENL_NAME).get_attr("CTRL_ATTR_OPS") or []
        return ETHTOOL_MSG_MODULE_EEPROM_GET in {op.get_attr("CTRL_ATTR_OP_ID") for op in ops}


def read_pages_netlink(ifname: str, netns: str | None) -> Pages:
    """Read through ethtool netlink (the op must exist: netlink_has_module_eeprom)."""
    from pyroute2.ethtool.ethtool import EthtoolModuleEeprom
    from pyroute2.netlink.exceptions import NetlinkError

    with _open_ethtool(netns) as nl:

        def get(i2c_address: int, page: int, bank: int, offset: int) -> bytes:
            request = EthtoolModuleEeprom(
                offset=offset, length=HALF_PAGE, page=page, bank=bank, i2c_address=i2c_address
            ).to_netlink()
            try:
                reply = nl.get_module_eeprom(request, ifname=ifname)
            except NetlinkError as exc:
                raise OSError(exc.code, f"{ifname} page {page:02X}h bank {bank}: {exc}") from exc
            return reply_data(reply)

        return read_plan(get)


def reply_data(reply: Iterable[Any]) -> bytes:
    """ETHTOOL_A_MODULE_EEPROM_DATA of a MODULE_EEPROM_GET reply (pyroute2 decodes a tuple)."""
    for msg in reply:
        data = msg.get_attr("ETHTOOL_A_MODULE_EEPROM_DATA")
        if data is not None:
            return bytes(data)
    raise OSError(errno.EIO, "MODULE_EEPROM_GET reply carries no data")


def read_pages_ioctl(ifname: str, netns: str | None) -> Pages:
    """Read through the legacy ioctl: one flat buffer (no page 02h/11h for CMIS)."""
    sock = _ioctl_socket(netns)
    try:
        info = ctypes.create_string_buffer(struct.pack("=III32x", ETHTOOL_GMODULEINFO, 0, 0))
        try:
            _ethtool_ioctl(sock, ifname, info)
        except OSError as exc:
            if exc.errno in NO_MODULE_ERRNOS:
                raise no_module(exc, f"{ifname} ETHTOOL_GMODULEINFO") from exc
            raise
        _, eeprom_type, length = struct.unpack_from("=III", info.raw)
        length = min(length, IOCTL_MAX_LEN)
        if length == 0:
            raise NoModuleError(errno.ENODATA, f"{ifname}: module EEPROM length 0")
        eeprom = ctypes.create_string_buffer(
            struct.pack("=IIII", ETHTOOL_GMODULEEEPROM, 0, 0, length) + bytes(length)
        )
        _ethtool_ioctl(sock, ifname, eeprom)
        return pages_from_ioctl(eeprom_type, eeprom.raw[16:16 + length])
    finally:
        sock.close()


def _ioctl_socket(netns: str | None) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    from pyroute2 import netns as pr_netns  # a socket opened in the namespace, via a child

    return pr_netns.create_socket(  # type: ignore[no-any-return]
        netns=netns, family=socket.AF_INET, socket_type=socket.SOCK_DGRAM, flags=0
    )


def _ethtool_ioctl(sock: socket.socket, ifname: str, buf: ctypes.Array[ctypes.c_char]) -> None:
    name = ifname.encode()[:15]
    ifreq = struct.pack("16sP", name, ctypes.addressof(buf)).ljust(IFREQ_SIZE, b"\0")
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)  # the kernel writes into `buf`


class ModuleEepromReader:
    """The real PageReader: netlink first, the ioctl when the kernel lacks the netlink op.

    The op check is done once per namespace. A driver's "no module" answer never selects the
    ioctl: the kernel already falls back to the driver's legacy op inside netlink.
    """

    def __init__(self) -> None:
        self._netlink: dict[str | None, bool] = {}  # netns -> kernel has the netlink op

    def __call__(self, ifname: str, netns: str | None = None) -> Pages:
        netlink = self._netlink.get(netns)
        if netlink is None:  # a missing namespace raises here and is asked again next time
            netlink = self._netlink[netns] = netlink_has_module_eeprom(netns)
        if netlink:
            return read_pages_netlink(ifname, netns)
        return read_pages_ioctl(ifname, netns)


class FakePageReader:
    """A scripted PageReader for tests and demos: per interface, pages, None (no module) or an
    exception to raise; `inject()` replaces what the next reads return. Unknown NICs: no module."""

    def __init__(self, modules: dict[str, Pages | None | Exception] | None = None) -> None:
        self.modules: dict[str, Pages | None | Exception] = dict(modules or {})
        self.calls: list[tuple[str, str | None]] = []

    def inject(self, ifname: str, module: Pages | None | Exception) -> None:
        self.modules[ifname] = module

    def __call__(self, ifname: str, netns: str | None = None) -> Pages:
        self.calls.append((ifname, netns))
        module = self.modules.get(ifname)
        if isinstance(module, Exception):
            raise module
        if module is None:
            raise NoModuleError(errno.EOPNOTSUPP, f"{ifname}: no module (fake)")
        return module
