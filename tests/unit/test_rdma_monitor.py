"""RdmaMonitor and the verbs event plumbing, against the committed fake sysfs tree.

tests/fixtures/sys holds four devices in the kernel's formats (drivers/infiniband/core/sysfs.c):
mlx5_0 (InfiniBand, netdev ib0 via device/net), mlx5_1 (RoCE, DOWN, netdev via gid_attrs/ndevs),
mlx4_0 (two ports, two netdevs told apart by dev_port) and rxe0 (soft RoCE: `parent`). Tests
that change files work on a copy in tmp_path. The counters are test_rdma_counters.py's.
"""
from __future__ import annotations

import asyncio
import shutil
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from linkguardd.facts import Fact, IbPortFact, VerbsEventFact
from linkguardd.monitors import rdma
from linkguardd.monitors.rdma import (
    RdmaMonitor,
    parse_enum,
    port_netdev,
    read_port,
    read_tree,
)
from linkguardd.monitors.verbs_events import (
    ChildVerbsSource,
    FakeVerbsSource,
    VerbsEvent,
    event_name,
    format_line,
    parse_line,
)

F = TypeVar("F")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sys"
WAIT_S = 5.0


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


def port_dir(root: Path, dev: str, port: int = 1) -> Path:
    return root / "class/infiniband" / dev / "ports" / str(port)


class Collector:
    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self._changed = asyncio.Event()

    def __call__(self, fact: Fact) -> None:
        self.facts.append(fact)
        self._changed.set()

    def ports(self, since: int = 0) -> list[IbPortFact]:
        return [f for f in self.facts[since:] if isinstance(f, IbPortFact)]

    async def wait(self, kind: type[F], pred: Callable[[F], bool] = lambda f: True,
                   since: int = 0) -> F:
        """The first fact of type `kind` from index `since` on that satisfies `pred`."""
        async def scan() -> F:
            i = since
            while True:
                for fact in self.facts[i:]:
                    if isinstance(fact, kind) and pred(fact):
                        return fact
                i = len(self.facts)
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(scan(), WAIT_S)


def run(mon: RdmaMonitor, body: Callable[[Collector], Awaitable[None]]) -> Collector:
    sink = Collector()

    async def main() -> None:
        await mon.start(sink)
        try:
            await body(sink)
        finally:
            await mon.stop()

    asyncio.run(main())
    return sink


async def nothing(sink: Collector) -> None:
    pass


# --- formats -------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("4: ACTIVE\n", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("0: NOP\n", (0, "NOP")),
    ("5: ACTIVE_DEFER\n", (5, "ACTIVE_DEFER")), ("5: LinkUp\n", (5, "LinkUp")),
    ("7: Phy Test\n", (7, "Phy Test")), ("4: PortConfigurationTraining\n",
                                         (4, "PortConfigurationTraining")),
])
def test_parse_enum_reads_the_kernel_format(text: str, expected: tuple[int, str]) -> None:
    assert parse_enum(text) == expected


@pytest.mark.parametrize("text", ["", "ACTIVE", "x: ACTIVE", "4:", "4: \n", "\x00\xff"])
def test_parse_enum_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_enum(text)


# --- sysfs tree ----------------------------------------------------------------------------

def test_read_port_of_each_fixture_device() -> None:
    got = {(f.rdma_dev, f.port): (f.netdev, f.state, f.phys_state, f.rate, f.link_layer)
           for f, errors in read_tree(FIXTURE) if not errors}
    assert got == {
        ("mlx4_0", 1): ("eth4", "ACTIVE", "LinkUp", "40 Gb/sec (4X QDR)", "Ethernet"),
        ("mlx4_0", 2): ("eth5", "INIT", "PortConfigurationTraining", "10 Gb/sec (4X SDR)",
                        "Ethernet"),
        ("mlx5_0", 1): ("ib0", "ACTIVE", "LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"),
        ("mlx5_1", 1): ("ens2np0", "DOWN", "Disabled", "200 Gb/sec (4X HDR)", "Ethernet"),
        ("rxe0", 1): ("eth0", "ACTIVE", "LinkUp", "10 Gb/sec (4X SDR)", "Ethernet"),
    }


def test_netdev_mapping_prefers_the_gid_table_to_the_pci_function(sysfs: Path) -> None:
    (port_dir(sysfs, "mlx5_1") / "gid_attrs/ndevs/0").write_text("bond0\n")  # RoCE LAG
    assert port_netdev(sysfs / "class/infiniband/mlx5_1", 1) == "bond0"
    (port_dir(sysfs, "mlx5_1") / "gid_attrs/ndevs/0").unlink()  # as an IB port reads: EINVAL
    assert port_netdev(sysfs / "class/infiniband/mlx5_1", 1) == "ens2np0"  # device/net


def test_no_infiniband_class_is_no_data_and_success(tmp_path: Path) -> None:
    mon = RdmaMonitor(sysfs_root=tmp_path, verbs_source=FakeVerbsSource(), poll_interval_s=0.01)

    async def body(sink: Collector) -> None:
        await asyncio.sleep(0.05)  # a few polls

    sink = run(mon, body)
    assert sink.facts == []
    assert mon.health.success and mon.health.last_error == ""


def test_without_an_rdma_device_the_real_source_says_so_and_starts_no_child(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="linkguardd.monitors.rdma")
    source = ChildVerbsSource()
    mon = RdmaMonitor(sysfs_root=tmp_path, verbs_source=source, poll_interval_s=0.01)

    async def body(sink: Collector) -> None:
        await asyncio.sleep(0.05)  # a few polls: still nothing to watch

    run(mon, body)
    assert f"no RDMA device under {tmp_path}/class/infiniband: idle" in caplog.text
    assert source.processes == {}


def test_the_real_pyverbs_is_importable_and_agrees_on_event_codes() -> None:
    """Debian's python3-pyverbs, linked into the venv (scripts/link-pyverbs.sh): what the verbs
    child imports. Its enum ibv_event_type must be the table the child's lines are named by."""
    import pyverbs.device
    import pyverbs.enums

    assert rdma.default_verbs_source() is not None  # the daemon would use verbs events
    assert callable(pyverbs.device.Context)
    codes = {name: int(getattr(pyverbs.enums, f"IBV_EVENT_{name}")) for name in
             (n.removeprefix("IBV_EVENT_") for n in dir(pyverbs.enums)
              if n.startswith("IBV_EVENT_"))}
    assert {event_name(code): code for code in codes.values()} == codes


def test_garbage_state_is_reported_unknown_with_a_clear_error(sysfs: Path) -> None:
    (port_dir(sysfs, "mlx5_0") / "state").write_text("\x00garbage\n")
    fact, errors = read_port(sysfs, "mlx5_0", 1)
    assert fact.state == "UNKNOWN" and fact.phys_state == "LinkUp"
    assert any("mlx5_0/1 state" in e for e in errors)
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0"], verbs_source=FakeVerbsSource())
    sink = run(mon, nothing)
    assert [(f.rdma_dev, f.state) for f in sink.ports()] == [("mlx5_0", "UNKNOWN")]
    assert not mon.health.success and "mlx5_0/1 state" in mon.health.last_error


def test_unreadable_state_file_is_unknown(sysfs: Path) -> None:
    (port_dir(sysfs, "mlx5_0") / "state").unlink()
    fact, errors = read_port(sysfs, "mlx5_0", 1)
    assert fact.state == "UNKNOWN" and errors


# --- the monitor ---------------------------------------------------------------------------

def test_start_reports_every_watched_port(sysfs: Path) -> None:
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0", "ens2np0", "mlx4_0"],
                      verbs_source=FakeVerbsSource(), poll_interval_s=60)
    sink = run(mon, nothing)
    ports = {(f.rdma_dev, f.port): f for f in sink.ports()}
    assert set(ports) == {("mlx5_0", 1), ("mlx5_1", 1), ("mlx4_0", 1), ("mlx4_0", 2)}
    assert ports[("mlx5_1", 1)].state == "DOWN" and ports[("mlx5_1", 1)].netdev == "ens2np0"
    assert all(isinstance(f, IbPortFact) for f in sink.facts)  # counters: rdma_counters
    assert mon.health.success


def test_poll_reports_changes_only(sysfs: Path) -> None:
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0"], verbs_source=FakeVerbsSource(),
                      poll_interval_s=0.01)

    async def body(sink: Collector) -> None:
        await asyncio.sleep(0.1)  # several polls
        assert len(sink.ports()) == 1  # unchanged: not reported again
        mark = len(sink.facts)
        (port_dir(sysfs, "mlx5_0") / "state").write_text("1: DOWN\n")
        (port_dir(sysfs, "mlx5_0") / "phys_state").write_text("2: Polling\n")
        down = await sink.wait(IbPortFact, lambda f: f.state == "DOWN", mark)
        assert down.phys_state == "Polling"

    run(mon, body)


def test_port_err_event_rereads_sysfs(sysfs: Path) -> None:
    verbs = FakeVerbsSource()
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0"], verbs_source=verbs,
                      poll_interval_s=60)  # no poll during the test: the event must do it

    async def body(sink: Collector) -> None:
        await asyncio.sleep(0)  # let the watcher subscribe
        assert verbs.calls == ["mlx5_0"]
        mark = len(sink.facts)
        (port_dir(sysfs, "mlx5_0") / "state").write_text("1: DOWN\n")
        verbs.inject("mlx5_0", "PORT_ERR")
        event = await sink.wait(VerbsEventFact, since=mark)
        assert event == VerbsEventFact(rdma_dev="mlx5_0", event="PORT_ERR", at_ns=event.at_ns,
                                       port=None, netdev="ib0")
        port = await sink.wait(IbPortFact, since=mark)
        assert (port.state, port.netdev) == ("DOWN", "ib0")
        assert sink.facts.index(event) < sink.facts.index(port)
        mark = len(sink.facts)
        (port_dir(sysfs, "mlx5_0") / "state").write_text("4: ACTIVE\n")
        verbs.inject("mlx5_0", "PORT_ACTIVE")
        port = await sink.wait(IbPortFact, since=mark)
        assert port.state == "ACTIVE"

    run(mon, body)


def test_event_of_a_two_port_device_rereads_both_ports(sysfs: Path) -> None:
    verbs = FakeVerbsSource()
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["mlx4_0"], verbs_source=verbs,
                      poll_interval_s=60)

    async def body(sink: Collector) -> None:
        mark = len(sink.facts)
        verbs.inject("mlx4_0", "PORT_ACTIVE")
        event = await sink.wait(VerbsEventFact, since=mark)
        assert event.netdev is None  # which port? pyverbs does not say
        await sink.wait(IbPortFact, lambda f: len(sink.ports(mark)) == 2, mark)
        assert {f.port for f in sink.ports(mark)} == {1, 2}

    run(mon, body)


def test_device_removed_and_added_while_running(sysfs: Path) -> None:
    verbs = FakeVerbsSource()
    mon = RdmaMonitor(sysfs_root=sysfs, verbs_source=verbs, poll_interval_s=0.01)
    saved = sysfs.parent / "mlx5_1.link"

    async def body(sink: Collector) -> None:
        mark = len(sink.facts)
        (sysfs / "class/infiniband/mlx5_1").rename(saved)
        gone = await sink.wait(IbPortFact, lambda f: not f.present, mark)
        assert gone.rdma_dev == "mlx5_1"
        assert gone.netdev == "ens2np0"
        mark = len(sink.facts)
        saved.rename(sysfs / "class/infiniband/mlx5_1")
        back = await sink.wait(IbPortFact, lambda f: f.present, mark)
        assert back.rdma_dev == "mlx5_1"
        assert verbs.calls.count("mlx5_1") == 2  # a new watcher for the returning device

    run(mon, body)


def test_ended_event_stream_is_restarted(sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    verbs = FakeVerbsSource()
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0"], verbs_source=verbs,
                      poll_interval_s=60)
    monkeypatch.setattr(rdma, "VERBS_RETRY_S", (0.01, 0.01))

    async def body(sink: Collector) -> None:
        verbs.end("mlx5_0")  # the child exited (e.g. after DEVICE_FATAL)
        while verbs.calls.count("mlx5_0") < 2:
            await asyncio.sleep(0.01)
        verbs.inject("mlx5_0", "PORT_ACTIVE")
        await sink.wait(VerbsEventFact)

    run(mon, body)


# --- the verbs child protocol --------------------------------------------------------------

def test_line_protocol_round_trip() -> None:
    line = format_line("event", "mlx5_0", event=event_name(10), code=10, port=None)
    parsed = parse_line(line)
    assert parsed.kind == "event" and parsed.event == VerbsEvent("mlx5_0", "PORT_ERR", None)
    assert parse_line(format_line("ready", "mlx5_0", ports=1)).event is None
    assert parse_line(format_line("error", "mlx5_0", message="no")).message == "no"
    assert event_name(8) == "DEVICE_FATAL" and event_name(9) == "PORT_ACTIVE"
    assert event_name(99) == "UNKNOWN_99"


@pytest.mark.parametrize("line", [
    b"", b"garbage", b"[]", b'{"type": "event"}', b'{"type": "event", "device": "x"}',
    b'{"type": "event", "device": "x", "event": "PORT_ERR", "port": "1"}',
    b'{"type": "bogus", "device": "x"}',
])
def test_line_protocol_rejects_garbage(line: bytes) -> None:
    with pytest.raises(ValueError):
        parse_line(line)


STUB = """
import sys, time
dev = sys.argv[sys.argv.index("--device") + 1]
print('{"type":"ready","device":"%s","ports":1}' % dev, flush=True)
print('{"type":"event","device":"%s","event":"PORT_ERR","code":10,"port":null}' % dev,
      flush=True)
print('not json', flush=True)
print('{"type":"event","device":"%s","event":"PORT_ACTIVE","code":9,"port":1}' % dev,
      flush=True)
if "--hang" in sys.argv:
    time.sleep(600)
"""


def stub_source(tmp_path: Path, *extra: str) -> ChildVerbsSource:
    script = tmp_path / "stub_child.py"
    script.write_text(textwrap.dedent(STUB))
    return ChildVerbsSource([sys.executable, str(script), *extra])


def test_child_source_yields_events_and_reaps_the_child(tmp_path: Path) -> None:
    source = stub_source(tmp_path)

    async def main() -> list[VerbsEvent]:
        events = [e async for e in source("mlx5_0")]
        assert source.processes == {}
        return events

    assert asyncio.run(main()) == [VerbsEvent("mlx5_0", "PORT_ERR", None),
                                   VerbsEvent("mlx5_0", "PORT_ACTIVE", 1)]


def test_child_is_terminated_when_the_consumer_stops(tmp_path: Path) -> None:
    source = stub_source(tmp_path, "--hang")

    async def main() -> None:
        events = source("mlx5_0")
        assert await anext(events) == VerbsEvent("mlx5_0", "PORT_ERR", None)
        proc = source.processes["mlx5_0"]
        await events.aclose()
        assert proc.returncode is not None and source.processes == {}

    asyncio.run(main())


def test_monitor_with_child_source_reports_events(sysfs: Path, tmp_path: Path) -> None:
    (port_dir(sysfs, "mlx5_0") / "state").write_text("1: DOWN\n")  # as PORT_ERR left it
    mon = RdmaMonitor(sysfs_root=sysfs, interfaces=["ib0"],
                      verbs_source=stub_source(tmp_path, "--hang"), poll_interval_s=60)

    async def body(sink: Collector) -> None:
        await sink.wait(VerbsEventFact, lambda f: f.event == "PORT_ACTIVE")
        events = [(f.event, f.port, f.netdev) for f in sink.facts
                  if isinstance(f, VerbsEventFact)]
        assert events == [("PORT_ERR", None, "ib0"), ("PORT_ACTIVE", 1, "ib0")]

    run(mon, body)


def test_real_child_without_a_device_says_why_and_ends(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    async def main() -> list[VerbsEvent]:
        return [e async for e in ChildVerbsSource()("mlx5_0")]

    assert asyncio.run(main()) == []
    # Here: no pyverbs; with pyverbs but no such device, the open fails. Both end the stream.
    assert any("verbs events of mlx5_0" in r.getMessage() for r in caplog.records)
