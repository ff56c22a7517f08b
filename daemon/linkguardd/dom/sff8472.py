"""SFF-8472 Rev 12.4 decoder (SFP/SFP+/SFP28): serial ID at A0h, diagnostics at A2h, with
internal or external calibration (§9.3). Offsets as nic-monitoring.md §1.1 and ethtool sfpdiag.c."""
from __future__ import annotations

import math
from dataclasses import dataclass

from linkguardd.dom.common import (
    I2C_HIGH,
    I2C_LOW,
    LEVELS,
    ModuleDiagnostics,
    Pages,
    UndecodableError,
    ascii_field,
    bias_a,
    f32,
    flag_name,
    identifier_name,
    page_bytes,
    power_w,
    s16,
    temperature_c,
    threshold_set,
    u16,
    voltage_v,
)

A0 = (I2C_LOW, 0, 0)
A2 = (I2C_HIGH, 0, 0)

# A0h serial ID (SFF-8472 §4, Table 4-1)
A0_VENDOR_NAME = slice(20, 36)  # bytes 20-35
A0_VENDOR_PN = slice(40, 56)  # bytes 40-55
A0_VENDOR_SN = slice(68, 84)  # bytes 68-83
A0_DIAG_TYPE = 92  # Diagnostic Monitoring Type
DIAG_DDM = 0x40  # bit6 digital diagnostics implemented
DIAG_EXT_CAL = 0x10  # bit4 externally calibrated (bit5 = internally)
DIAG_RX_AVG = 0x08  # bit3 Rx power: 1 average, 0 OMA
A0_ENH_OPTIONS = 93  # Enhanced Options
OPT_AW_FLAGS = 0x80  # bit7 alarm/warning flags implemented
OPT_SOFT_TX_FAULT = 0x20  # bit5 soft TX_FAULT monitoring implemented
OPT_SOFT_RX_LOS = 0x10  # bit4 soft RX_LOS monitoring implemented

# A2h diagnostics (SFF-8472 §9, A2h memory map)
A2_THRESH = {"temperature": 0, "supply_voltage": 8, "tx_bias": 16, "tx_power": 24, "rx_power": 32}
A2_RX_PWR_COEF = (72, 68, 64, 60, 56)  # Rx_PWR(0) .. Rx_PWR(4), IEEE-754 float32
A2_TX_I_CAL, A2_TX_PWR_CAL, A2_T_CAL, A2_V_CAL = 76, 80, 84, 88  # slope (8.8), offset (s16)
A2_TEMP, A2_VCC, A2_BIAS, A2_TX_PWR, A2_RX_PWR = 96, 98, 100, 102, 104  # live readings
A2_STATUS = 110  # bit2 TX_FAULT, bit1 RX_LOS, bit0 Data_Ready_Bar (live, not latched)
A2_ALARM_FLAGS, A2_WARNING_FLAGS = 112, 116  # bytes 112-113 / 116-117, same bit layout
A2_LEN = 118  # bytes 0-117 cover everything decoded here

# (byte offset from 112/116, bit, quantity, side, lane); lane None = module level
AW_BITS = (
    (0, 7, "temperature", "high", None), (0, 6, "temperature", "low", None),
    (0, 5, "supply_voltage", "high", None), (0, 4, "supply_voltage", "low", None),
    (0, 3, "tx_bias", "high", 1), (0, 2, "tx_bias", "low", 1),
    (0, 1, "tx_power", "high", 1), (0, 0, "tx_power", "low", 1),
    (1, 7, "rx_power", "high", 1), (1, 6, "rx_power", "low", 1),
)


@dataclass(frozen=True)
class Calibration:
    """SFF-8472 §9.3 constants; the defaults are internal calibration (identity)."""

    temperature: tuple[float, float] = (1.0, 0.0)  # (slope, offset)
    voltage: tuple[float, float] = (1.0, 0.0)
    bias: tuple[float, float] = (1.0, 0.0)
    tx_power: tuple[float, float] = (1.0, 0.0)
    rx_power: tuple[float, ...] = (0.0, 1.0, 0.0, 0.0, 0.0)  # Rx_PWR(0..4)

    @staticmethod
    def linear(constants: tuple[float, float], raw: int) -> float:
        slope, offset = constants
        return slope * raw + offset  # §9.3: result in the reading's own LSB units

    def rx(self, raw: int) -> float:
        # §9.3: Rx_PWR(4)·x⁴ + Rx_PWR(3)·x³ + Rx_PWR(2)·x² + Rx_PWR(1)·x + Rx_PWR(0), in 0.1 µW.
        # (ethtool 7.0 multiplies each coefficient by x alone and drops Rx_PWR(4): not followed.)
        return sum(c * float(raw) ** n for n, c in enumerate(self.rx_power))


def external_calibration(a2: bytes) -> Calibration:
    def slope_offset(off: int) -> tuple[float, float]:
        # slope: unsigned fixed point 8.8 (integer byte, then 1/256ths); offset: signed 16-bit
        return a2[off] + a2[off + 1] / 256.0, float(s16(a2, off + 2))

    coefficients = tuple(f32(a2, off) for off in A2_RX_PWR_COEF)
    if not all(math.isfinite(c) for c in coefficients):
        raise UndecodableError("A2h bytes 56-75 (Rx_PWR calibration constants) are not finite")
    return Calibration(
        temperature=slope_offset(A2_T_CAL),
        voltage=slope_offset(A2_V_CAL),
        bias=slope_offset(A2_TX_I_CAL),
        tx_power=slope_offset(A2_TX_PWR_CAL),
        rx_power=coefficients,
    )


def decode_sff8472(pages: Pages) -> ModuleDiagnostics:
    a0 = page_bytes(pages, A0, 0, 96, "A0h serial ID")
    ident = ModuleDiagnostics(
        identifier=a0[0],
        identifier_name=identifier_name(a0[0]),
        spec="SFF-8472",
        vendor=ascii_field(a0[A0_VENDOR_NAME]),
        part_number=ascii_field(a0[A0_VENDOR_PN]),
        serial_number=ascii_field(a0[A0_VENDOR_SN]),
    )
    if not a0[A0_DIAG_TYPE] & DIAG_DDM or A2 not in pages:
        return ident  # no digital diagnostics: identification only
    a2 = page_bytes(pages, A2, 0, A2_LEN, "diagnostics")
    external = bool(a0[A0_DIAG_TYPE] & DIAG_EXT_CAL)
    cal = external_calibration(a2) if external else Calibration()

    convert = {
        "temperature": lambda raw: temperature_c(cal.linear(cal.temperature, raw)),
        "supply_voltage": lambda raw: voltage_v(cal.linear(cal.voltage, raw)),
        "tx_bias": lambda raw: bias_a(cal.linear(cal.bias, raw)),
        "tx_power": lambda raw: power_w(cal.linear(cal.tx_power, raw)),
        "rx_power": lambda raw: power_w(cal.rx(raw)),
    }
    thresholds = {}
    for quantity, off in A2_THRESH.items():
        read = s16 if quantity == "temperature" else u16  # temperature is signed, rest unsigned
        raw = tuple(read(a2, off + 2 * i) for i in range(len(LEVELS)))  # HA, LA, HW, LW
        thresholds[quantity] = threshold_set(raw, convert[quantity])

    return ModuleDiagnostics(
        identifier=ident.identifier,
        identifier_name=ident.identifier_name,
        spec=ident.spec,
        vendor=ident.vendor,
        part_number=ident.part_number,
        serial_number=ident.serial_number,
        temperature_c=convert["temperature"](s16(a2, A2_TEMP)),
        supply_voltage_v=convert["supply_voltage"](u16(a2, A2_VCC)),
        tx_bias_a=(convert["tx_bias"](u16(a2, A2_BIAS)),),
        tx_power_w=(convert["tx_power"](u16(a2, A2_TX_PWR)),),
        rx_power_w=(convert["rx_power"](u16(a2, A2_RX_PWR)),),
        rx_power_type="average" if a0[A0_DIAG_TYPE] & DIAG_RX_AVG else "oma",
        thresholds=thresholds,
        flags=frozenset(_flags(a0[A0_ENH_OPTIONS], a2)),
        calibration="external" if external else "internal",
    )


def _flags(options: int, a2: bytes) -> set[str]:
    flags: set[str] = set()
    status = a2[A2_STATUS]
    if options & OPT_SOFT_TX_FAULT and status & 0x04:
        flags.add("tx_fault[1]")
    if options & OPT_SOFT_RX_LOS and status & 0x02:
        flags.add("rx_los[1]")
    if status & 0x01:
        flags.add("data_not_ready")  # Data_Ready_Bar still high: readings not yet valid
    if options & OPT_AW_FLAGS:
        for base, kind in ((A2_ALARM_FLAGS, "alarm"), (A2_WARNING_FLAGS, "warning")):
            for byte, bit, quantity, side, lane in AW_BITS:
                if a2[base + byte] >> bit & 1:
                    flags.add(flag_name(quantity, f"{side}_{kind}", lane))
    return flags
