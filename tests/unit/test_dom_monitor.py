"""DomMonitor with an injected page reader, the reader's page plan against a simulated kernel,
and one real kernel check: a NIC without a module (lo, a veth in a namespace) is "no module"."""
from __future__ import annotations

import asyncio
import errno
import os
import threading
import uuid

import dom_images as img
import pytest

from linkguardd.dom import reader as dom_reader
from linkguardd.dom.reader import (
    FakePageReader,
    ModuleEepromReader,
    NoModuleError,
    netlink_has_module_eeprom,
    read_pages_ioctl,
    read_plan,
    reply_data,
)
from linkguardd.facts import DomFact
from linkguardd.monitors.dom import DomMonitor

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="module EEPROM reads need CAP_NET_ADMIN")


def run_polls(monitor: DomMonitor, polls: int = 1, between: object = None) -> list[DomFact]:
    """start() (= first poll), then `polls - 1` more polls, calling between() before each."""
    facts: list[DomFact] = []

    async def main() -> None:
        await monitor.start(facts.append)  # type: ignore[arg-type]
        for _ in range(polls - 1):
            if callable(between):
                between()
            await monitor.poll_once()
        await monitor.stop()

    asyncio.run(main())
    return facts


def test_emits_one_fact_per_nic() -> None:
    reader = FakePageReader({
        "rail0": img.qsfp28(),
        "rail1": None,  # no module
        "rail2": {img.P00: bytes(256)},  # identifier 0x00: nothing decodes it
        "rail3": OSError(errno.EIO, "i2c timeout"),  # a failed read: no fact, health false
    })
    monitor = DomMonitor(["rail0", "rail1", "rail2", "rail3"], "ns1", 60.0, page_reader=reader)
    facts = run_polls(monitor)
    assert [(f.ifname, f.status) for f in facts] == [
        ("rail0", "ok"), ("rail1", "no_module"), ("rail2", "undecodable")]
    ok = facts[0]
    assert ok.warnings == ("rx_power_low[2]", "rx_power_low[3]", "temperature_high",
                           "tx_bias_high[4]")
    assert ok.alarms == ("rx_power_low[3]",)
    assert ok.diagnostics is not None and ok.at_ns > 0
    assert "0x00" in facts[2].detail
    assert not monitor.health.success and "rail3" in monitor.health.last_error
    assert "i2c timeout" in monitor.health.last_error
    assert set(reader.calls) == {(n, "ns1") for n in ("rail0", "rail1", "rail2", "rail3")}


def test_no_module_is_success_without_data() -> None:
    monitor = DomMonitor(["veth0"], page_reader=FakePageReader({"veth0": None}))
    facts = run_polls(monitor)
    assert facts[0].status == "no_module" and facts[0].diagnostics is None
    assert monitor.health.success and monitor.health.last_error == ""
    assert monitor.latest("veth0") is None


def _qsfp28_flags_cleared() -> dict[tuple[int, int, int], bytes]:
    pages = img.qsfp28()
    p0 = bytearray(pages[img.P00])
    p0[3:15] = bytes(12)  # what the module returns once our previous read cleared its latches
    return {**pages, img.P00: bytes(p0)}


def test_latched_flags_are_kept_until_consumed() -> None:
    reader = FakePageReader({"rail0": img.qsfp28()})
    monitor = DomMonitor(["rail0"], page_reader=reader)
    cleared = _qsfp28_flags_cleared()
    facts = run_polls(monitor, polls=2, between=lambda: reader.inject("rail0", cleared))
    first, second = facts
    assert "tx_fault[4]" in first.diagnostics.flags  # type: ignore[union-attr]
    assert second.diagnostics.flags == frozenset()  # type: ignore[union-attr]
    assert "tx_bias_high[4]" in first.warnings and "rx_los[3]" not in second.warnings
    # The second read saw nothing, but what the first one consumed from the module is kept:
    latest = monitor.latest("rail0")
    assert latest is not None and {"tx_fault[4]", "rx_los[3]", "tx_los[2]"} <= latest.flags
    assert "temperature_high" in latest.warnings()  # 42.5 °C > 40 °C, and the kept flag
    taken = monitor.consume_flags("rail0")
    assert "rx_power_low_alarm[3]" in taken and "tx_fault[4]" in taken
    assert monitor.consume_flags("rail0") == frozenset()
    assert monitor.latest("rail0").flags == frozenset()  # type: ignore[union-attr]


def test_flags_survive_a_module_removal_until_consumed() -> None:
    reader = FakePageReader({"rail0": img.qsfp_dd()})
    monitor = DomMonitor(["rail0"], page_reader=reader)
    facts = run_polls(monitor, polls=2, between=lambda: reader.inject("rail0", None))
    assert [f.status for f in facts] == ["ok", "no_module"]
    assert monitor.latest("rail0") is None
    assert "rx_los[8]" in monitor.consume_flags("rail0")


def test_timer_polls_and_stop_waits() -> None:
    reader = FakePageReader({"rail0": img.sfp_internal()})
    monitor = DomMonitor(["rail0"], interval_s=0.01, page_reader=reader)
    facts: list[DomFact] = []

    async def main() -> None:
        await monitor.start(facts.append)  # type: ignore[arg-type]
        assert len(facts) == 1  # the initial scan is reported before start() returns
        while len(facts) < 4:
            await asyncio.sleep(0.01)
        await monitor.stop()
        count = len(facts)
        await asyncio.sleep(0.05)
        assert len(facts) == count  # nothing after stop()

    asyncio.run(main())
    assert all(f.status == "ok" and f.warnings == ("rx_power_low[1]",) for f in facts)
    assert monitor.health.success and monitor.health.last_duration_s >= 0


def test_reader_exceptions_never_escape() -> None:
    reader = FakePageReader({"a": RuntimeError("pyroute2 bug"), "b": FileNotFoundError("netns")})
    monitor = DomMonitor(["a", "b"], page_reader=reader)
    assert run_polls(monitor) == []
    assert "RuntimeError" in monitor.health.last_error and not monitor.health.success


def test_a_hung_read_fails_its_poll_and_is_not_started_twice() -> None:
    release = threading.Event()
    fake = FakePageReader({"slow": img.qsfp28(), "fast": img.sfp_internal()})

    def reader(ifname: str, netns: str | None) -> dict[tuple[int, int, int], bytes]:
        if ifname == "slow":
            release.wait(5)
        return dict(fake(ifname, netns))

    monitor = DomMonitor(["slow", "fast"], page_reader=reader, read_timeout_s=0.2)
    facts: list[DomFact] = []

    async def main() -> None:
        await monitor.start(facts.append)  # type: ignore[arg-type]
        assert [f.ifname for f in facts] == ["fast"]  # the other NIC is not held up
        assert "still running" in monitor.health.last_error and not monitor.health.success
        await monitor.poll_once()  # still hung: the same read is awaited, none started
        release.set()
        await asyncio.sleep(0.05)
        await monitor.poll_once()  # the hung read completed: its result is reported now
        await monitor.stop()

    asyncio.run(main())
    assert [f.ifname for f in facts] == ["fast", "fast", "slow", "fast"]
    assert [c for c in fake.calls if c[0] == "slow"] == [("slow", None)]  # read once
    assert monitor.health.success


def test_rejects_bad_interval() -> None:
    with pytest.raises(ValueError):
        DomMonitor(["x"], interval_s=0)


# The page plan, against a simulated kernel that serves an image by (i2c, page, bank, offset).
class SimulatedKernel:
    def __init__(self, pages: dict[tuple[int, int, int], bytes], fail: OSError | None = None):
        self.pages, self.fail, self.calls = pages, fail, []  # type: ignore[var-annotated]

    def __call__(self, i2c: int, page: int, bank: int, offset: int) -> bytes:
        self.calls.append((i2c, page, bank, offset))
        if self.fail is not None:
            raise self.fail
        data = self.pages.get((i2c, page, bank))
        if data is None:
            raise OSError(errno.EINVAL, "page not supported")
        start = offset if page == 0 else offset - 128  # other pages are stored from offset 128
        return data[start:start + 128]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("sfp_internal", [(0x50, 0, 0, 0), (0x51, 0, 0, 0)]),
        ("qsfp28", [(0x50, 0, 0, 0), (0x50, 0, 0, 128), (0x50, 3, 0, 128)]),
        ("qsfp_dd", [(0x50, 0, 0, 0), (0x50, 0, 0, 128), (0x50, 1, 0, 128), (0x50, 2, 0, 128),
                     (0x50, 0x11, 0, 128)]),
        ("cmis_flat", [(0x50, 0, 0, 0), (0x50, 0, 0, 128)]),
    ],
)
def test_read_plan_mirrors_ethtool(image: str, expected: list[tuple[int, ...]]) -> None:
    pages = img.ALL[image]()
    kernel = SimulatedKernel(pages)
    assert read_plan(kernel) == pages
    assert kernel.calls == expected


def test_read_plan_reads_every_advertised_bank() -> None:
    kernel = SimulatedKernel(img.qsfp_dd(banks=2))
    assert read_plan(kernel) == img.qsfp_dd(banks=2)
    assert kernel.calls[-2:] == [(0x50, 0x11, 0, 128), (0x50, 0x11, 1, 128)]


def test_read_plan_errors() -> None:
    with pytest.raises(NoModuleError, match="EOPNOTSUPP"):
        read_plan(SimulatedKernel({}, OSError(errno.EOPNOTSUPP, "veth")))
    with pytest.raises(NoModuleError, match="ENODEV"):
        read_plan(SimulatedKernel({}, OSError(errno.ENODEV, "gone")))
    with pytest.raises(OSError, match="bus"):
        read_plan(SimulatedKernel({}, OSError(errno.EIO, "bus")))
    no_page3 = {img.P00: img.qsfp28()[img.P00]}  # the driver refuses page 03h: left out
    assert read_plan(SimulatedKernel(no_page3)) == no_page3


def test_reply_data() -> None:
    from pyroute2.netlink.generic.ethtool import ethtool_module_eeprom_msg

    msg = ethtool_module_eeprom_msg()
    msg["attrs"].append(("ETHTOOL_A_MODULE_EEPROM_DATA", list(range(128))))
    msg.encode()
    parsed = ethtool_module_eeprom_msg(msg.data)
    parsed.decode()
    assert reply_data((parsed,)) == bytes(range(128))
    with pytest.raises(OSError):
        reply_data(())


def test_ioctl_only_when_the_kernel_lacks_the_netlink_op(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str | None] = []
    used: list[str] = []

    def has_op(netns: str | None) -> bool:
        asked.append(netns)
        return netns == "new-kernel"

    monkeypatch.setattr(dom_reader, "netlink_has_module_eeprom", has_op)
    monkeypatch.setattr(dom_reader, "read_pages_netlink", lambda i, n: used.append("nl") or {})
    monkeypatch.setattr(dom_reader, "read_pages_ioctl", lambda i, n: used.append("ioctl") or {})
    reader = ModuleEepromReader()
    for netns in ("new-kernel", "old-kernel", "new-kernel", "old-kernel"):
        reader("eth0", netns)
    assert used == ["nl", "ioctl", "nl", "ioctl"]
    assert asked == ["new-kernel", "old-kernel"]  # asked once per namespace


# Real kernel: a NIC without a module answers "no module", never an exception.
@needs_root
def test_real_kernel_lo_has_no_module() -> None:
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    # MODULE_EEPROM_GET exists since 5.13; a parsing bug here would silently select the ioctl
    assert netlink_has_module_eeprom(None) == ((major, minor) >= (5, 13))
    with pytest.raises(NoModuleError, match="EOPNOTSUPP"):
        ModuleEepromReader()("lo", None)  # netlink
    with pytest.raises(NoModuleError, match="EOPNOTSUPP"):
        read_pages_ioctl("lo", None)  # legacy ioctl


@needs_root
def test_real_kernel_veth_in_namespace() -> None:
    from pyroute2 import IPRoute, netns

    name = f"lgdom{uuid.uuid4().hex[:8]}"
    try:
        netns.create(name)
    except OSError as exc:
        pytest.skip(f"cannot create a network namespace: {exc}")
    try:
        with IPRoute(netns=name, flags=0) as ipr:
            ipr.link("add", ifname="lgdomv0", kind="veth", peer="lgdomv1")
        monitor = DomMonitor(["lgdomv0", "lgdomnone"], netns=name, interval_s=60.0)
        facts = run_polls(monitor)
        assert [(f.ifname, f.status) for f in facts] == [
            ("lgdomv0", "no_module"), ("lgdomnone", "no_module")]
        # EOPNOTSUPP proves the read happened inside the namespace (outside: ENODEV)
        assert "EOPNOTSUPP" in facts[0].detail and "ENODEV" in facts[1].detail
        assert monitor.health.success, monitor.health.last_error
        with pytest.raises(NoModuleError, match="EOPNOTSUPP"):
            read_pages_ioctl("lgdomv0", name)
    finally:
        netns.remove(name)
