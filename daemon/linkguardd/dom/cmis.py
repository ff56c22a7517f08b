"""CMIS 4.x/5.x decoder (QSFP-DD, OSFP, QSFP-CMIS): lower page 00h module monitors and flags,
page 00h identification, page 01h advertising, page 02h thresholds, page 11h lane monitors and
latched lane flags per bank. Offsets as nic-monitoring.md §1.3, ethtool cmis.h, module-common.h."""
from __future__ import annotations

from linkguardd.dom.common import (
    I2C_LOW,
    LEVELS,
    ModuleDiagnostics,
    Pages,
    ascii_field,
    bias_a,
    bits_to_lanes,
    flag_name,
    identifier_name,
    optional_page,
    page_bytes,
    power_w,
    s16,
    temperature_c,
    threshold_set,
    u16,
    voltage_v,
)

P00 = (I2C_LOW, 0x00, 0)
P01 = (I2C_LOW, 0x01, 0)
P02 = (I2C_LOW, 0x02, 0)
PAGE_LANE = 0x11  # banked: bank b holds lanes 8b+1 .. 8b+8
LANES_PER_BANK = 8

# Lower page 00h (CMIS 5.x §8.2)
REVISION = 1  # major version in the high nibble, minor in the low one
MEMORY_MODEL = 2  # bit7 flat memory: no pages 01h/02h/11h
MODULE_FLAGS = 9  # latched: temp HA 0x01, LA 0x02, HW 0x04, LW 0x08; Vcc the same << 4
TEMP, VCC = 14, 16  # module monitors: s16 1/256 °C, u16 100 µV

# Upper page 00h (CMIS administrative information)
VENDOR_NAME = slice(129, 145)  # 0x81-0x90
VENDOR_PN = slice(148, 164)  # 0x94-0xA3
VENDOR_SN = slice(166, 182)  # 0xA6-0xB5

# Page 01h (CMIS advertising)
BANKS = 142  # 0x8E bits 1-0: 00 bank 0, 01 banks 0-1, 10 banks 0-3 (11 reserved: bank 0)
DIAG_TYPE = 151  # 0x97 bit4 Rx power type, 1 average / 0 OMA (ethtool's reading)
MODULE_MONITORS = 159  # 0x9F bit0 temperature, bit1 Vcc supported
LANE_MONITORS = 160  # 0xA0 bit0 Tx bias, bit1 Tx power, bit2 Rx power; bits 4-3 bias multiplier

# Page 02h (CMIS module and lane thresholds): 4 each, 2 bytes, HA, LA, HW, LW
THRESHOLDS = {
    "temperature": 128, "supply_voltage": 136, "tx_power": 176, "tx_bias": 184, "rx_power": 192,
}

# Page 11h (CMIS lane dynamic status): one bit per lane of the bank, latched, cleared on read
LANE_STATUS_FLAGS = {
    135: "tx_fault", 136: "tx_los", 137: "tx_cdr_lol", 138: "tx_adaptive_eq_fault",
    147: "rx_los", 148: "rx_cdr_lol",
}
LANE_LEVEL_FLAGS = {"tx_power": 139, "tx_bias": 143, "rx_power": 149}  # 4 bytes: HA, LA, HW, LW
LANE_VALUES = {"tx_power": 154, "tx_bias": 170, "rx_power": 186}  # lanes 1-8, 2 bytes each
LANE_SUPPORT_BIT = {"tx_bias": 0x01, "tx_power": 0x02, "rx_power": 0x04}  # page 01h byte 160


def bias_multiplier(lane_monitors: int) -> int:
    # Bits 4-3: 00 ×1, 01 ×2, 10 ×4 (11 reserved: ×1), applied by multiplying as SONiC does;
    # ethtool 7.0 shifts right (divides), which is not followed.
    code = (lane_monitors >> 3) & 0x03
    return 1 << code if code < 3 else 1


def bank_count(banks_field: int) -> int:
    return {0: 1, 1: 2, 2: 4}.get(banks_field & 0x03, 1)


def decode_cmis(pages: Pages) -> ModuleDiagnostics:
    buf = page_bytes(pages, P00, 0, 128, "lower page") + page_bytes(
        pages, P00, 128, 128, "upper page 00h"
    )
    flat = bool(buf[MEMORY_MODEL] & 0x80)
    page01 = None if flat else optional_page(pages, P01, "advertising")
    page02 = None if flat else optional_page(pages, P02, "thresholds")
    if page01 is not None:
        has_temp = bool(page01[MODULE_MONITORS] & 0x01)
        has_vcc = bool(page01[MODULE_MONITORS] & 0x02)
    else:  # not advertised (flat memory, or ioctl path): treat 0 / 0xFFFF as "no monitor"
        has_temp = has_vcc = u16(buf, TEMP) not in (0x0000, 0xFFFF)
    multiplier = bias_multiplier(page01[LANE_MONITORS]) if page01 is not None else 1
    convert = {
        "temperature": temperature_c, "supply_voltage": voltage_v, "tx_power": power_w,
        "tx_bias": lambda raw: bias_a(raw * multiplier), "rx_power": power_w,
    }

    flags: set[str] = set()
    if has_temp:
        flags |= _module_flags(buf[MODULE_FLAGS] & 0x0F, "temperature")
    if has_vcc:
        flags |= _module_flags(buf[MODULE_FLAGS] >> 4, "supply_voltage")

    thresholds: dict[str, dict[str, float]] = {}
    if page02 is not None:
        for quantity, off in THRESHOLDS.items():
            read = s16 if quantity == "temperature" else u16
            raw = tuple(read(page02, off + 2 * i) for i in range(len(LEVELS)))
            thresholds[quantity] = threshold_set(raw, convert[quantity])

    lanes: dict[str, list[float]] = {q: [] for q in LANE_VALUES}
    banks = bank_count(page01[BANKS]) if page01 is not None else 0
    for bank in range(banks):
        key = (I2C_LOW, PAGE_LANE, bank)
        page11 = optional_page(pages, key, f"lane status, bank {bank}")
        if page11 is None:
            break  # lanes stay contiguous from lane 1
        first = bank * LANES_PER_BANK + 1
        flags |= _lane_flags(page11, first)
        for quantity, off in LANE_VALUES.items():
            lanes[quantity] += [convert[quantity](u16(page11, off + 2 * i)) for i in range(8)]

    def lane_values(quantity: str) -> tuple[float, ...] | None:
        supported = page01 is not None and page01[LANE_MONITORS] & LANE_SUPPORT_BIT[quantity]
        return tuple(lanes[quantity]) if supported and lanes[quantity] else None

    rev = buf[REVISION]
    return ModuleDiagnostics(
        identifier=buf[0],
        identifier_name=identifier_name(buf[0]),
        spec=f"CMIS {rev >> 4}.{rev & 0x0F}",
        vendor=ascii_field(buf[VENDOR_NAME]),
        part_number=ascii_field(buf[VENDOR_PN]),
        serial_number=ascii_field(buf[VENDOR_SN]),
        temperature_c=temperature_c(s16(buf, TEMP)) if has_temp else None,
        supply_voltage_v=voltage_v(u16(buf, VCC)) if has_vcc else None,
        tx_bias_a=lane_values("tx_bias"),
        tx_power_w=lane_values("tx_power"),
        rx_power_w=lane_values("rx_power"),
        rx_power_type=(
            None if page01 is None else "average" if page01[DIAG_TYPE] & 0x10 else "oma"
        ),
        thresholds=thresholds,
        flags=frozenset(flags),
    )


def _module_flags(nibble: int, quantity: str) -> set[str]:
    # Lower page byte 9 order is LSB first: HA, LA, HW, LW (unlike SFF-8636's MSB first).
    return {flag_name(quantity, level) for i, level in enumerate(LEVELS) if nibble >> i & 1}


def _lane_flags(page11: bytes, first_lane: int) -> set[str]:
    flags: set[str] = set()
    for off, name in LANE_STATUS_FLAGS.items():
        flags |= bits_to_lanes(page11[off], name, first_lane)  # bit i = lane i+1 of the bank
    for quantity, off in LANE_LEVEL_FLAGS.items():
        for i, level in enumerate(LEVELS):
            flags |= bits_to_lanes(page11[off + i], flag_name(quantity, level), first_lane)
    return flags
