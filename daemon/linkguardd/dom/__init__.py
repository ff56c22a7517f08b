"""Optical module diagnostics (DOM): read module EEPROM pages from the kernel and decode them
(SFF-8472, SFF-8636, CMIS) into ModuleDiagnostics. See nic-monitoring.md §1."""
from linkguardd.dom.common import (
    ModuleDiagnostics,
    PageKey,
    Pages,
    UndecodableError,
    mw_to_dbm,
    w_to_dbm,
)
from linkguardd.dom.decode import decode, module_family, pages_from_ioctl
from linkguardd.dom.reader import (
    FakePageReader,
    ModuleEepromReader,
    NoModuleError,
    PageReader,
)

__all__ = [
    "FakePageReader",
    "ModuleDiagnostics",
    "ModuleEepromReader",
    "NoModuleError",
    "PageKey",
    "PageReader",
    "Pages",
    "UndecodableError",
    "decode",
    "module_family",
    "mw_to_dbm",
    "pages_from_ioctl",
    "w_to_dbm",
]
