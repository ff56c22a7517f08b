"""SFF-8636 Rev 2.10a decoder (QSFP/QSFP+/QSFP28, 4 lanes): lower-page monitors and latched
flags, upper page 00h identification, page 03h thresholds. Offsets as nic-monitoring.md §1.2 and
ethtool qsfp.h / module-common.h."""
from __future__ import annotations

from linkguardd.dom.common import (
    I2C_LOW,
    LEVELS,
    ModuleDiagnostics,
    Pages,
    ascii_field,
    bias_a,
    bits_to_lanes,
    identifier_name,
    level_bits,
    optional_page,
    page_bytes,
    power_w,
    s16,
    temperature_c,
    threshold_set,
    u16,
    voltage_v,
)

P00 = (I2C_LOW, 0, 0)
P03 = (I2C_LOW, 3, 0)
LANES = 4

# Lower page (SFF-8636 Rev 2.10a §6.2, lower memory map)
STATUS = 2  # status: bit2 Flat_mem (1 = no page 03h), bit0 Data_Not_Ready
LOS_FLAGS = 3  # interrupt flags, latched: bits 7-4 Tx4..Tx1 LOS, bits 3-0 Rx4..Rx1 LOS
FAULT_FLAGS = 4  # latched: bits 3-0 Tx4..Tx1 fault
LOL_FLAGS = 5  # latched: bits 7-4 Tx4..Tx1 CDR LOL, bits 3-0 Rx4..Rx1 CDR LOL
MODULE_FLAGS = {"temperature": 6, "supply_voltage": 7}  # latched: bits 7-4 HA, LA, HW, LW
LANE_FLAGS = {"rx_power": 9, "tx_bias": 11, "tx_power": 13}  # 2 bytes: ch1 bits 7-4, ch2 3-0, ...
TEMP, VCC = 22, 26  # §6.2.4 free-side monitors: s16 1/256 °C, u16 100 µV
LANE_MONITORS = {"rx_power": 34, "tx_bias": 42, "tx_power": 50}  # channel monitors, ch1..ch4 × 2 B

# Upper page 00h (SFF-8636 serial ID)
VENDOR_NAME = slice(148, 164)  # bytes 148-163 (0x94-0xA3)
VENDOR_PN = slice(168, 184)  # bytes 168-183 (0xA8-0xB7)
VENDOR_SN = slice(196, 212)  # bytes 196-211 (0xC4-0xD3)
DIAG_TYPE = 220  # 0xDC: bit3 Rx power type (1 average, 0 OMA), bit2 Tx power supported

# Upper page 03h (SFF-8636 module and channel thresholds): 4 each, 2 bytes, HA, LA, HW, LW
THRESHOLDS = {
    "temperature": 128, "supply_voltage": 144, "rx_power": 176, "tx_bias": 184, "tx_power": 192,
}
CONVERT = {
    "temperature": temperature_c, "supply_voltage": voltage_v,
    "rx_power": power_w, "tx_bias": bias_a, "tx_power": power_w,
}


def decode_sff8636(pages: Pages) -> ModuleDiagnostics:
    buf = page_bytes(pages, P00, 0, 128, "lower page") + page_bytes(
        pages, P00, 128, 128, "upper page 00h"
    )
    flags = _status_flags(buf)
    tx_power_supported = bool(buf[DIAG_TYPE] & 0x04)
    # No DOM bit exists; like ethtool, a temperature of 0 or 0xFFFF means "no monitors" (DACs).
    dom = u16(buf, TEMP) not in (0x0000, 0xFFFF)
    thresholds: dict[str, dict[str, float]] = {}
    page03 = optional_page(pages, P03, "thresholds") if not buf[STATUS] & 0x04 else None
    if dom:
        flags |= _monitor_flags(buf)
        if page03 is not None:
            for quantity, off in THRESHOLDS.items():
                read = s16 if quantity == "temperature" else u16
                raw = tuple(read(page03, off + 2 * i) for i in range(len(LEVELS)))
                thresholds[quantity] = threshold_set(raw, CONVERT[quantity])

    def lanes(quantity: str) -> tuple[float, ...] | None:
        if not dom or (quantity == "tx_power" and not tx_power_supported):
            return None
        off = LANE_MONITORS[quantity]
        return tuple(CONVERT[quantity](u16(buf, off + 2 * i)) for i in range(LANES))

    return ModuleDiagnostics(
        identifier=buf[0],
        identifier_name=identifier_name(buf[0]),
        spec="SFF-8636",
        vendor=ascii_field(buf[VENDOR_NAME]),
        part_number=ascii_field(buf[VENDOR_PN]),
        serial_number=ascii_field(buf[VENDOR_SN]),
        temperature_c=temperature_c(s16(buf, TEMP)) if dom else None,
        supply_voltage_v=voltage_v(u16(buf, VCC)) if dom else None,
        tx_bias_a=lanes("tx_bias"),
        tx_power_w=lanes("tx_power"),
        rx_power_w=lanes("rx_power"),
        rx_power_type="average" if buf[DIAG_TYPE] & 0x08 else "oma",
        thresholds=thresholds,
        flags=frozenset(flags),
    )


def _status_flags(buf: bytes) -> set[str]:
    """LOS / fault / LOL (latched, clear on read) and Data_Not_Ready."""
    flags = bits_to_lanes(buf[LOS_FLAGS] & 0x0F, "rx_los", count=LANES)
    flags |= bits_to_lanes(buf[LOS_FLAGS] >> 4, "tx_los", count=LANES)
    flags |= bits_to_lanes(buf[FAULT_FLAGS] & 0x0F, "tx_fault", count=LANES)
    flags |= bits_to_lanes(buf[LOL_FLAGS] & 0x0F, "rx_cdr_lol", count=LANES)
    flags |= bits_to_lanes(buf[LOL_FLAGS] >> 4, "tx_cdr_lol", count=LANES)
    if buf[STATUS] & 0x01:
        flags.add("data_not_ready")
    return flags


def _monitor_flags(buf: bytes) -> set[str]:
    """Latched HA/LA/HW/LW flags of the module and lane monitors (bytes 6-7, 9-14)."""
    flags: set[str] = set()
    for quantity, off in MODULE_FLAGS.items():
        flags |= level_bits(buf[off] >> 4, quantity)
    for quantity, off in LANE_FLAGS.items():
        for lane in range(1, LANES + 1):
            byte = buf[off + (lane - 1) // 2]
            nibble = byte >> 4 if lane % 2 else byte & 0x0F  # odd lane: high nibble
            flags |= level_bits(nibble, quantity, lane)
    return flags
