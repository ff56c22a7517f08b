"""DOM decoders against images built byte by byte (dom_images.py); every expected value is worked
out by hand in the comment next to it."""
from __future__ import annotations

import math

import dom_images as img
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkguardd.dom import UndecodableError, decode, mw_to_dbm, pages_from_ioctl, w_to_dbm
from linkguardd.dom.common import ModuleDiagnostics
from linkguardd.dom.decode import ETH_MODULE_SFF_8472, ETH_MODULE_SFF_8636, module_family

approx = pytest.approx


def mw(values: tuple[float, ...] | None) -> list[float]:
    assert values is not None
    return [w * 1000 for w in values]


def test_units_and_dbm() -> None:
    assert mw_to_dbm(1.0) == 0.0
    assert mw_to_dbm(0.8) == approx(-0.9691, abs=1e-4)  # 10·log10(0.8)
    assert mw_to_dbm(0.0) == -math.inf  # no light: -inf dBm, as ethtool prints
    assert w_to_dbm(0.0005) == approx(-3.0103, abs=1e-4)  # 0.5 mW


def test_sfp_internal_calibration() -> None:
    d = decode(img.sfp_internal())
    assert (d.identifier, d.identifier_name, d.spec) == (0x03, "SFP", "SFF-8472")
    assert (d.vendor, d.part_number, d.serial_number) == ("ACME OPTICS", "SFP-10G-LR", "SFP0000001")
    assert d.calibration == "internal" and d.rx_power_type == "average"
    assert d.temperature_c == 35.5  # 0x2380 = 9088 / 256 = 35.5 °C
    assert d.supply_voltage_v == approx(3.3)  # 0x80E8 = 33000 × 100 µV = 3.3 V
    assert d.tx_bias_a == (approx(0.006),)  # 0x0BB8 = 3000 × 2 µA = 6 mA
    assert mw(d.tx_power_w) == [approx(0.5)]  # 0x1388 = 5000 × 0.1 µW = 0.5 mW = -3.01 dBm
    assert w_to_dbm(d.tx_power_w[0]) == approx(-3.0103, abs=1e-4)  # type: ignore[index]
    assert mw(d.rx_power_w) == [approx(0.03)]  # 0x012C = 300 × 0.1 µW = 0.03 mW = -15.23 dBm
    assert w_to_dbm(d.rx_power_w[0]) == approx(-15.2288, abs=1e-4)  # type: ignore[index]
    th = d.thresholds
    assert th["temperature"] == {  # 19200/256, -1280/256, 17920/256, 0
        "high_alarm": 75.0, "low_alarm": -5.0, "high_warning": 70.0, "low_warning": 0.0}
    assert th["supply_voltage"]["low_warning"] == approx(3.135)  # 31350 × 100 µV
    assert th["tx_bias"]["high_alarm"] == approx(0.1)  # 50000 × 2 µA = 100 mA
    assert th["rx_power"]["low_warning"] == approx(4e-5)  # 400 × 0.1 µW = 0.04 mW
    assert th["rx_power"]["low_alarm"] == approx(2e-5)  # 200 × 0.1 µW = 0.02 mW
    assert d.flags == {"rx_power_low_warning[1]"}  # A2h byte 117 bit6
    # 0.03 mW < low warning 0.04 mW but > low alarm 0.02 mW: a warning, no alarm
    assert d.warnings() == ("rx_power_low[1]",)
    assert d.alarms() == ()


def test_sfp_external_calibration() -> None:
    d = decode(img.sfp_external())
    assert d.calibration == "external"
    assert d.temperature_c == 31.0  # 1.0 × 0x2000 (8192) + (-256) = 7936 / 256 = 31.0 °C
    assert d.supply_voltage_v == approx(3.28)  # 0.75 × 43600 + 100 = 32800 × 100 µV = 3.28 V
    assert d.tx_bias_a == (approx(0.006),)  # 2.0 × 1500 + 0 = 3000 × 2 µA = 6 mA
    assert mw(d.tx_power_w) == [approx(0.5)]  # 1.25 × 4400 - 500 = 5000 × 0.1 µW = 0.5 mW
    # Rx, x = 1024 = 2^10: 2^-30·x⁴ + 2^-20·x³ + 2^-10·x² + 1.5·x + 10
    #   = 1024 + 1024 + 1024 + 1536 + 10 = 4618 × 0.1 µW = 0.4618 mW = -3.356 dBm.
    # (ethtool 7.0's linear version gives (2^-20 + 2^-10 + 1.5)·1024 + 10 ≈ 1547: not this.)
    assert mw(d.rx_power_w) == [approx(0.4618)]
    assert w_to_dbm(d.rx_power_w[0]) == approx(-3.3555, abs=1e-4)  # type: ignore[index]
    th = d.thresholds
    assert th["temperature"] == {  # (19456-256)/256, (-1024-256)/256, (18176-256)/256, 0
        "high_alarm": 75.0, "low_alarm": -5.0, "high_warning": 70.0, "low_warning": 0.0}
    assert th["supply_voltage"] == {  # 0.75·raw + 100: 36100, 29800, 34600, 31300 × 100 µV
        "high_alarm": approx(3.61), "low_alarm": approx(2.98),
        "high_warning": approx(3.46), "low_warning": approx(3.13)}
    assert th["tx_bias"]["high_warning"] == approx(0.09)  # 2 × 22500 = 45000 × 2 µA = 90 mA
    assert th["tx_power"]["high_alarm"] == approx(0.002)  # 1.25 × 16400 - 500 = 20000 → 2 mW
    assert th["tx_power"]["low_alarm"] == approx(0.0001)  # 1.25 × 1200 - 500 = 1000 → 0.1 mW
    # Rx thresholds through the polynomial:
    #   x = 2048: 16384 + 8192 + 4096 + 3072 + 10 = 31754 → 3.1754 mW
    #   x = 0: 10 → 0.001 mW
    #   x = 1536: 5184 + 3456 + 2304 + 2304 + 10 = 13258 → 1.3258 mW
    #   x = 512: 64 + 128 + 256 + 768 + 10 = 1226 → 0.1226 mW
    assert {k: v * 1000 for k, v in th["rx_power"].items()} == {
        "high_alarm": approx(3.1754), "low_alarm": approx(0.001),
        "high_warning": approx(1.3258), "low_warning": approx(0.1226)}
    # byte 110 bit1 RX_LOS (status, not a threshold), byte 112 bit7 temperature high alarm
    assert d.flags == {"rx_los[1]", "temperature_high_alarm"}
    assert d.warnings() == ()  # every reading is inside its calibrated window
    assert d.alarms() == ("temperature_high",)  # the module's own flag counts


def test_sfp_without_ddm_is_identification_only() -> None:
    pages = img.sfp_internal()
    a0 = bytearray(pages[img.A0])
    a0[92] = 0x00  # no DDM: ethtool never reads A2h
    d = decode({img.A0: bytes(a0)})
    assert d.vendor == "ACME OPTICS" and d.temperature_c is None and d.rx_power_w is None
    assert d.thresholds == {} and d.warnings() == ()


def test_qsfp28_sff8636() -> None:
    d = decode(img.qsfp28())
    assert (d.identifier_name, d.spec, d.part_number) == ("QSFP28", "SFF-8636", "QSFP-100G-LR4")
    assert d.temperature_c == 42.5  # 0x2A80 = 10880 / 256 = 42.5 °C
    assert d.supply_voltage_v == approx(3.3076)  # 0x8134 = 33076 × 100 µV
    # Rx: 0x1F40 = 8000 × 0.1 µW = 0.8 mW = -0.969 dBm; 0x0258 = 600 → 0.06 mW;
    #     0x00C8 = 200 → 0.02 mW; 0x2710 = 10000 → 1.0 mW = 0 dBm
    assert mw(d.rx_power_w) == [approx(0.8), approx(0.06), approx(0.02), approx(1.0)]
    assert w_to_dbm(d.rx_power_w[0]) == approx(-0.9691, abs=1e-4)  # type: ignore[index]
    # bias: 0x1D4C = 7500 × 2 µA = 15 mA; 0x4E20 = 20000 × 2 µA = 40 mA
    assert d.tx_bias_a == (approx(0.015),) * 3 + (approx(0.04),)
    # Tx: 10000, 9500, 10500, 9000 × 0.1 µW
    assert mw(d.tx_power_w) == [approx(1.0), approx(0.95), approx(1.05), approx(0.9)]
    assert d.rx_power_type == "average"  # byte 220 bit3
    th = d.thresholds
    assert th["temperature"]["high_warning"] == 40.0  # 0x2800 = 10240 / 256
    assert th["rx_power"] == {  # 30000, 500, 25000, 1000 × 0.1 µW
        "high_alarm": approx(0.003), "low_alarm": approx(5e-5),
        "high_warning": approx(0.0025), "low_warning": approx(1e-4)}
    assert th["tx_bias"]["high_warning"] == approx(0.035)  # 17500 × 2 µA = 35 mA
    assert d.flags == {
        "tx_los[2]", "rx_los[3]",  # byte 3 = 0x24: bit5 Tx2, bit2 Rx3
        "tx_fault[4]",  # byte 4 = 0x08: bit3 Tx4
        "temperature_high_warning",  # byte 6 = 0x20: bit5
        "rx_power_low_warning[2]",  # byte 9 = 0x01: ch2 nibble, bit0 = LW
        "rx_power_low_alarm[3]", "rx_power_low_warning[3]",  # byte 10 = 0x50: ch3 LA + LW
        "tx_bias_high_warning[4]",  # byte 12 = 0x02: ch4 nibble, bit1 = HW
    }
    # 42.5 > 40 °C; ch2 0.06 < 0.1 mW; ch3 0.02 < 0.1 (and < 0.05: alarm); ch4 40 > 35 mA
    assert d.warnings() == ("rx_power_low[2]", "rx_power_low[3]", "temperature_high",
                            "tx_bias_high[4]")
    assert d.alarms() == ("rx_power_low[3]",)


def test_qsfp_flat_memory_has_no_thresholds() -> None:
    pages = img.qsfp28()
    p0 = bytearray(pages[img.P00])
    p0[2] |= 0x04  # Flat_mem: page 03h does not exist, even if a page map carries one
    d = decode({img.P00: bytes(p0), img.P03: pages[img.P03]})
    assert d.thresholds == {} and d.temperature_c == 42.5
    assert "temperature_high" in d.warnings()  # still flagged by the module itself


def test_qsfp_without_monitors() -> None:
    pages = img.qsfp28()
    p0 = bytearray(pages[img.P00])
    p0[22:24] = b"\x00\x00"  # temperature 0: no DOM (ethtool's rule, passive DACs)
    d = decode({img.P00: bytes(p0), img.P03: pages[img.P03]})
    assert d.temperature_c is None and d.rx_power_w is None and d.thresholds == {}
    assert d.warnings() == () and "rx_los[3]" in d.flags


def test_cmis_qsfp_dd() -> None:
    d = decode(img.qsfp_dd())
    assert (d.identifier_name, d.spec, d.part_number) == ("QSFP-DD", "CMIS 5.0", "QDD-400G-DR4")
    assert d.temperature_c == 60.0  # 0x3C00 = 15360 / 256
    assert d.supply_voltage_v == approx(3.405)  # 0x8502 = 34050 × 100 µV
    # bias, multiplier ×2 (page 01h byte 160 bits 4-3 = 01):
    #   lane 1: 0x2EE0 = 12000 × 2 = 24000 × 2 µA = 48 mA; others 0x1770 = 6000 × 2 × 2 µA = 24 mA
    assert d.tx_bias_a == (approx(0.048),) + (approx(0.024),) * 7
    assert mw(d.tx_power_w) == [approx(2.0), approx(1.0)] + [approx(2.0)] * 6  # 20000, 10000
    # Rx: 8000 → 0.8 mW; 15000 → 1.5 mW; 3500 → 0.35 mW; lane 8: 0 → 0 mW = -inf dBm
    assert mw(d.rx_power_w) == [approx(0.8), approx(1.5), approx(0.35)] + [approx(1.5)] * 4 + [0]
    assert w_to_dbm(d.rx_power_w[7]) == -math.inf  # type: ignore[index]
    th = d.thresholds
    assert th["tx_bias"] == {  # raw × 2 × 2 µA: 25000 → 100 mA, 2500 → 10, 22500 → 90, 5000 → 20
        "high_alarm": approx(0.1), "low_alarm": approx(0.01),
        "high_warning": approx(0.09), "low_warning": approx(0.02)}
    assert th["temperature"]["high_warning"] == 55.0  # 0x3700 = 14080 / 256
    assert th["rx_power"]["low_warning"] == approx(4e-4)  # 4000 × 0.1 µW
    assert d.flags == {
        "temperature_high_warning", "supply_voltage_high_warning",  # byte 9 = 0x44
        "rx_los[8]",  # page 11h byte 147 = 0x80
        "rx_power_low_alarm[8]",  # byte 150 = 0x80
        "rx_power_low_warning[3]", "rx_power_low_warning[8]",  # byte 152 = 0x84
    }
    # 60 > 55 °C; 3.405 > 3.4 V; lane 3 0.35 < 0.4 mW; lane 8 0 < 0.2 mW (alarm too)
    assert d.warnings() == ("rx_power_low[3]", "rx_power_low[8]", "supply_voltage_high",
                            "temperature_high")
    assert d.alarms() == ("rx_power_low[8]",)


def test_cmis_two_banks() -> None:
    d = decode(img.qsfp_dd(banks=2))
    assert d.tx_bias_a is not None and len(d.tx_bias_a) == 16
    assert "tx_fault[9]" in d.flags  # bank 1 page 11h byte 135 bit0 = lane 8·1 + 1


def test_cmis_flat_memory() -> None:
    d = decode(img.cmis_flat())
    assert (d.identifier_name, d.spec, d.vendor) == ("QSFP+ (CMIS)", "CMIS 4.0", "ACME CABLES")
    assert d.temperature_c == 26.0  # 0x1A00 = 6656 / 256
    assert d.supply_voltage_v == approx(3.3)  # 0x80E8 = 33000 × 100 µV
    assert d.tx_bias_a is None and d.tx_power_w is None and d.rx_power_w is None
    assert d.rx_power_type is None and d.thresholds == {} and d.flags == frozenset()


def test_ioctl_buffers() -> None:
    sfp = img.sfp_internal()
    flat = sfp[img.A0].ljust(256, b"\0") + sfp[img.A2].ljust(256, b"\0")
    assert decode(pages_from_ioctl(ETH_MODULE_SFF_8472, flat)).rx_power_w == (approx(3e-5),)
    q = img.qsfp28()
    buf = q[img.P00] + bytes(256) + q[img.P03]  # page 03h at 128·(3+1) = 512, 640 bytes
    assert decode(pages_from_ioctl(ETH_MODULE_SFF_8636, buf)).thresholds == decode(q).thresholds
    with pytest.raises(UndecodableError, match="type 9"):
        pages_from_ioctl(9, buf)


def test_dispatch() -> None:
    assert module_family(0x03, 0) == "sff8472"
    assert module_family(0x11, 0) == "sff8636"
    assert module_family(0x19, 0x40) == "cmis"
    assert module_family(0x30, 0x50) == "cmis"  # a newer SFF-8024 id, CMIS revision
    assert module_family(0x30, 0x00) is None
    with pytest.raises(UndecodableError, match="0x00"):
        decode({img.P00: bytes(256)})
    with pytest.raises(UndecodableError, match="page 00h"):
        decode({})


@pytest.mark.parametrize(
    ("image", "key", "keep", "named"),
    [
        ("sfp_internal", img.A0, 60, "A0h serial ID"),
        ("sfp_internal", img.A2, 100, "A2h"),
        ("qsfp28", img.P00, 128, "upper page 00h"),
        ("qsfp28", img.P03, 50, "page 03h"),
        ("qsfp_dd", img.P01, 10, "page 01h"),
        ("qsfp_dd", img.P02, 64, "page 02h"),
        ("qsfp_dd", img.p11(0), 70, "page 11h"),
    ],
)
def test_truncated_page_is_named(image: str, key: tuple[int, int, int], keep: int,
                                 named: str) -> None:
    pages = dict(img.ALL[image]())
    pages[key] = pages[key][:keep]
    with pytest.raises(UndecodableError, match=named):
        decode(pages)


def test_nonfinite_calibration_is_undecodable() -> None:
    pages = img.sfp_external()
    a2 = bytearray(pages[img.A2])
    a2[56:60] = b"\x7f\xc0\x00\x00"  # Rx_PWR(4) = NaN
    with pytest.raises(UndecodableError, match="Rx_PWR"):
        decode({**pages, img.A2: bytes(a2)})


def test_all_zero_thresholds_are_ignored() -> None:
    p0 = bytearray(img.qsfp28()[img.P00])
    p0[3:15] = bytes(12)  # no flags latched
    d = decode({img.P00: bytes(p0), img.P03: bytes(128)})  # page 03h all zero: no thresholds
    assert d.thresholds["rx_power"]["low_warning"] == 0.0
    assert d.warnings() == () and d.alarms() == ()  # 0.02 mW is not "below" a zero window


def test_dark_lanes_are_not_a_failing_optic() -> None:
    # A 400G-DR4 in an 8-lane cage: lanes 5-8 carry no light and no bias. Lane 2 is in use
    # (bias 6 mA) but receives only 0.01 mW, below the 0.05 mW low warning: that one counts.
    on, rx = (6e-3, 6e-3, 6e-3, 6e-3), (4e-4, 1e-5, 4e-4, 4e-4)
    d = ModuleDiagnostics(
        identifier=0x18, identifier_name="QSFP-DD", spec="CMIS",
        tx_bias_a=on + (0.0,) * 4, tx_power_w=(5e-4,) * 4 + (0.0,) * 4,
        rx_power_w=rx + (0.0,) * 4,
        thresholds={"rx_power": {"high_alarm": 2e-3, "low_alarm": 2e-5,
                                 "high_warning": 1.5e-3, "low_warning": 5e-5}},
        flags=frozenset({"rx_power_low_warning[2]", "rx_power_low_warning[7]"}))
    assert d.dark_lanes() == frozenset({5, 6, 7, 8})
    assert d.warnings() == ("rx_power_low[2]",)  # lane 7's flag and zeros are ignored
    assert d.alarms() == ("rx_power_low[2]",)  # 1e-5 W < 2e-5 W low alarm


# Property: whatever the bytes, decode returns a clean result or raises UndecodableError.
KEYS = [img.A0, img.A2, img.P01, img.P02, img.P03, img.p11(0), img.p11(1), img.p11(2)]
IDS = st.sampled_from([0x03, 0x02, 0x0C, 0x0D, 0x11, 0x18, 0x19, 0x1E, 0x20, 0x40, 0x00, 0xFF])


def _exercise(d: ModuleDiagnostics) -> None:
    d.warnings(), d.alarms(), d.as_dict()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), st.binary(max_size=300), max_size=8))
def test_arbitrary_page_maps(pages: dict[tuple[int, int, int], bytes]) -> None:
    try:
        _exercise(decode(pages))
    except UndecodableError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ident=IDS,
    low=st.binary(min_size=256, max_size=256),
    others=st.dictionaries(st.sampled_from(KEYS), st.binary(min_size=120, max_size=256)),
)
def test_arbitrary_bytes_behind_known_identifiers(
    ident: int, low: bytes, others: dict[tuple[int, int, int], bytes]
) -> None:
    pages = {**others, img.P00: bytes([ident]) + low[1:]}  # reach deep into each decoder
    try:
        _exercise(decode(pages))
    except UndecodableError:
        pass
