"""Dispatch a module's pages to the decoder its SFF-8024 identifier names, and turn a legacy
ioctl (ETHTOOL_GMODULEEEPROM) buffer into the same page map (nic-monitoring.md §1.0, §1.5)."""
from __future__ import annotations

from collections.abc import Callable

from linkguardd.dom.cmis import decode_cmis
from linkguardd.dom.common import (
    I2C_HIGH,
    I2C_LOW,
    ModuleDiagnostics,
    PageKey,
    Pages,
    UndecodableError,
    identifier_name,
    page_bytes,
)
from linkguardd.dom.sff8472 import decode_sff8472
from linkguardd.dom.sff8636 import decode_sff8636

# SFF-8024 identifier (byte 0) -> memory map, as ethtool dispatches (module-common.h)
SFF8472_IDS = frozenset({0x02, 0x03})  # soldered, SFP/SFP+/SFP28
SFF8636_IDS = frozenset({0x0C, 0x0D, 0x11})  # QSFP, QSFP+, QSFP28
CMIS_IDS = frozenset({0x18, 0x19, 0x1B, 0x1E, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25})
CMIS_MIN_REVISION = 0x30  # unknown ids 0x18-0x7F: CMIS if lower byte 1 says rev >= 3.0

DECODERS: dict[str, Callable[[Pages], ModuleDiagnostics]] = {
    "sff8472": decode_sff8472,
    "sff8636": decode_sff8636,
    "cmis": decode_cmis,
}

# struct ethtool_modinfo.type (uapi/linux/ethtool.h)
ETH_MODULE_SFF_8079 = 0x1  # 256 bytes: A0h only
ETH_MODULE_SFF_8472 = 0x2  # 512 bytes: A0h at 0-255, A2h at 256-511
ETH_MODULE_SFF_8636 = 0x3  # 256 bytes, up to 640: lower + page 00h, upper page N at 128*(N+1)
ETH_MODULE_SFF_8436 = 0x4  # same layout as SFF-8636


def module_family(identifier: int, revision: int) -> str | None:
    """"sff8472", "sff8636", "cmis", or None when no decoder handles the identifier."""
    if identifier in SFF8472_IDS:
        return "sff8472"
    if identifier in SFF8636_IDS:
        return "sff8636"
    if identifier in CMIS_IDS or (0x18 <= identifier < 0x80 and revision >= CMIS_MIN_REVISION):
        return "cmis"
    return None


def decode(pages: Pages) -> ModuleDiagnostics:
    """Decode a page map; anything but a clean result raises UndecodableError."""
    head = page_bytes(pages, (I2C_LOW, 0, 0), 0, 2, "identifier and revision")
    family = module_family(head[0], head[1])
    if family is None:
        raise UndecodableError(
            f"identifier 0x{head[0]:02X} ({identifier_name(head[0])}) has no decoder"
        )
    # Decoders check every length they read, so nothing else escapes (tests/unit property test).
    return DECODERS[family](pages)


def pages_from_ioctl(eeprom_type: int, data: bytes) -> dict[PageKey, bytes]:
    """The flat ETHTOOL_GMODULEEEPROM buffer -> the page map the decoders read."""
    if eeprom_type == ETH_MODULE_SFF_8079:
        return {(I2C_LOW, 0, 0): bytes(data[:256])}
    if eeprom_type == ETH_MODULE_SFF_8472:
        pages = {(I2C_LOW, 0, 0): bytes(data[:256])}
        if len(data) > 256:
            pages[(I2C_HIGH, 0, 0)] = bytes(data[256:512])
        return pages
    if eeprom_type in (ETH_MODULE_SFF_8636, ETH_MODULE_SFF_8436):
        pages = {(I2C_LOW, 0, 0): bytes(data[:256])}
        for page in (1, 2, 3):  # CMIS modules come through here too (ethtool: only 00h/01h)
            start = 128 * (page + 1)
            if len(data) >= start + 128:
                pages[(I2C_LOW, page, 0)] = bytes(data[start:start + 128])
        return pages
    raise UndecodableError(f"ethtool_modinfo type {eeprom_type} is unknown")
