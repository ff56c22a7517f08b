"""Module EEPROM images built byte by byte from the specs (offsets as in nic-monitoring.md §1),
as page maps {(i2c address, page, bank): bytes} the way dom/reader.py returns them. The raw values
chosen here are decoded by hand in test_dom_decode.py."""
from __future__ import annotations

import struct

A0, A2 = (0x50, 0, 0), (0x51, 0, 0)
P00, P01, P02, P03 = (0x50, 0, 0), (0x50, 1, 0), (0x50, 2, 0), (0x50, 3, 0)


def p11(bank: int = 0) -> tuple[int, int, int]:
    return (0x50, 0x11, bank)


class Page:
    """A 256-byte page addressed by spec offset; .lower()/.upper()/.whole() give what is read."""

    def __init__(self) -> None:
        self.buf = bytearray(256)

    def u8(self, off: int, value: int) -> Page:
        self.buf[off] = value
        return self

    def u16(self, off: int, value: int) -> Page:
        self.buf[off:off + 2] = value.to_bytes(2, "big")  # MSB at the lower address
        return self

    def s16(self, off: int, value: int) -> Page:
        self.buf[off:off + 2] = value.to_bytes(2, "big", signed=True)
        return self

    def u16s(self, off: int, *values: int) -> Page:
        for i, value in enumerate(values):
            self.u16(off + 2 * i, value)
        return self

    def f32(self, off: int, value: float) -> Page:
        self.buf[off:off + 4] = struct.pack(">f", value)  # IEEE-754 single, big-endian
        return self

    def ascii(self, off: int, length: int, text: str) -> Page:
        self.buf[off:off + length] = text.encode("ascii").ljust(length, b" ")
        return self

    def lower(self) -> bytes:
        return bytes(self.buf[:128])

    def upper(self) -> bytes:
        return bytes(self.buf[128:])

    def whole(self) -> bytes:
        return bytes(self.buf)


def _sfp_a0(diag_type: int) -> Page:
    a0 = Page()
    a0.u8(0, 0x03)  # SFF-8024 identifier: SFP/SFP+/SFP28
    a0.ascii(20, 16, "ACME OPTICS")  # A0h 20-35 vendor name
    a0.ascii(40, 16, "SFP-10G-LR")  # A0h 40-55 vendor PN
    a0.ascii(68, 16, "SFP0000001")  # A0h 68-83 vendor SN
    a0.u8(92, diag_type)  # Diagnostic Monitoring Type
    a0.u8(93, 0xB0)  # Enhanced options: bit7 A/W flags, bit5 soft TX_FAULT, bit4 soft RX_LOS
    a0.u8(94, 0x08)  # SFF-8472 compliance (non-zero: DDM)
    return a0


def sfp_internal() -> dict[tuple[int, int, int], bytes]:
    """SFP, internally calibrated, average Rx power, Rx power past its low warning threshold."""
    a0 = _sfp_a0(0x68)  # 0x40 DDM | 0x20 internal cal | 0x08 average Rx power
    a2 = Page()
    a2.s16(0, 19200).s16(2, -1280).s16(4, 17920).s16(6, 0)  # temp HA 75, LA -5, HW 70, LW 0 °C
    a2.u16s(8, 36300, 29700, 34650, 31350)  # Vcc 3.63, 2.97, 3.465, 3.135 V
    a2.u16s(16, 50000, 1000, 45000, 2000)  # bias 100, 2, 90, 4 mA
    a2.u16s(24, 20000, 1000, 15000, 2000)  # Tx power 2.0, 0.1, 1.5, 0.2 mW
    a2.u16s(32, 20000, 200, 15000, 400)  # Rx power 2.0, 0.02, 1.5, 0.04 mW
    a2.s16(96, 0x2380)  # temperature
    a2.u16(98, 0x80E8)  # Vcc
    a2.u16(100, 0x0BB8)  # Tx bias
    a2.u16(102, 0x1388)  # Tx power
    a2.u16(104, 0x012C)  # Rx power
    a2.u8(110, 0x00)  # status: no TX_FAULT, no RX_LOS, data ready
    a2.u8(117, 0x40)  # warning flags byte 117 bit6: Rx power low warning
    return {A0: a0.lower(), A2: a2.lower()}


# SFF-8472 §9.3 Rx power polynomial used by sfp_external(): powers of two, exact in float32.
RX_PWR_COEFFICIENTS = (10.0, 1.5, 2.0**-10, 2.0**-20, 2.0**-30)  # Rx_PWR(0) .. Rx_PWR(4)


def sfp_external() -> dict[tuple[int, int, int], bytes]:
    """SFP, externally calibrated: every reading and threshold goes through §9.3 constants."""
    a0 = _sfp_a0(0x58)  # 0x40 DDM | 0x10 external cal | 0x08 average Rx power
    a2 = Page()
    a2.s16(0, 19456).s16(2, -1024).s16(4, 18176).s16(6, 256)  # temp thresholds, raw
    a2.u16s(8, 48000, 39600, 46000, 41600)  # Vcc thresholds, raw
    a2.u16s(16, 25000, 500, 22500, 1000)  # bias thresholds, raw
    a2.u16s(24, 16400, 1200, 12400, 2000)  # Tx power thresholds, raw
    a2.u16s(32, 2048, 0, 1536, 512)  # Rx power thresholds, raw
    for off, value in zip((72, 68, 64, 60, 56), RX_PWR_COEFFICIENTS):
        a2.f32(off, value)  # Rx_PWR(0) at 72 ... Rx_PWR(4) at 56
    a2.u8(76, 0x02).u8(77, 0x00).s16(78, 0)  # Tx_I slope 2.0, offset 0
    a2.u8(80, 0x01).u8(81, 0x40).s16(82, -500)  # Tx_PWR slope 1.25, offset -500
    a2.u8(84, 0x01).u8(85, 0x00).s16(86, -256)  # T slope 1.0, offset -256
    a2.u8(88, 0x00).u8(89, 0xC0).s16(90, 100)  # V slope 0.75, offset 100
    a2.s16(96, 0x2000)  # temperature, raw
    a2.u16(98, 43600)  # Vcc, raw
    a2.u16(100, 1500)  # Tx bias, raw
    a2.u16(102, 4400)  # Tx power, raw
    a2.u16(104, 1024)  # Rx power, raw
    a2.u8(110, 0x02)  # status bit1: RX_LOS asserted
    a2.u8(112, 0x80)  # alarm flags byte 112 bit7: temperature high alarm
    return {A0: a0.lower(), A2: a2.lower()}


def qsfp28() -> dict[tuple[int, int, int], bytes]:
    """SFF-8636 QSFP28, paged (page 03h thresholds), with latched flags set."""
    p0 = Page()
    p0.u8(0, 0x11).u8(1, 0x08).u8(2, 0x00)  # QSFP28, revision, status: paged, data ready
    p0.u8(3, 0x24)  # LOS latched: bit5 Tx2 LOS, bit2 Rx3 LOS
    p0.u8(4, 0x08)  # Tx fault latched: bit3 Tx4
    p0.u8(6, 0x20)  # temperature flags: bit5 high warning
    p0.u8(9, 0x01)  # Rx power flags ch1 | ch2: ch2 bit0 low warning
    p0.u8(10, 0x50)  # Rx power flags ch3 | ch4: ch3 bit6 low alarm + bit4 low warning
    p0.u8(12, 0x02)  # Tx bias flags ch3 | ch4: ch4 bit1 high warning
    p0.s16(22, 0x2A80)  # temperature
    p0.u16(26, 0x8134)  # Vcc
    p0.u16s(34, 0x1F40, 0x0258, 0x00C8, 0x2710)  # Rx power ch1..ch4
    p0.u16s(42, 0x1D4C, 0x1D4C, 0x1D4C, 0x4E20)  # Tx bias ch1..ch4
    p0.u16s(50, 0x2710, 0x251C, 0x2904, 0x2328)  # Tx power ch1..ch4
    p0.u8(128, 0x11)  # identifier copy
    p0.ascii(148, 16, "ACME OPTICS").ascii(168, 16, "QSFP-100G-LR4").ascii(196, 16, "QS28-0001")
    p0.u8(220, 0x0C)  # diagnostic type: bit3 average Rx power, bit2 Tx power supported
    p3 = Page()
    p3.s16(128, 0x2D00).s16(130, -1280).s16(132, 0x2800).s16(134, 0)  # temp 45, -5, 40, 0 °C
    p3.u16s(144, 36000, 30000, 35000, 31000)  # Vcc 3.6, 3.0, 3.5, 3.1 V
    p3.u16s(176, 30000, 500, 25000, 1000)  # Rx power 3.0, 0.05, 2.5, 0.1 mW
    p3.u16s(184, 25000, 2500, 17500, 3750)  # Tx bias 50, 5, 35, 7.5 mA
    p3.u16s(192, 20000, 2000, 18000, 3000)  # Tx power 2.0, 0.2, 1.8, 0.3 mW
    return {P00: p0.whole(), P03: p3.upper()}


def qsfp_dd(banks: int = 1) -> dict[tuple[int, int, int], bytes]:
    """CMIS 5.0 QSFP-DD, paged, Tx bias multiplier ×2; `banks` 1 (lanes 1-8) or 2 (1-16)."""
    p0 = Page()
    p0.u8(0, 0x18).u8(1, 0x50).u8(2, 0x00).u8(3, 0x06)  # QSFP-DD, CMIS 5.0, paged, ModuleReady
    p0.u8(9, 0x44)  # module flags: 0x04 temperature high warning, 0x40 Vcc high warning
    p0.s16(14, 0x3C00)  # temperature
    p0.u16(16, 0x8502)  # Vcc
    p0.u8(128, 0x18)
    p0.ascii(129, 16, "ACME OPTICS").ascii(148, 16, "QDD-400G-DR4").ascii(166, 16, "QDD0000001")
    p1 = Page()
    p1.u8(142, {1: 0x00, 2: 0x01}[banks])  # banks supported
    p1.u8(151, 0x10)  # bit4: Rx power is average
    p1.u8(159, 0x03)  # module monitors: temperature, Vcc
    p1.u8(160, 0x0F)  # lane monitors: bias, Tx power, Rx power; bits 4-3 = 01: bias ×2
    p2 = Page()
    p2.s16(128, 0x4600).s16(130, -1280).s16(132, 0x3700).s16(134, 0)  # temp 70, -5, 55, 0 °C
    p2.u16s(136, 36000, 30000, 34000, 31000)  # Vcc 3.6, 3.0, 3.4, 3.1 V
    p2.u16s(176, 40000, 5000, 35000, 7000)  # Tx power 4.0, 0.5, 3.5, 0.7 mW
    p2.u16s(184, 25000, 2500, 22500, 5000)  # Tx bias raw (×2 multiplier applies)
    p2.u16s(192, 40000, 2000, 35000, 4000)  # Rx power 4.0, 0.2, 3.5, 0.4 mW
    b0 = Page()
    b0.u8(147, 0x80)  # Rx LOS: lane 8
    b0.u8(150, 0x80)  # Rx power low alarm: lane 8
    b0.u8(152, 0x84)  # Rx power low warning: lanes 3 and 8
    b0.u16s(154, 0x4E20, 0x2710, *([0x4E20] * 6))  # Tx power lanes 1-8
    b0.u16s(170, 0x2EE0, *([0x1770] * 7))  # Tx bias lanes 1-8, raw
    b0.u16s(186, 0x1F40, 0x3A98, 0x0DAC, *([0x3A98] * 4), 0x0000)  # Rx power lanes 1-8
    pages = {P00: p0.whole(), P01: p1.upper(), P02: p2.upper(), p11(0): b0.upper()}
    if banks == 2:
        b1 = Page()
        b1.u8(135, 0x01)  # Tx fault: bit0 = first lane of bank 1 = lane 9
        b1.u16s(154, *([0x4E20] * 8)).u16s(170, *([0x1770] * 8)).u16s(186, *([0x3A98] * 8))
        pages[p11(1)] = b1.upper()
    return pages


def cmis_flat() -> dict[tuple[int, int, int], bytes]:
    """CMIS 4.0 flat-memory module (QSFP+ CMIS, e.g. an active cable): no pages 01h/02h/11h."""
    p0 = Page()
    p0.u8(0, 0x1E).u8(1, 0x40).u8(2, 0x80)  # QSFP+ with CMIS, CMIS 4.0, bit7 flat memory
    p0.s16(14, 0x1A00)  # temperature
    p0.u16(16, 0x80E8)  # Vcc
    p0.u8(128, 0x1E)
    p0.ascii(129, 16, "ACME CABLES").ascii(148, 16, "QSFP112-AOC-3M").ascii(166, 16, "AOC0000001")
    return {P00: p0.whole()}


ALL = {
    "sfp_internal": sfp_internal,
    "sfp_external": sfp_external,
    "qsfp28": qsfp28,
    "qsfp_dd": qsfp_dd,
    "cmis_flat": cmis_flat,
}
