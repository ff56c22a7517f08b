"""NetlinkMonitor against real kernel events: a veth pair inside a namespace of our own.

Every test builds `lgnl<hex>` with lgA <-> lgB (both up), watches lgA plus the absent lgX, and
deletes the namespace in the fixture's finalizer. Waits are bounded; nothing asserts on timing.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from linkguardd.facts import CountersFact, Fact, LinkFact, LinkRenamedFact
from linkguardd.monitors.netlink import NetlinkMonitor

pytestmark = pytest.mark.lab
F = TypeVar("F")
WAIT_S = 5.0


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True)


@pytest.fixture
def ns() -> object:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    name = "lgnl" + secrets.token_hex(4)
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip(name, "link", "add", "lgA", "type", "veth", "peer", "name", "lgB")
        ip(name, "link", "set", "lgA", "up")
        ip(name, "link", "set", "lgB", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


class Collector:
    """The sink: keeps every fact, lets a test wait for the next one that matches."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self._changed = asyncio.Event()

    def __call__(self, fact: Fact) -> None:
        self.facts.append(fact)
        self._changed.set()

    def mark(self) -> int:
        return len(self.facts)

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


def link(name: str, **want: object) -> Callable[[LinkFact], bool]:
    return lambda f: f.ifname == name and all(getattr(f, k) == v for k, v in want.items())


def first_link(sink: Collector, name: str) -> LinkFact:
    return next(f for f in sink.facts if isinstance(f, LinkFact) and f.ifname == name)


async def sh(ns: str, *args: str) -> None:
    await asyncio.to_thread(ip, ns, *args)


def run_with_monitor(ns: str, body: Callable[[NetlinkMonitor, Collector], Awaitable[None]],
                     interfaces: list[str] | None = ["lgA", "lgX"],  # noqa: B006 - never mutated
                     stats_interval_s: float = 0.2) -> None:
    async def main() -> None:
        mon = NetlinkMonitor(interfaces, netns=ns, stats_interval_s=stats_interval_s)
        sink = Collector()
        await mon.start(sink)
        try:
            await body(mon, sink)
        finally:
            await mon.stop()

    asyncio.run(main())


def test_initial_dump_reports_watched_links_before_start_returns(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        facts = {f.ifname: f for f in sink.facts if isinstance(f, LinkFact)}
        assert set(facts) == {"lgA", "lgX"}  # lgB is not watched
        a = facts["lgA"]
        assert a.present and a.carrier and a.admin_up and a.operstate == "UP"
        assert a.ifindex > 0 and a.carrier_changes is not None
        assert a.speed_mbps == 10000  # veth's fixed speed, by the ethtool ioctl in the netns
        assert facts["lgX"] == LinkFact(ifname="lgX", at_ns=facts["lgX"].at_ns, present=False)
        assert mon.health.success

    run_with_monitor(ns, body)


def test_peer_down_and_up_change_carrier(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        before = first_link(sink, "lgA")
        mark = sink.mark()
        await sh(ns, "link", "set", "lgB", "down")
        down = await sink.wait(LinkFact, link("lgA", carrier=False), mark)
        assert down.operstate in ("DOWN", "LOWERLAYERDOWN") and down.admin_up
        assert down.speed_mbps is None
        assert down.carrier_down_count == (before.carrier_down_count or 0) + 1
        mark = sink.mark()
        await sh(ns, "link", "set", "lgB", "up")
        up = await sink.wait(LinkFact, link("lgA", carrier=True), mark)
        assert up.operstate == "UP" and up.speed_mbps == 10000

    run_with_monitor(ns, body)


def test_watched_link_added_then_deleted(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        mark = sink.mark()
        await sh(ns, "link", "add", "lgX", "type", "veth", "peer", "name", "lgY")
        added = await sink.wait(LinkFact, link("lgX", present=True), mark)
        assert added.ifindex > 0 and not added.carrier
        mark = sink.mark()
        await sh(ns, "link", "del", "lgX")
        gone = await sink.wait(LinkFact, link("lgX", present=False), mark)
        assert gone.ifindex == added.ifindex

    run_with_monitor(ns, body)


def test_rename_is_followed_by_ifindex(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        index = first_link(sink, "lgA").ifindex
        await sh(ns, "link", "set", "lgA", "down")  # the kernel renames only down links
        mark = sink.mark()
        await sh(ns, "link", "set", "lgA", "name", "lgR")
        renamed = await sink.wait(LinkRenamedFact, since=mark)
        assert renamed == LinkRenamedFact(old="lgA", new="lgR", ifindex=index,
                                          at_ns=renamed.at_ns)
        await sink.wait(LinkFact, link("lgA", present=False, ifindex=index), mark)
        mark = sink.mark()
        await sh(ns, "link", "set", "lgR", "name", "lgA")
        back = await sink.wait(LinkRenamedFact, since=mark)
        assert (back.old, back.new) == ("lgR", "lgA")
        await sink.wait(LinkFact, link("lgA", present=True, ifindex=index), mark)
        assert not any(isinstance(f, LinkFact) and f.ifname == "lgR" for f in sink.facts)

    run_with_monitor(ns, body)


def test_counters_are_sampled_every_interval(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        first = await sink.wait(CountersFact)
        second = await sink.wait(CountersFact, since=sink.facts.index(first) + 1)
        assert first.source == "netlink" and second.at_ns > first.at_ns
        for key in ("rx_crc_errors", "rx_frame_errors", "rx_missed_errors", "rx_errors",
                    "tx_errors", "rx_packets", "tx_bytes"):
            assert isinstance(first.counters[key], int)
        assert all(f.ifname == "lgA" for f in sink.facts if isinstance(f, CountersFact))

    run_with_monitor(ns, body)


def test_bridge_port_notices_are_not_link_removals(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        await sh(ns, "link", "add", "lgbr", "type", "bridge")
        mark = sink.mark()
        await sh(ns, "link", "set", "lgA", "master", "lgbr")
        await sh(ns, "link", "set", "lgA", "nomaster")  # the bridge says RTM_DELLINK (AF_BRIDGE)
        await sh(ns, "link", "set", "lgB", "down")  # a later event, to know we read past it
        await sink.wait(LinkFact, link("lgA", carrier=False), mark)
        assert all(f.present for f in sink.facts if isinstance(f, LinkFact) and f.ifname == "lgA")

    run_with_monitor(ns, body)


def test_none_watches_every_link_and_empty_list_watches_none(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        assert {f.ifname for f in sink.facts if isinstance(f, LinkFact)} == {"lo", "lgA", "lgB"}

    async def nothing(mon: NetlinkMonitor, sink: Collector) -> None:
        await sh(ns, "link", "set", "lgB", "down")
        await asyncio.sleep(0.5)  # longer than the 0.2 s stats interval
        assert sink.facts == []

    run_with_monitor(ns, body, interfaces=None)
    run_with_monitor(ns, nothing, interfaces=[])


def test_lost_notifications_are_recovered_by_a_dump(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        before = first_link(sink, "lgA").carrier_down_count or 0
        assert mon._sock is not None  # shrink the queue so that a burst overflows it
        mon._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        script = "".join(f"link set lgB {s}\n" for s in ["down", "up"] * 10 + ["down"])
        # Blocking on purpose: nothing is read while the burst arrives.
        subprocess.run(["ip", "-n", ns, "-batch", "-"],  # noqa: ASYNC221
                       input=script.encode(), check=True)
        # Only the resync dump can report the state after the 11th carrier loss.
        await sink.wait(LinkFact, link("lgA", carrier=False, carrier_down_count=before + 11))
        assert "ENOBUFS" in mon.health.last_error

    run_with_monitor(ns, body, interfaces=["lgA"], stats_interval_s=60)


def test_stop_means_no_more_facts(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        await mon.stop()
        mark = sink.mark()
        await sh(ns, "link", "set", "lgB", "down")
        await asyncio.sleep(0.3)
        assert sink.facts[mark:] == []

    run_with_monitor(ns, body)


def test_missing_netns_is_an_error_and_is_not_created() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    name = "lgnl" + secrets.token_hex(4)
    with pytest.raises(FileNotFoundError):
        asyncio.run(NetlinkMonitor(["lgA"], netns=name).start(lambda f: None))
    assert not Path("/var/run/netns", name).exists()


CHILD = """
import asyncio, json
from linkguardd.monitors.netlink import NetlinkMonitor
async def main():
    facts = []
    mon = NetlinkMonitor(["lgA"])
    await mon.start(facts.append)
    await mon.stop()
    print(json.dumps([f.speed_mbps for f in facts]))
asyncio.run(main())
"""


def test_speed_from_sysfs_in_our_own_namespace(ns: str) -> None:
    # `ip netns exec` remounts /sys for the namespace: the netns=None path reads sysfs there.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD], env=env,
                         check=True, capture_output=True, text=True, timeout=30).stdout
    assert json.loads(out) == [10000]


def test_fact_time_is_taken_at_receipt(ns: str) -> None:
    async def body(mon: NetlinkMonitor, sink: Collector) -> None:
        mark = sink.mark()
        before = time.monotonic_ns()
        await sh(ns, "link", "set", "lgB", "down")
        fact = await sink.wait(LinkFact, link("lgA", carrier=False), mark)
        assert before < fact.at_ns <= time.monotonic_ns()

    run_with_monitor(ns, body)
