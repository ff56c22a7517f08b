"""Shared types of the DOM decoders: the page map they read, the decoded ModuleDiagnostics, and the
unit conversions common to SFF-8472, SFF-8636 and CMIS (nic-monitoring.md §1, units table)."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

# A page map: (I2C address, page, bank) -> bytes as read from the module. Page 0's bytes start at
# offset 0 (lower half, then upper half if it was read); any other page holds its upper half, so
# its bytes start at offset 128 (ethtool netlink rule: pages != 0 are read at offset 128).
PageKey = tuple[int, int, int]
Pages = Mapping[PageKey, bytes]

I2C_LOW = 0x50  # SFF-8472 "A0h", and the only address of SFF-8636 / CMIS modules
I2C_HIGH = 0x51  # SFF-8472 "A2h" (diagnostics)
UPPER = 128  # first offset of an upper page

QUANTITIES = ("temperature", "supply_voltage", "tx_bias", "tx_power", "rx_power")  # base units
LEVELS = ("high_alarm", "low_alarm", "high_warning", "low_warning")  # storage order in all specs

Thresholds = Mapping[str, Mapping[str, float]]  # quantity -> {high_alarm, ...} in base units


class UndecodableError(ValueError):
    """The bytes are not a module memory map any decoder accepts (the message says why)."""


def page_name(key: PageKey) -> str:
    i2c, page, bank = key
    if i2c == I2C_HIGH:
        return "A2h"
    if i2c == I2C_LOW and page == 0 and bank == 0:
        return "page 00h"
    return f"page {page:02X}h" + (f" bank {bank}" if bank else "")


def page_bytes(pages: Pages, key: PageKey, start: int, length: int, what: str) -> bytes:
    """Bytes [start, start+length) of page `key`, by spec offset; UndecodableError names the gap."""
    data = pages.get(key)
    base = 0 if key[1] == 0 else UPPER
    end = start + length
    if data is None or start < base or len(data) < end - base:
        have = 0 if data is None else len(data)
        raise UndecodableError(
            f"{page_name(key)} bytes {start}-{end - 1} ({what}) missing: "
            f"have {have} bytes from offset {base}"
        )
    return bytes(data[start - base:end - base])


def optional_page(pages: Pages, key: PageKey, what: str) -> bytes | None:
    """An upper page if it was read, else None. Indexed by spec offset: [128:256] is the page,
    [0:128] is zero filler, so decoders use the offsets as the specs print them."""
    if key not in pages:
        return None
    return bytes(UPPER) + page_bytes(pages, key, UPPER, 128, what)


def level_bits(nibble: int, quantity: str, lane: int | None = None) -> set[str]:
    """A 4-bit HA, LA, HW, LW flag group (MSB first, SFF-8636 and SFF-8472 order) -> names."""
    return {
        flag_name(quantity, level, lane)
        for i, level in enumerate(LEVELS)
        if nibble >> (3 - i) & 1
    }


def u16(buf: bytes, off: int) -> int:
    return int.from_bytes(buf[off:off + 2], "big")  # all specs: big-endian, MSB first


def s16(buf: bytes, off: int) -> int:
    return int.from_bytes(buf[off:off + 2], "big", signed=True)


def f32(buf: bytes, off: int) -> float:
    return float(struct.unpack_from(">f", buf, off)[0])


def ascii_field(buf: bytes) -> str:
    """Vendor name / PN / SN: 16 ASCII bytes padded with spaces in all three specs."""
    return "".join(chr(b) if 0x20 <= b < 0x7F else "?" for b in buf).rstrip(" ?\x00")


# Conversions; LSBs from nic-monitoring.md §1 units table (identical in the three specs).
def temperature_c(raw: float) -> float:
    return raw / 256.0  # signed 16-bit, LSB 1/256 °C


def voltage_v(raw: float) -> float:
    return raw / 10000.0  # LSB 100 µV


def bias_a(raw: float) -> float:
    return raw * 2 / 1e6  # LSB 2 µA


def power_w(raw: float) -> float:
    return raw / 1e7  # LSB 0.1 µW


def mw_to_dbm(mw: float) -> float:
    """10·log10(mW); 0 mW (no light) is -inf dBm, as ethtool prints it."""
    return 10.0 * math.log10(mw) if mw > 0 else -math.inf


def w_to_dbm(w: float) -> float:
    return mw_to_dbm(w * 1000.0)


def threshold_set(raw: tuple[float, ...], conv: Callable[[float], float]) -> dict[str, float]:
    """Four raw values in spec order (HA, LA, HW, LW) converted to base units."""
    return {level: conv(value) for level, value in zip(LEVELS, raw)}


def lane_name(name: str, lane: int) -> str:
    return f"{name}[{lane}]"  # lanes are numbered from 1, as in the specs


def flag_name(quantity: str, level: str, lane: int | None = None) -> str:
    """"rx_power" + "low_warning" + 2 -> "rx_power_low_warning[2]"."""
    name = f"{quantity}_{level}"
    return name if lane is None else lane_name(name, lane)


def bits_to_lanes(value: int, name: str, first_lane: int = 1, count: int = 8) -> set[str]:
    """A lane bitmap (bit i = lane first_lane+i) -> {"name[lane]", ...}."""
    return {lane_name(name, first_lane + i) for i in range(count) if value >> i & 1}


# SFF-8024 Rev 4.x Table 4-1, identifier values (byte 0); names as ethtool's module-common.h.
IDENTIFIER_NAMES = {
    0x02: "soldered", 0x03: "SFP", 0x0C: "QSFP", 0x0D: "QSFP+", 0x11: "QSFP28",
    0x18: "QSFP-DD", 0x19: "OSFP", 0x1B: "DSFP", 0x1E: "QSFP+ (CMIS)", 0x1F: "SFP-DD",
    0x20: "SFP+ (CMIS)", 0x21: "OSFP-XD", 0x22: "OIF-ELSFP", 0x23: "CDFP x4",
    0x24: "CDFP x8", 0x25: "CDFP x16",
}


def identifier_name(identifier: int) -> str:
    return IDENTIFIER_NAMES.get(identifier, f"0x{identifier:02X}")


@dataclass(frozen=True)
class ModuleDiagnostics:
    """One decoded read of a module. Lane lists are indexed lane-1; None = not implemented.

    `flags` are the module's own flags seen in this read (or accumulated since last consumed,
    see monitors/dom.py): "<quantity>_<high|low>_<alarm|warning>", lane ones with "[n]", plus
    status flags "rx_los[n]", "tx_los[n]", "tx_fault[n]", "rx_cdr_lol[n]", "tx_cdr_lol[n]",
    "tx_adaptive_eq_fault[n]", "data_not_ready". warnings()/alarms() use only the threshold
    kind: status flags stay in `flags` (a lost signal also drops the carrier, seen by netlink;
    an unused lane of a breakout module may report LOS forever).
    """

    identifier: int
    identifier_name: str
    spec: str
    vendor: str = ""
    part_number: str = ""
    serial_number: str = ""
    temperature_c: float | None = None
    supply_voltage_v: float | None = None
    tx_bias_a: tuple[float, ...] | None = None
    tx_power_w: tuple[float, ...] | None = None
    rx_power_w: tuple[float, ...] | None = None
    rx_power_type: str | None = None  # "average" or "oma"
    thresholds: Thresholds = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    calibration: str = ""  # SFF-8472 only: "internal" or "external"

    def readings(self) -> dict[str, float | tuple[float, ...] | None]:
        return {
            "temperature": self.temperature_c, "supply_voltage": self.supply_voltage_v,
            "tx_bias": self.tx_bias_a, "tx_power": self.tx_power_w, "rx_power": self.rx_power_w,
        }

    def warnings(self) -> tuple[str, ...]:
        """Readings past a warning threshold, and warning flags: "rx_power_low[2]", ..."""
        return self._past("warning")

    def alarms(self) -> tuple[str, ...]:
        """Readings past an alarm threshold, and alarm flags: "temperature_high", ..."""
        return self._past("alarm")

    def dark_lanes(self) -> frozenset[int]:
        """Lanes with no light in either direction and no laser bias: not in use (the unused
        lanes of a 400G-DR4 in an 8-lane cage, or of a breakout). Their zero readings are not a
        failing optic, so thresholds and lane flags ignore them; a lane in use that goes dark
        also loses its signal, which the carrier (netlink) reports."""
        lanes = [v for v in (self.tx_bias_a, self.tx_power_w, self.rx_power_w) if v is not None]
        if not lanes:
            return frozenset()
        count = min(len(v) for v in lanes)
        return frozenset(i + 1 for i in range(count) if all(v[i] == 0 for v in lanes))

    def _past(self, kind: str) -> tuple[str, ...]:
        found: set[str] = set()
        dark = self.dark_lanes()
        for quantity, value in self.readings().items():
            limits = self.thresholds.get(quantity)
            if value is None or not limits:
                continue
            high, low = limits.get(f"high_{kind}"), limits.get(f"low_{kind}")
            if high is None or low is None or not high > low:
                continue  # all-zero or inverted set: the module has no real thresholds
            lanes = enumerate(value, 1) if isinstance(value, tuple) else [(None, value)]
            for lane, v in lanes:
                if lane in dark:
                    continue
                name = quantity if lane is None else lane_name(quantity, lane)
                if v > high:
                    found.add(_with_side(name, "high"))
                elif v < low:
                    found.add(_with_side(name, "low"))
        suffix = f"_{kind}"
        for flag in self.flags:  # "rx_power_low_warning[2]" -> "rx_power_low[2]"
            base, bracket, rest = flag.partition("[")
            if bracket and rest.rstrip("]").isdigit() and int(rest.rstrip("]")) in dark:
                continue
            if base.endswith(suffix):
                found.add(base[: -len(suffix)] + bracket + rest)
        return tuple(sorted(found))

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly view for the API (`linkguard-cli dom`)."""
        out = asdict(self)
        out["thresholds"] = {q: dict(v) for q, v in self.thresholds.items()}
        out["flags"] = sorted(self.flags)
        out["warnings"] = list(self.warnings())
        out["alarms"] = list(self.alarms())
        return out


def _with_side(name: str, side: str) -> str:
    base, bracket, lane = name.partition("[")
    return f"{base}_{side}{bracket}{lane}"
