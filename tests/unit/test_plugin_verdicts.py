"""Jobs' verdicts on NICs (issue #12): the plugin's C encoder through a real unix datagram socket
into the daemon's decoder, the receiving monitor (credentials, rate limit, garbage), the store
(first report, more reporters, healthy again, expiry, bounds), and the engine showing them in
the NIC view, the history and /metrics without changing any NIC's state.
(tests/unit/test_hostile_input.py fuzzes the decoder; tests/lab/test_gray_nic_shown.py has the
real stall.)"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import stat
import struct
import subprocess
import time
import types
from pathlib import Path

import pytest
from test_exporters import settings_in

from linkguardd import engine_view
from linkguardd.api import convert
from linkguardd.census import wire as census_wire
from linkguardd.core import Core, build_core
from linkguardd.facts import (
    LinkFact,
    NicCensus,
    PluginCensusFact,
    PluginCensusRejectedFact,
    PluginVerdictFact,
    PluginVerdictRejectedFact,
)
from linkguardd.monitors import plugin_verdicts
from linkguardd.monitors.plugin_verdicts import PluginVerdictMonitor, TokenBuckets
from linkguardd.states import NicState, Reason
from linkguardd.verdicts import wire
from linkguardd.verdicts.store import (
    MAX_REPORTERS,
    MAX_REPORTERS_PER_UID,
    NOTE_INTERVAL_S,
    VerdictStore,
)

PLUGIN = Path(__file__).resolve().parents[2] / "plugin"
SEND = PLUGIN / "build" / "lg_verdict_send"
S = 1_000_000_000


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    subprocess.run(["make", "-s", "-C", str(PLUGIN), "build/lg_verdict_send"], check=True)


def send(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SEND), "--socket", path, *args], capture_output=True, text=True,
                          timeout=30, check=False)


def fact(nic: str = "rail0", verdict: str = "stalled", pid: int = 100, at_s: float = 0,
         **kw: int | str) -> PluginVerdictFact:
    return PluginVerdictFact(nic, int(at_s * S), verdict, pid, 1000, **kw)  # type: ignore[arg-type]


# ---- the datagram ------------------------------------------------------------------------------
@pytest.mark.parametrize("verdict", ["lossy", "slow"])  # slow: wrap mode's rate judge
def test_the_c_encoder_round_trips_through_the_daemon_decoder(sock_path: str,
                                                               verdict: str) -> None:
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    rx.bind(sock_path)
    rx.settimeout(10)
    with rx:
        tool = subprocess.Popen([str(SEND), "--socket", sock_path, "--path", "1", "--for-ms",
                                 "4000000000", "--loss-ppm", "20000", "--rate", str(2**63 + 5),
                                 "--expected", "12500000000", "--conn", "0xc0ffee", "--peer",
                                 "[fd00::1]:40001", "rail12", verdict])
        assert tool.wait(timeout=30) == 0
        data, anc, _, _ = rx.recvmsg(wire.SIZE + 1, socket.CMSG_SPACE(12))
    pid, uid, _gid = (int.from_bytes(anc[0][2][i:i + 4], "little") for i in (0, 4, 8))
    got = wire.decode(data, pid, uid, 7)
    assert got == PluginVerdictFact(
        "rail12", 7, verdict, tool.pid, os.getuid(), path=1, for_ms=4_000_000_000,
        loss_ppm=20_000, rate_bps=2**63 + 5, expected_bps=12_500_000_000, conn=0xC0FFEE,
        peer="[fd00::1]:40001")


def test_the_send_tool_says_why_nothing_went_out(sock_path: str) -> None:
    res = send(sock_path, "rail0", "stalled")
    assert res.returncode == 1 and "no daemon listening" in res.stderr
    for args, message in ((["rail0", "sideways"], "unknown verdict 'sideways'"),
                          (["--path", "2", "rail0", "slow"], "bad value"),
                          (["rail0"], "usage")):
        res = send(sock_path, *args)
        assert res.returncode == 2 and message in res.stderr, res.stderr


GOOD = wire.MAGIC + bytes([1, 0, 2, 0]) + b"rail0".ljust(16, b"\0") + bytes(32) + \
    b"198.18.1.2:40001".ljust(48, b"\0")


def edit(offset: int, raw: bytes) -> bytes:
    return GOOD[:offset] + raw + GOOD[offset + len(raw):]


@pytest.mark.parametrize("data, reason, words", [
    (GOOD[:-1], "bad_size", "103 bytes"),
    (GOOD + b"\0", "bad_size", "105 bytes"),
    (edit(0, b"LGVX"), "bad_magic", "magic"),
    (edit(4, b"\x02\x00"), "bad_version", "version 2"),
    (edit(6, b"\x09"), "bad_field", "unknown verdict 9"),
    (edit(7, b"\x02"), "bad_field", "path: 2"),
    (edit(8, b"rail0/x\0"), "bad_field", "nic"),
    (edit(8, b"ra:l0\0"), "bad_field", "nic"),
    (edit(8, b"\0" * 16), "bad_field", "nic"),
    (edit(8, b"r" * 16), "bad_field", "NUL"),
    (edit(8, b"ra\0l0"), "bad_field", "NUL"),
    (edit(8, b"r\xe4il\0"), "bad_field", "ASCII"),
    (edit(28, (1_000_001).to_bytes(4, "little")), "bad_field", "100 %"),
    (edit(56, b"198.18.1.2 ; rm\0"), "bad_field", "peer"),
])
def test_each_bad_field_is_rejected_by_name(data: bytes, reason: str, words: str) -> None:
    assert wire.decode(GOOD, 1, 2, 3).ifname == "rail0"
    with pytest.raises(wire.Rejected, match=words) as exc:
        wire.decode(data, 1, 2, 3)
    assert exc.value.reason == reason


# ---- the store ---------------------------------------------------------------------------------
def test_a_nic_turns_gray_at_the_first_report_and_clears_with_the_last() -> None:
    store = VerdictStore(60, ["rail0", "rail1"])
    (note,) = store.report(fact(pid=1, for_ms=812, peer="198.18.1.2:1"))
    assert note.reason == Reason.PLUGIN_VERDICT and note.ifname == "rail0"
    assert note.detail == "stalled for 812 ms (pid 1 uid 1000, primary path to 198.18.1.2:1)"
    assert store.report(fact(pid=2, at_s=1)) == []  # already gray: no second event
    assert store.report(fact(pid=1, at_s=2)) == []  # a repeat refreshes
    assert [r.fact.pid for r in store.reports("rail0")] == [1, 2]  # newest first
    assert store.reports("rail0")[0].count == 2
    assert store.report(fact(pid=1, verdict="healthy", at_s=3)) == []  # pid 2 still says so
    # within a minute of the gray note: held, and out when the NIC's interval ends
    assert store.report(fact(pid=2, verdict="healthy", at_s=4)) == [] and not store.gray("rail0")
    assert store.next_expiry_ns() == int(NOTE_INTERVAL_S * S)
    (cleared,) = store.expire(int(NOTE_INTERVAL_S * S))
    assert cleared.reason == Reason.PLUGIN_VERDICT_CLEARED
    assert cleared.detail.endswith("; 1 gray/clear change in 60 s, coalesced into this one")
    assert store.report(fact(pid=3, verdict="healthy")) == []  # healthy of a clean NIC
    assert store.report(fact("eth9")) == [] and not store.gray("eth9")  # not monitored
    assert store.accepted == {("rail0", "stalled"): 3, ("rail0", "healthy"): 3}


def test_reports_expire_and_the_nic_clears_once() -> None:
    store = VerdictStore(60, ["rail0"])
    store.report(fact(pid=1, at_s=0))
    store.report(fact(pid=2, at_s=30, verdict="slow", rate_bps=10**8, expected_bps=10**9))
    assert store.next_expiry_ns() == 60 * S
    assert store.expire(60 * S - 1) == []
    assert store.expire(60 * S) == [] and [r.fact.pid for r in store.reports("rail0")] == [2]
    assert store.next_expiry_ns() == 90 * S
    (note,) = store.expire(90 * S)
    assert note.reason == Reason.PLUGIN_VERDICT_CLEARED
    assert note.detail.startswith("no report for 60 s; the last: slow 0.8 of 8 Gbit/s (pid 2")
    assert store.next_expiry_ns() is None and store.expire(10**6 * S) == []


def test_memory_is_bounded_whatever_local_users_send() -> None:
    store = VerdictStore(600, ["rail0"])
    for uid in range(MAX_REPORTERS // MAX_REPORTERS_PER_UID + 1):
        for pid in range(MAX_REPORTERS_PER_UID + 10):
            store.report(dataclasses.replace(fact(pid=pid, at_s=pid), uid=uid))
    reports = store.reports("rail0")
    assert len(reports) == MAX_REPORTERS and len({(r.fact.pid, r.fact.uid) for r in reports}) \
        == MAX_REPORTERS
    store.configure(120, ["rail1"])
    assert store.reports("rail0") == [] and store.ttl_ns == 120 * S


def test_one_uid_cannot_push_out_another_users_report_nor_clear_it() -> None:
    """Issue 30, finding 5: 260 processes of uid 65534 once evicted uid 1000's report, then a
    `healthy` from the attacker cleared the NIC in the attacker's name."""
    store = VerdictStore(600, ["rail0"])
    victim = dataclasses.replace(fact(pid=7, verdict="lossy", loss_ppm=20_000), uid=1000)
    store.report(victim)
    notes = []
    for verdict, at_s in (("stalled", 1), ("healthy", 300)):
        for pid in range(MAX_REPORTERS + 4):
            notes += store.report(dataclasses.replace(
                fact(pid=1000 + pid, verdict=verdict, at_s=at_s + pid / 1000), uid=65534))
    assert [(r.fact.pid, r.fact.uid) for r in store.reports("rail0")] == [(7, 1000)]
    assert store.gray("rail0") and not [n for n in notes
                                        if n.reason == Reason.PLUGIN_VERDICT_CLEARED]


def test_a_full_nic_evicts_the_stalest_report_of_the_uids_holding_the_most() -> None:
    store = VerdictStore(600, ["rail0"])
    for i in range(MAX_REPORTERS):  # one report from each of 256 uids, uid 0's the stalest
        store.report(dataclasses.replace(fact(pid=i, at_s=i), uid=i))
    store.report(dataclasses.replace(fact(pid=999, at_s=MAX_REPORTERS), uid=5000))
    who = {(r.fact.pid, r.fact.uid) for r in store.reports("rail0")}
    assert len(who) == MAX_REPORTERS and (0, 0) not in who and (999, 5000) in who
    assert store.next_expiry_ns() == (1 + 600) * S  # uid 1's is the stalest now


def test_a_report_older_than_the_newest_still_expires_first() -> None:
    store = VerdictStore(60, ["rail0"])
    store.report(fact(pid=1, at_s=10))
    store.report(fact(pid=2, at_s=5))  # arrived later, observed earlier
    assert store.next_expiry_ns() == 65 * S
    assert store.expire(65 * S) == [] and [r.fact.pid for r in store.reports("rail0")] == [1]
    assert store.next_expiry_ns() == 70 * S


def test_a_uids_share_of_a_nic_is_freed_by_expiry_and_by_healthy() -> None:
    store = VerdictStore(60, ["rail0"])
    for pid in range(MAX_REPORTERS_PER_UID):
        store.report(fact(pid=pid, at_s=0))
    store.expire(60 * S)  # every one of them gone
    for pid in range(MAX_REPORTERS_PER_UID):
        store.report(fact(pid=100 + pid, at_s=61))
    assert len(store.reports("rail0")) == MAX_REPORTERS_PER_UID  # none evicted its own
    store.report(fact(pid=100, verdict="healthy", at_s=62))
    store.report(fact(pid=500, at_s=63))  # takes the freed place
    pids = {r.fact.pid for r in store.reports("rail0")}
    assert len(pids) == MAX_REPORTERS_PER_UID and 100 not in pids and {101, 500} <= pids


def test_a_flapping_report_is_one_note_per_nic_and_interval_with_its_count() -> None:
    """Issue 30, finding 2: stalled/healthy pairs from one pid were two events each, in the
    history, the shm ring and the log; now at most one per NIC per NOTE_INTERVAL_S."""
    store = VerdictStore(600, ["rail0", "rail1"])
    notes = []
    pairs = 590  # 59/s for 10 s, the review's rate
    for i in range(pairs):
        notes += store.report(fact(pid=1, at_s=i / 59))
        notes += store.report(fact(pid=1, verdict="healthy", at_s=i / 59 + 0.001))
        notes += store.expire(int((i / 59 + 0.002) * S))
    assert [n.reason for n in notes] == [Reason.PLUGIN_VERDICT]  # the first, at once
    assert store.next_expiry_ns() == int(NOTE_INTERVAL_S * S)
    (summary,) = store.expire(int(NOTE_INTERVAL_S * S))
    assert summary.reason == Reason.PLUGIN_VERDICT_CLEARED  # where it ended
    assert f"{2 * pairs - 1} gray/clear changes in 60 s" in summary.detail
    assert store.expire(int(2 * NOTE_INTERVAL_S * S)) == [] and store.next_expiry_ns() is None
    # another NIC has its own interval: its first note is not held
    assert [n.ifname for n in store.report(fact("rail1", pid=1, at_s=61))] == ["rail1"]


# ---- the monitor -------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 10 * S

    def __call__(self) -> int:
        return self.now


def run_monitor(path: str, steps: list[tuple[str, ...] | bytes], clock: Clock | None = None
                ) -> tuple[list[object], PluginVerdictMonitor]:
    """Starts the monitor on `path`, sends each step (lg_verdict_send args, or raw bytes from
    this process), reads what arrived, stops."""
    facts: list[object] = []
    monitor = PluginVerdictMonitor(path, ["rail0", "rail1"], clock or Clock())

    async def main() -> None:
        await monitor.start(facts.append)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
                for step in steps:
                    if isinstance(step, bytes):
                        tx.sendto(step, path)
                    else:
                        assert (await asyncio.to_thread(send, path, *step)).returncode == 0
                    monitor.read_batch()  # what the loop's reader does (the queue is short)
        finally:
            await monitor.stop()

    asyncio.run(main())
    return facts, monitor


def test_the_monitor_takes_verdicts_with_the_kernels_credentials(sock_path: str) -> None:
    facts, monitor = run_monitor(sock_path, [("--for-ms", "900", "rail1", "stalled"),
                                             b"garbage", ("eth7", "slow"), GOOD])
    assert monitor.health.success and not os.path.exists(sock_path)  # removed at stop
    kinds = [(type(f).__name__, getattr(f, "ifname", getattr(f, "reason", ""))) for f in facts]
    assert kinds == [("PluginVerdictFact", "rail1"),
                     ("PluginVerdictRejectedFact", "bad_size"),
                     ("PluginVerdictRejectedFact", "unknown_nic"),
                     ("PluginVerdictFact", "rail0")]
    first, last = facts[0], facts[3]
    assert isinstance(first, PluginVerdictFact) and first.for_ms == 900
    assert first.uid == os.getuid() and first.pid not in (0, os.getpid())  # the tool's pid
    assert isinstance(last, PluginVerdictFact) and last.pid == os.getpid()


def test_the_socket_is_writable_by_every_user_and_replaces_a_stale_one(sock_path: str) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(sock_path)  # what a killed daemon leaves behind
    stale.close()
    modes = []

    async def main() -> None:
        monitor = PluginVerdictMonitor(sock_path, ["rail0"])
        await monitor.start(lambda f: None)
        modes.append(os.stat(sock_path).st_mode)
        await monitor.stop()

    asyncio.run(main())
    assert stat.S_ISSOCK(modes[0]) and stat.S_IMODE(modes[0]) == 0o666


def test_a_file_in_the_way_is_left_alone_and_the_daemon_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "verdict.sock"
    path.write_text("not mine")
    monitor = PluginVerdictMonitor(str(path), ["rail0"])
    asyncio.run(monitor.start(lambda f: None))
    assert not monitor.health.success and "not a socket" in monitor.health.last_error
    assert path.read_text() == "not mine"
    asyncio.run(monitor.stop())


def test_a_second_daemon_does_not_steal_a_live_socket(sock_path: str) -> None:
    live = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    live.bind(sock_path)
    with live:
        monitor = PluginVerdictMonitor(sock_path, ["rail0"])
        asyncio.run(monitor.start(lambda f: None))
        assert not monitor.health.success and "another process" in monitor.health.last_error
        assert send(sock_path, "rail0", "stalled").returncode == 0
        assert len(live.recv(wire.SIZE + 1)) == wire.SIZE  # still the first one's
        asyncio.run(monitor.stop())
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)  # and left in place


def test_a_sender_over_its_rate_is_cut_off_until_its_bucket_refills(sock_path: str) -> None:
    clock = Clock()  # frozen: no refill while the burst arrives
    extra = 5
    facts, _ = run_monitor(sock_path, [GOOD] * (int(plugin_verdicts.BURST) + extra), clock)
    rejected = [f for f in facts if isinstance(f, PluginVerdictRejectedFact)]
    assert len(facts) - len(rejected) == plugin_verdicts.BURST
    assert [f.reason for f in rejected] == ["rate_limited"] * extra
    clock.now += S  # one second later: RATE_PER_S more
    facts, _ = run_monitor(sock_path, [GOOD], clock)
    assert [type(f) for f in facts] == [PluginVerdictFact]


def kernel_hands_over(monitor: PluginVerdictMonitor, data: bytes, uid: int,
                      count: int) -> list[object]:
    """`count` copies of `data` as the kernel hands them over from `uid` (the SCM_CREDENTIALS
    a real socket gives; a test cannot be 1100 users); the facts they made."""
    creds = [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("iII", 4242, uid, uid))]
    taken: list[object] = []
    monitor._sink = taken.append
    for _ in range(count):
        monitor._take(data, creds)
    return taken


def kernel_says(monitor: PluginVerdictMonitor, uid: int, count: int) -> int:
    """How many of `count` verdicts from `uid` were accepted."""
    return sum(isinstance(f, PluginVerdictFact) for f in kernel_hands_over(monitor, GOOD, uid,
                                                                           count))


def test_many_uids_together_are_capped_by_the_global_bucket() -> None:
    """Issue 30, finding 2: 1100 claimed uids once got every datagram through."""
    monitor = PluginVerdictMonitor("", ["rail0"], Clock())  # frozen: no refill
    accepted = sum(kernel_says(monitor, uid, 4) for uid in range(1100))
    assert accepted == plugin_verdicts.GLOBAL_BURST


def test_the_shared_bucket_says_until_when_it_refuses_every_uid() -> None:
    buckets = TokenBuckets(64, 128, global_rate_per_s=4, global_burst=2)
    now = 10 * S
    assert buckets.allow(1, now) and buckets.refusing_until_ns == 0  # a token left
    assert buckets.allow(2, now) and buckets.refusing_until_ns == now + S // 4  # empty
    assert not buckets.allow(3, now + S // 4 - 1) and buckets.refusing_until_ns > now + S // 8
    assert buckets.allow(3, now + S // 4)  # the token it was waiting for


def test_a_batch_past_the_shared_bucket_is_shed_as_one_count_and_a_census_still_taken(
        sock_path: str) -> None:
    """Issue 30: a flood of 1100 uids costs the daemon a read per datagram, no decoding, and
    then no reads at all until the bucket has a token; the census, which has buckets of its
    own, is not shed with the verdicts."""
    monitor = PluginVerdictMonitor(sock_path, ["rail0", "rail1"], Clock())  # frozen clock
    burst = int(plugin_verdicts.GLOBAL_BURST)
    census = census_wire.encode((NicCensus("rail0", primary=2),))
    facts: list[object] = []

    async def main() -> tuple[int, list[bool]]:
        await monitor.start(facts.append)
        try:
            drained = sum(kernel_says(monitor, uid, 1) for uid in range(burst + 1))
            assert drained == burst  # the shared bucket is empty now, and stays (frozen)
            monitor._sink = facts.append
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
                for data in [GOOD] * 4 + [census] + [GOOD] * 4:  # the kernel queues 10
                    tx.sendto(data, sock_path)
            paused = [monitor.paused]
            read = monitor.read_batch()
            paused.append(monitor.paused)
            monitor.resume()  # what the pause's timer does
            return read, [*paused, monitor.paused]
        finally:
            await monitor.stop()

    assert asyncio.run(main()) == (9, [False, True, False])
    assert [(type(f), getattr(f, "count", None)) for f in facts] == [
        (PluginCensusFact, None), (PluginVerdictRejectedFact, 8)]
    shed = facts[1]
    assert isinstance(shed, PluginVerdictRejectedFact)
    assert (shed.reason, shed.pid, shed.uid) == ("rate_limited", os.getpid(), os.getuid())


def test_the_engine_counts_every_datagram_a_rejected_fact_stands_for(tmp_path: Path) -> None:
    core = build_core(settings_in(tmp_path), ["rail0"], {}, [])
    engine = core.engine
    engine.on_fact(PluginVerdictRejectedFact("rate_limited", 1, 1000, 0, count=8))
    engine.on_fact(PluginVerdictRejectedFact("rate_limited", 1, 1000, 0))
    engine.on_fact(PluginCensusRejectedFact("rate_limited", 1, 1000, 0, count=3))
    assert core.view.plugin_verdict_counts()[1] == {"rate_limited": 9}
    assert core.view.census_counts()[1] == {"rate_limited": 3}


def test_a_uid_evicted_from_a_full_table_comes_back_without_a_fresh_burst() -> None:
    """Issue 30, finding 2: cycling through more uids than the table holds won a new burst
    each time a uid came back."""
    clock = Clock()
    monitor = PluginVerdictMonitor("", ["rail0"], clock)
    for uid in range(plugin_verdicts.MAX_SENDERS):  # a full table: each got its burst
        assert kernel_says(monitor, uid, 1) == 1
        clock.now += int(S / plugin_verdicts.GLOBAL_RATE_PER_S)  # the global bucket keeps up
    clock.now += S  # and is full again
    assert kernel_says(monitor, plugin_verdicts.MAX_SENDERS, 1) == 0  # evicts uid 0, empty
    assert kernel_says(monitor, 0, 10) == 0  # uid 0 is back: no fresh burst either
    clock.now += S
    assert kernel_says(monitor, 0, 10) == 10  # then refills at its rate like any other


# ---- the engine ------------------------------------------------------------------------------
async def linked_core(tmp_path: Path, clock: Clock) -> Core:
    """A started engine of rail0 and rail1, both with carrier (UP after the hold-down)."""
    core = build_core(settings_in(tmp_path), ["rail0", "rail1"], {}, [], clock=clock)
    await core.engine.start()
    for nic in ("rail0", "rail1"):
        core.engine.on_fact(LinkFact(nic, clock.now, admin_up=True, carrier=True,
                                     operstate="UP"), "netlink")
    return core


def test_the_engine_shows_records_and_counts_verdicts_without_a_state_change(
        tmp_path: Path) -> None:
    clock = Clock()

    async def main() -> dict[str, object]:
        core = await linked_core(tmp_path, clock)
        engine, view = core.engine, core.view
        try:
            clock.now += 10 * S  # past the hold-down: both UP
            engine._on_deadline()
            before = view.nic("rail0")
            engine.on_fact(fact(pid=7, at_s=10, for_ms=600), "plugin_verdicts")
            engine.on_fact(fact(pid=8, at_s=11), "plugin_verdicts")
            engine.on_fact(PluginVerdictRejectedFact("bad_magic", 9, 1000, clock.now))
            gray = view.nic("rail0")
            scrape = core.exporters.metrics.metrics.render()[0].decode()
            clock.now += 300 * S  # the default time to live
            engine._on_deadline()  # what the loop's timer does at the expiry
            return {"before": before, "gray": gray, "after": view.nic("rail0"),
                    "scrape": scrape, "events": view.events_since(0)}
        finally:
            await engine.stop()

    got = asyncio.run(main())
    before, gray, after = got["before"], got["gray"], got["after"]
    assert gray.state == before.state == after.state == NicState.UP  # type: ignore[attr-defined]
    assert gray.epoch == before.epoch  # type: ignore[attr-defined]
    assert [v.fact.pid for v in gray.plugin_verdicts] == [8, 7]  # type: ignore[attr-defined]
    assert after.plugin_verdicts == ()  # type: ignore[attr-defined]
    notes = [e for e in got["events"] if e.old_state == e.new_state]  # type: ignore[attr-defined]
    assert [(e.nic, Reason(e.reason).name) for e in notes] == [
        ("rail0", "PLUGIN_VERDICT"), ("rail0", "PLUGIN_VERDICT_CLEARED")]
    assert "stalled for 600 ms (pid 7 uid 1000" in notes[0].detail
    scrape = str(got["scrape"])
    assert 'linkguard_nic_plugin_gray_reporters{device="rail0"} 2.0' in scrape
    assert 'linkguard_nic_plugin_gray_reporters{device="rail1"} 0.0' in scrape
    assert 'linkguard_plugin_verdicts_total{device="rail0",verdict="stalled"} 2.0' in scrape
    assert 'linkguard_plugin_verdicts_total{device="rail1",verdict="lossy"} 0.0' in scrape
    assert 'linkguard_plugin_verdict_rejects_total{reason="bad_magic"} 1.0' in scrape
    assert 'linkguard_transitions_total{device="rail0",state="up"} 1.0' in scrape  # not 2
    assert before.state == NicState.UP  # type: ignore[attr-defined]


def test_a_status_builds_each_reports_view_and_message_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: a flood leaves 256 reports on a NIC and every status shows them all, so an
    unchanged report's view and message are the last status's."""
    clock = Clock()
    # Wall time moves with the engine's clock, as a daemon's two clocks do: with the test's
    # clock frozen, a busy machine's millisecond between two statuses would move the
    # wall-clock offset past its slack and rebuild the views (a flake, issue 26).
    monkeypatch.setattr(engine_view, "time",
                        types.SimpleNamespace(time=lambda: 1.7e9 + clock.now / 1e9))

    async def main() -> tuple[list[bool], list[int], list[bool]]:
        core = await linked_core(tmp_path, clock)
        engine, view, messages = core.engine, core.view, convert.VerdictMessages()
        try:
            for pid in range(3):
                engine.on_fact(fact("rail1", pid=pid, at_s=10 + pid), "plugin_verdicts")

            def status() -> tuple[tuple[object, ...], list[str]]:
                nic = view.nic("rail1")
                msg = convert.nic_message(nic, clock.now, messages.round())
                return nic.plugin_verdicts, [v.detail for v in msg.plugin_verdicts]

            first, first_words = status()
            again, again_words = status()
            built = [messages.built]
            engine.on_fact(fact("rail1", pid=1, at_s=20), "plugin_verdicts")  # one changes
            changed, _ = status()
            built.append(messages.built)
            engine.verdicts.configure(60, ["rail0", "rail1"])  # a reload's new time to live
            renewed, _ = status()
            built.append(messages.built)
            return ([a is b for a, b in zip(first, again)] + [first_words == again_words],
                    built, [v in first for v in changed] + [v in first for v in renewed])
        finally:
            await engine.stop()

    same, built, kept = asyncio.run(main())
    assert same == [True, True, True, True]
    assert built == [3, 4, 7]  # once each; then the changed one; then all, for their expiry
    assert kept == [False, True, True] + [False, False, False]  # pid 1 is the newest now


def test_a_reload_keeps_the_reports_of_nics_still_monitored(tmp_path: Path) -> None:
    async def main() -> tuple[int, int, float]:
        settings = settings_in(tmp_path)
        core = build_core(settings, ["rail0", "rail1"], {}, [])
        engine = core.engine
        await engine.start()
        try:
            now_s = time.monotonic()  # the engine's clock: nothing expires during the test
            engine.on_fact(fact("rail0", pid=7, at_s=now_s))
            engine.on_fact(fact("rail1", pid=7, at_s=now_s))
            fewer = dataclasses.replace(settings, interfaces=("rail0",), plugin_verdict_ttl_s=60)
            await engine.reload(fewer, ["rail0"], {}, [])
            return (len(core.view.nic("rail0").plugin_verdicts),
                    len(engine.verdicts.reports("rail1")),
                    engine.verdicts.ttl_ns / S)
        finally:
            await engine.stop()

    assert asyncio.run(main()) == (1, 0, 60.0)


def test_the_socket_is_bound_in_a_private_directory_then_renamed(sock_path: str) -> None:
    """Issue 30, finding 6: chmod() by path right after bind() followed whatever was at the
    path by then; now the socket gets its mode where no one else can reach, then moves."""
    seen: list[tuple[str, int]] = []

    async def main() -> None:
        monitor = PluginVerdictMonitor(sock_path, ["rail0"])
        await monitor.start(lambda f: None)
        assert monitor._sock is not None
        seen.append((monitor._sock.getsockname(), stat.S_IMODE(os.stat(sock_path).st_mode)))
        await monitor.stop()

    asyncio.run(main())
    (bound, mode), = seen
    assert bound == os.path.join(os.path.dirname(sock_path),
                                 f".{os.path.basename(sock_path)}.bind", "s") and mode == 0o666
    assert not os.path.exists(os.path.dirname(bound))  # the private directory is gone
