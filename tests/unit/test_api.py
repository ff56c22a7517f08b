"""The gRPC API over real unix sockets: reads, Watch resume, the admin and read-only sockets
checked by the kernel, drain preconditions, error codes."""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import grp
import json
import logging
import os
import pwd
import queue
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from fake_daemon import FakeDaemon, ServedFake, short_socket_dir

from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc
from linkguardd.api import ApiError, ApiServer
from linkguardd.api.callers import CALLER_PID_KEY, connected_peers, read_peer_credentials
from linkguardd.api.server import MAX_WATCHERS_PER_SOCKET
from linkguardd.census.store import JobTraffic, NicTraffic
from linkguardd.facts import NicCensus
from linkguardd.state_file import StateNotSaved
from linkguardd.states import NicState
from linkguardd.view import WATCH_QUEUE_EVENTS

WAIT_S = 30  # upper bound for waiting on the server thread; never a measured duration


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def served(fake: FakeDaemon) -> Iterator[ServedFake]:
    with ServedFake(fake) as s:
        yield s


@pytest.fixture
def stub(served: ServedFake) -> Iterator[pb_grpc.LinkguardStub]:
    with grpc.insecure_channel("unix:" + served.socket_path) as channel:
        yield pb_grpc.LinkguardStub(channel)


def rpc_error(call: Callable[..., object], *args: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=WAIT_S)
    return info.value


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    done = threading.Event()
    for _ in range(WAIT_S * 100):
        if predicate():
            return
        done.wait(0.01)
    pytest.fail(f"never happened: {what}")


# --- reads ------------------------------------------------------------------------------------
def test_status_reports_every_nic_with_reason_and_time_in_state(stub: pb_grpc.LinkguardStub) -> None:
    resp = stub.GetStatus(pb.GetStatusRequest(), timeout=WAIT_S)
    assert [n.name for n in resp.nics] == ["rail0", "rail1", "rail2"]
    rail0, rail1, rail2 = resp.nics
    assert (rail0.state, rail0.reason, rail0.backup) == (pb.NIC_STATE_UP, "STARTUP", "rail1")
    assert rail1.state == pb.NIC_STATE_DEGRADED and rail1.reason == "DOM_WARNING"
    assert rail1.reason_text and rail1.state_text
    assert rail1.seconds_in_state == 754.0 and list(rail1.dom.warnings) == ["rx_power_low[2]"]
    assert rail2.state == pb.NIC_STATE_DOWN and not rail2.carrier
    assert not rail2.HasField("speed_mbps") and rail0.speed_mbps == 100000
    assert rail2.dom.status == "no_module" and not rail2.dom.HasField("temperature_celsius")
    assert resp.daemon.pid == 4242 and resp.daemon.heartbeat_age_seconds == 0.042


def test_get_module_has_lanes_thresholds_and_flags(stub: pb_grpc.LinkguardStub) -> None:
    mod = stub.GetModule(pb.GetModuleRequest(nic="rail1"), timeout=WAIT_S)
    assert (mod.status, mod.spec, mod.identifier, mod.identifier_code) == (
        "ok", "SFF-8636", "QSFP28", 0x11)
    assert [lane.lane for lane in mod.lanes] == [1, 2, 3, 4]
    assert mod.lanes[1].rx_power_watts == pytest.approx(0.00008)
    assert mod.thresholds["rx_power"].low_warning == pytest.approx(0.0001)
    assert list(mod.flags) == ["rx_power_low_warning[2]"]
    empty = stub.GetModule(pb.GetModuleRequest(nic="rail2"), timeout=WAIT_S)
    assert empty.status == "no_module" and empty.detail and not empty.lanes


def test_dump_is_json_with_the_views_state(stub: pb_grpc.LinkguardStub) -> None:
    state = json.loads(stub.Dump(pb.DumpRequest(), timeout=WAIT_S).json)
    assert state["settings"]["grpc_socket"] == "/run/linkguard/linkguard.sock"
    assert [n["name"] for n in state["nics"]] == ["rail0", "rail1", "rail2"]


def test_list_events_since_limit_and_missed(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    for _ in range(2):
        fake.inject_down("rail0")
        fake.inject_up("rail0")
    resp = stub.ListEvents(pb.ListEventsRequest(since_seq=1), timeout=WAIT_S)
    assert [e.seq for e in resp.events] == [2, 3, 4] and resp.missed == 0
    assert resp.events[1].reason == "CARRIER_LOST" and resp.events[1].detection_seconds > 0
    last = stub.ListEvents(pb.ListEventsRequest(limit=1), timeout=WAIT_S)
    assert [e.seq for e in last.events] == [4]
    fake.forget_history_through(2)
    assert stub.ListEvents(pb.ListEventsRequest(since_seq=1), timeout=WAIT_S).missed == 1


# --- watch ------------------------------------------------------------------------------------
class Watcher:
    """Reads a Watch stream on a thread so the test can inject between reads."""

    def __init__(self, stub: pb_grpc.LinkguardStub, **request: object) -> None:
        self.stream = stub.Watch(pb.WatchRequest(**request))
        self.events: queue.Queue[pb.Event | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                self.events.put(event)
        except grpc.RpcError:
            pass
        self.events.put(None)

    def next_seqs(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            event = self.events.get(timeout=WAIT_S)
            assert event is not None, "stream ended early"
            out.append(event.seq)
        return out

    def close(self) -> None:
        self.stream.cancel()
        self.thread.join(WAIT_S)


def test_watch_resumes_with_history_then_live(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    for _ in range(3):
        fake.inject_down("rail0")
    watcher = Watcher(stub, since_seq=1)
    try:
        assert watcher.next_seqs(2) == [2, 3]  # history after seq 1
        fake.inject_up("rail0")
        assert watcher.next_seqs(1) == [4]  # then live
        assert dict(watcher.stream.initial_metadata())["linkguard-missed-events"] == "0"
    finally:
        watcher.close()


def test_watch_without_since_sends_only_new_events(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    fake.inject_down("rail0")
    watcher = Watcher(stub)
    try:
        watcher.stream.initial_metadata()  # the server has subscribed once headers are sent
        fake.inject_up("rail0")
        assert watcher.next_seqs(1) == [2]
    finally:
        watcher.close()


def test_watch_has_no_duplicate_when_an_event_races_the_history_read(
        fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    fake.inject_down("rail1")
    fake.on_subscribe = lambda: fake.inject_up("rail1")  # lands in the queue *and* the history
    watcher = Watcher(stub, replay=True)
    try:
        assert watcher.next_seqs(2) == [1, 2]
        fake.on_subscribe = None
        fake.inject_down("rail1")
        assert watcher.next_seqs(1) == [3]  # seq 2 was not delivered twice
    finally:
        watcher.close()


def test_watch_reports_events_lost_from_history(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    for _ in range(5):
        fake.inject_down("rail0")
    fake.forget_history_through(3)
    watcher = Watcher(stub, since_seq=1)
    try:
        assert watcher.next_seqs(2) == [4, 5]
        assert dict(watcher.stream.initial_metadata())["linkguard-missed-events"] == "2"
    finally:
        watcher.close()


def test_watch_cancel_unsubscribes(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    watcher = Watcher(stub)
    watcher.stream.initial_metadata()
    assert fake.subscriber_count() == 1
    watcher.close()
    wait_until(lambda: fake.subscriber_count() == 0, "the servicer unsubscribed")


def test_server_stop_ends_open_watches(fake: FakeDaemon) -> None:
    with ServedFake(fake) as served, grpc.insecure_channel("unix:" + served.socket_path) as ch:
        watcher = Watcher(pb_grpc.LinkguardStub(ch))
        watcher.stream.initial_metadata()
        served.stop_server(grace=0.1)
        assert watcher.events.get(timeout=WAIT_S) is None  # the stream ended
    assert fake.subscriber_count() == 0


# --- errors -----------------------------------------------------------------------------------
def test_unknown_nic_is_not_found_naming_it(stub: pb_grpc.LinkguardStub) -> None:
    for call, request in ((stub.GetModule, pb.GetModuleRequest(nic="eth9")),
                          (stub.Drain, pb.DrainRequest(nic="eth9", reason="x")),
                          (stub.Undrain, pb.UndrainRequest(nic="eth9"))):
        err = rpc_error(call, request)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert "'eth9'" in err.details() and "rail0, rail1, rail2" in err.details()


@pytest.mark.parametrize("nic, reason, fragment", [
    ("", "cable swap", "empty"),
    ("a-name-far-too-long", "cable swap", "longer than 15"),
    ("rail0/x", "cable swap", "not a valid interface name"),
    ("rail 0", "cable swap", "not a valid interface name"),
    ("rail0", "", "needs a reason"),
    ("rail0", "   ", "needs a reason"),
    ("rail0", "x" * 201, "at most 200"),
    ("rail0", "line one\nline two", "printable"),
    ("rail0", "\x1b[31mred", "printable"),
])
def test_bad_arguments_are_invalid_argument(stub: pb_grpc.LinkguardStub, nic: str, reason: str,
                                            fragment: str) -> None:
    err = rpc_error(stub.Drain, pb.DrainRequest(nic=nic, reason=reason))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in err.details()


def test_get_module_rejects_an_empty_name(stub: pb_grpc.LinkguardStub) -> None:
    err = rpc_error(stub.GetModule, pb.GetModuleRequest(nic=""))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- drain, undrain and who may -----------------------------------------------------------------
def test_drain_then_undrain(fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    nic = stub.Drain(pb.DrainRequest(nic="rail1", reason="swap optic"), timeout=WAIT_S)
    assert nic.state == pb.NIC_STATE_DRAINED and nic.drain_reason == "swap optic"
    assert fake.nic("rail1").state == NicState.DRAINED
    nic = stub.Undrain(pb.UndrainRequest(nic="rail1"), timeout=WAIT_S)
    assert nic.state == pb.NIC_STATE_RECOVERING


def test_drain_is_refused_when_the_backup_is_not_up_unless_forced(
        fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    err = rpc_error(stub.Drain, pb.DrainRequest(nic="rail0", reason="swap optic"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "rail0" in err.details() and "backup rail1 is DEGRADED" in err.details()
    assert "--force" in err.details() and fake.nic("rail0").state == NicState.UP
    nic = stub.Drain(pb.DrainRequest(nic="rail0", reason="swap optic", force=True),
                     timeout=WAIT_S)
    assert nic.state == pb.NIC_STATE_DRAINED


def test_drain_of_a_nic_without_backup_needs_force() -> None:
    fake = FakeDaemon([dataclasses.replace(n, backup="") for n in FakeDaemon().nics()])
    with ServedFake(fake) as served, grpc.insecure_channel("unix:" + served.socket_path) as ch:
        err = rpc_error(pb_grpc.LinkguardStub(ch).Drain, pb.DrainRequest(nic="rail1", reason="x"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "rail1: it has no backup NIC" in err.details()


def test_a_drain_that_could_not_be_saved_is_in_force_and_says_so(
        fake: FakeDaemon, stub: pb_grpc.LinkguardStub, monkeypatch: pytest.MonkeyPatch) -> None:
    drain = fake.drain

    def unsaved(name: str, reason: str) -> object:
        drain(name, reason)
        raise StateNotSaved("cannot write /var/lib/linkguard/state.json: Read-only file system")

    monkeypatch.setattr(fake, "drain", unsaved)
    err = rpc_error(stub.Drain, pb.DrainRequest(nic="rail1", reason="swap optic"))
    assert err.code() == grpc.StatusCode.INTERNAL
    assert "rail1 is DRAINED, but the daemon could not save it" in err.details()
    assert "will not survive a restart" in err.details()
    assert fake.nic("rail1").state == NicState.DRAINED


def test_the_read_only_socket_reads_but_refuses_drain(fake: FakeDaemon, served: ServedFake) -> None:
    with grpc.insecure_channel("unix:" + served.ro_socket_path) as ch:
        ro = pb_grpc.LinkguardStub(ch)
        assert [n.name for n in ro.GetStatus(pb.GetStatusRequest(), timeout=WAIT_S).nics] == [
            "rail0", "rail1", "rail2"]
        for call, request in ((ro.Drain, pb.DrainRequest(nic="rail1", reason="x")),
                              (ro.Undrain, pb.UndrainRequest(nic="rail1"))):
            err = rpc_error(call, request)
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert served.ro_socket_path in err.details()
            assert f"use the admin socket {served.socket_path}" in err.details()
    assert fake.nic("rail1").state == NicState.DEGRADED


def test_the_drain_audit_line_names_the_callers_uid(
        stub: pb_grpc.LinkguardStub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="linkguardd.api.server")
    stub.Drain(pb.DrainRequest(nic="rail1", reason="swap optic"), timeout=WAIT_S,
               metadata=((CALLER_PID_KEY, str(os.getpid())),))
    stub.Undrain(pb.UndrainRequest(nic="rail1"), timeout=WAIT_S)  # no pid claimed: one peer
    lines = [r.getMessage() for r in caplog.records if "drained" in r.getMessage()]
    me = f"uid {os.getuid()} ({pwd.getpwuid(os.getuid()).pw_name}) pid {os.getpid()}"
    assert lines == [f"api: {me} drained rail1: swap optic", f"api: {me} undrained rail1"]


def test_connected_peers_are_the_kernels_credentials() -> None:
    path = os.path.join(short_socket_dir(), "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        assert connected_peers(path) == []  # the listener is not a caller
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            accepted, _ = listener.accept()
            with accepted:
                creds = read_peer_credentials(accepted)
                assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(),
                                                             os.getgid())
                assert connected_peers(path) == [creds]


def test_since_beyond_the_newest_event_is_out_of_range(fake: FakeDaemon,
                                                       stub: pb_grpc.LinkguardStub) -> None:
    fake.inject_down("rail0")
    err = rpc_error(stub.ListEvents, pb.ListEventsRequest(since_seq=57))
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "no event #57 yet: the newest is #1" in err.details()
    with pytest.raises(grpc.RpcError) as info:
        next(iter(stub.Watch(pb.WatchRequest(since_seq=2), timeout=WAIT_S)))
    assert info.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert stub.ListEvents(pb.ListEventsRequest(since_seq=1), timeout=WAIT_S).events == []


# Each caller is a forked child that drops to `nobody` with the given groups before touching
# the sockets: only connect(2), so the answer is the kernel's. grpc calls as another user run
# in a fresh interpreter (forking a process that runs grpc is not supported).
READER_GID, ADMIN_GID, NOBODY = 1, 2, 65534  # Debian's daemon and bin groups stand in


def connect_as_nobody(path: str, groups: tuple[int, ...]) -> int:
    """0 if `nobody` with `groups` may connect to `path`, else the errno."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 99
        try:
            os.setgroups(list(groups))
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                try:
                    sock.connect(path)
                    code = 0
                except OSError as exc:
                    code = exc.errno or 98
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


DRAIN_AS = """
import os, sys, grpc
from linkguard.v1 import linkguard_pb2 as pb, linkguard_pb2_grpc as pb_grpc
path, uid = sys.argv[1], int(sys.argv[2])
os.setgroups([int(g) for g in sys.argv[3:]]); os.setgid(uid); os.setuid(uid)
with grpc.insecure_channel("unix:" + path) as ch:
    stub = pb_grpc.LinkguardStub(ch)
    print(len(stub.GetStatus(pb.GetStatusRequest(), timeout=30).nics))
    try:
        stub.Drain(pb.DrainRequest(nic="rail1", reason="t"), timeout=30)
        print("OK")
    except grpc.RpcError as e:
        print(e.code().name, e.details())
"""


@pytest.fixture
def shared_served(fake: FakeDaemon) -> Iterator[ServedFake]:
    """The sockets in a directory `nobody` can enter, with the stand-in groups."""
    directory = short_socket_dir()
    os.chmod(directory, 0o755)
    with ServedFake(fake, directory, admin_group=grp.getgrgid(ADMIN_GID).gr_name,
                    reader_group=grp.getgrgid(READER_GID).gr_name) as served:
        yield served


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a caller as another user")
@pytest.mark.parametrize("groups, admin, ro", [
    ((), errno.EACCES, errno.EACCES),
    ((READER_GID,), errno.EACCES, 0),
    ((ADMIN_GID,), 0, errno.EACCES),
    ((READER_GID, ADMIN_GID), 0, 0),
])
def test_the_kernel_decides_who_may_connect(shared_served: ServedFake, groups: tuple[int, ...],
                                            admin: int, ro: int) -> None:
    assert connect_as_nobody(shared_served.socket_path, groups) == admin
    assert connect_as_nobody(shared_served.ro_socket_path, groups) == ro


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a caller as another user")
@pytest.mark.parametrize("socket_name, group, expected", [
    ("ro_socket_path", READER_GID, "PERMISSION_DENIED"),
    ("socket_path", ADMIN_GID, "OK"),
])
def test_a_reader_may_not_drain_an_admin_may(fake: FakeDaemon, shared_served: ServedFake,
                                            socket_name: str, group: int, expected: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", DRAIN_AS, getattr(shared_served, socket_name), str(NOBODY),
         str(group)], capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert out[0] == "3" and out[1].startswith(expected), out
    assert fake.nic("rail1").state == (NicState.DRAINED if expected == "OK"
                                       else NicState.DEGRADED)


# --- sockets on disk ----------------------------------------------------------------------------
def test_socket_modes_groups_and_cleanup(fake: FakeDaemon) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    directory = short_socket_dir()
    with ServedFake(fake, directory, admin_group=group, reader_group=group) as served:
        for path in (served.socket_path, served.ro_socket_path):
            st = os.stat(path)
            assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
            assert st.st_gid == os.getgid()
        assert sorted(os.listdir(directory)) == ["linkguard-ro.sock", "linkguard.sock"]
    assert os.listdir(directory) == []


def test_parent_directory_is_created(fake: FakeDaemon) -> None:
    nested = os.path.join(short_socket_dir(), "run", "linkguard")
    with ServedFake(fake, nested) as served:
        assert os.path.exists(served.socket_path)


def test_a_stale_socket_is_replaced(fake: FakeDaemon) -> None:
    directory = short_socket_dir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.path.join(directory, "linkguard.sock"))
    stale.close()  # the file stays, nobody listens: a daemon that was killed
    with ServedFake(fake, directory) as served, \
            grpc.insecure_channel("unix:" + served.socket_path) as ch:
        assert pb_grpc.LinkguardStub(ch).GetStatus(pb.GetStatusRequest(), timeout=WAIT_S).nics


def test_a_live_socket_is_not_taken_over(fake: FakeDaemon, served: ServedFake) -> None:
    second = ApiServer(fake, served.socket_path)
    with pytest.raises(ApiError, match=f"pid {os.getpid()}"):
        served.run(second.start)


# --- the real engine behind the same surfaces -----------------------------------------------------
def test_the_engine_serves_the_api_and_metrics() -> None:
    """Guards the seam: the engine's view implements DaemonView as the servicer and collector
    read it."""
    from linkguardd.core import build_core
    from linkguardd.facts import LinkFact
    from linkguardd.settings import Settings

    directory = short_socket_dir()
    settings = Settings(interfaces=("rail0", "rail1"), shm_path=os.path.join(directory, "shm"),
                        sysfs_root=directory, state_dir="",
                        metrics_address="")

    async def main() -> None:
        core = build_core(settings, ["rail0", "rail1"], {"rail0": "rail1", "rail1": "rail0"}, [])
        engine, metrics = core.engine, core.exporters.metrics.metrics
        await engine.start()
        api = ApiServer(core.view, os.path.join(directory, "linkguard.sock"))
        await api.start()
        try:
            engine.on_fact(LinkFact("rail0", time.monotonic_ns(), admin_up=True, carrier=True,
                                    operstate="UP"))
            async with grpc.aio.insecure_channel("unix:" + api.socket_path) as channel:
                stub = pb_grpc.LinkguardStub(channel)
                status = await stub.GetStatus(pb.GetStatusRequest(), timeout=WAIT_S)
                assert [n.name for n in status.nics] == ["rail0", "rail1"]
                assert status.nics[1].reason == "ABSENT"  # no such netdev under the fake sysfs
                assert [(n.backup, list(n.backup_set)) for n in status.nics] == [
                    ("rail1", ["rail1"]), ("rail0", ["rail0"])]  # a pair: a set of one
                nic = await stub.Drain(pb.DrainRequest(nic="rail0", reason="swap", force=True),
                                       timeout=WAIT_S)
                assert nic.state == pb.NIC_STATE_DRAINED and nic.drain_reason == "swap"
                events = await stub.ListEvents(pb.ListEventsRequest(), timeout=WAIT_S)
                assert events.events[-1].reason == "OPERATOR_DRAIN"
                assert json.loads((await stub.Dump(pb.DumpRequest(), timeout=WAIT_S)).json)
            text = metrics.render()[0].decode()
            assert 'linkguard_nic_state{device="rail0",linkguard_nic_state="drained"} 1.0' in text
            assert 'linkguard_transitions_total{device="rail0",state="drained"} 1.0' in text
        finally:
            await api.stop()
            await engine.stop()

    asyncio.run(main())


def test_a_watcher_that_stops_reading_is_cut_off_with_where_to_resume(
        fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    """Issue 30, finding 3: a stream nobody reads holds at most WATCH_QUEUE_EVENTS events, then
    ends with RESOURCE_EXHAUSTED and the seq to resume after; its queue is released."""
    stream = stub.Watch(pb.WatchRequest())
    stream.initial_metadata()  # subscribed; from here on nothing is read
    sent = 0
    while fake.subscriber_count() and sent < 50 * WATCH_QUEUE_EVENTS:
        fake.inject_down("rail0")
        sent += 1
    assert fake.subscriber_count() == 0, f"still subscribed after {sent} unread events"
    seqs = []
    with pytest.raises(grpc.RpcError) as info:
        for event in stream:
            seqs.append(event.seq)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    resume = dict(info.value.trailing_metadata())["linkguard-resume-since"]
    assert int(resume) == (seqs[-1] if seqs else 0) and f"--since {resume}" in info.value.details()
    # and the whole rest is still in the history for that resume
    rest = stub.ListEvents(pb.ListEventsRequest(since_seq=int(resume)), timeout=WAIT_S)
    assert rest.missed == 0 and rest.events[-1].seq == sent


def test_each_socket_serves_a_bounded_number_of_watchers(
        fake: FakeDaemon, stub: pb_grpc.LinkguardStub) -> None:
    """Issue 30, finding 3: one more stream than MAX_WATCHERS_PER_SOCKET is refused at once
    with RESOURCE_EXHAUSTED; closing one makes room again."""
    streams = [stub.Watch(pb.WatchRequest()) for _ in range(MAX_WATCHERS_PER_SOCKET)]
    try:
        for stream in streams:
            stream.initial_metadata()
        assert fake.subscriber_count() == MAX_WATCHERS_PER_SOCKET
        with pytest.raises(grpc.RpcError) as info:
            next(iter(stub.Watch(pb.WatchRequest(), timeout=WAIT_S)))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "watchers are already open on this socket" in info.value.details()
        streams.pop().cancel()
        wait_until(lambda: fake.subscriber_count() == MAX_WATCHERS_PER_SOCKET - 1, "a close")
        streams.append(stub.Watch(pb.WatchRequest()))
        streams[-1].initial_metadata()
        assert fake.subscriber_count() == MAX_WATCHERS_PER_SOCKET
    finally:
        for stream in streams:
            stream.cancel()


# --- the connection census (issue 29) ---------------------------------------------------------
def test_list_jobs_and_nic_traffic_on_the_read_only_socket(fake: FakeDaemon,
                                                           served: ServedFake) -> None:
    fake.census_jobs = [JobTraffic("4242", (1000,), (7, 8), (NicCensus("rail0", away=64),
                                                             NicCensus("rail1", backup=64)),
                                   failovers=64, failures=1, silent_s=0.25)]
    fake._nics["rail1"] = dataclasses.replace(fake.nic("rail1"), traffic=NicTraffic(
        processes=2, backup=64, standing=3, silent=1, failovers=5, failures={"peer": 1}))
    with grpc.insecure_channel("unix:" + served.ro_socket_path) as ch:
        ro = pb_grpc.LinkguardStub(ch)
        (job,) = ro.ListJobs(pb.ListJobsRequest(), timeout=WAIT_S).jobs
        rail1 = ro.GetStatus(pb.GetStatusRequest(), timeout=WAIT_S).nics[1]
    assert (job.job, list(job.uids), list(job.pids), job.connections, job.on_backup,
            job.failovers, job.failures, job.silent_seconds) == ("4242", [1000], [7, 8], 64, 64,
                                                                 64, 1, 0.25)
    assert [(n.nic, n.away, n.backup) for n in job.nics] == [("rail0", 64, 0), ("rail1", 0, 64)]
    t = rail1.traffic
    assert (t.processes, t.primary, t.backup, t.standing, t.silent, t.failovers) == (
        2, 0, 64, 3, 1, 5) and dict(t.failures) == {"peer": 1}
