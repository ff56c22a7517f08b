"""The gRPC API over a real unix socket: reads, Watch resume, drain permissions, error codes."""
from __future__ import annotations

import asyncio
import grp
import json
import os
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
from linkguardd.api.peercred import PeerCredentials, is_admin, read_peer_credentials
from linkguardd.states import NicState

WAIT_S = 30  # upper bound for waiting on the server thread; never a measured duration


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def served(fake: FakeDaemon) -> Iterator[ServedFake]:
    # the test process's own primary group is the admin group, so drains work as non-root too
    with ServedFake(fake, admin_group=str(os.getgid())) as s:
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
    nic = stub.Drain(pb.DrainRequest(nic="rail0", reason="swap optic"), timeout=WAIT_S)
    assert nic.state == pb.NIC_STATE_DRAINED and nic.drain_reason == "swap optic"
    assert fake.nic("rail0").state == NicState.DRAINED
    nic = stub.Undrain(pb.UndrainRequest(nic="rail0"), timeout=WAIT_S)
    assert nic.state == pb.NIC_STATE_RECOVERING


ROOT = PeerCredentials(pid=1, uid=0, gid=0)


@pytest.mark.parametrize("creds, admin_gid, allowed", [
    (ROOT, None, True),
    (PeerCredentials(10, 1000, 1000), None, False),
    (PeerCredentials(10, 1000, 1000), 1500, False),
    (PeerCredentials(10, 1000, 1500), 1500, True),  # primary group
    (PeerCredentials(10, 1000, 1000, (27, 1500)), 1500, True),  # supplementary group
    (PeerCredentials(10, 1000, 1000, (27,)), 1500, False),
    (None, 1500, False),  # a call that did not come through the gate
])
def test_is_admin(creds: PeerCredentials | None, admin_gid: int | None, allowed: bool) -> None:
    assert is_admin(creds, admin_gid) is allowed


def test_peer_credentials_are_the_kernels() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        creds = read_peer_credentials(a)
    assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(), os.getgid())
    assert set(creds.groups) == set(os.getgroups())


@pytest.mark.skipif(os.getuid() == 0, reason="root may always drain")
def test_drain_denied_to_a_non_admin_caller(fake: FakeDaemon) -> None:
    with ServedFake(fake, admin_group=None) as served, \
            grpc.insecure_channel("unix:" + served.socket_path) as ch:
        err = rpc_error(pb_grpc.LinkguardStub(ch).Drain, pb.DrainRequest(nic="rail0", reason="x"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert f"uid {os.getuid()}" in err.details()
    assert fake.nic("rail0").state == NicState.UP


# A separate process that drops root before its first grpc call: forking a process that already
# runs grpc is not supported, and the venv's interpreter may live where `nobody` cannot exec it.
DROP_AND_DRAIN = """
import os, sys, grpc
from linkguard.v1 import linkguard_pb2 as pb, linkguard_pb2_grpc as pb_grpc
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([int(g) for g in sys.argv[4:]]); os.setgid(gid); os.setuid(uid)
with grpc.insecure_channel("unix:" + path) as ch:
    try:
        pb_grpc.LinkguardStub(ch).Drain(pb.DrainRequest(nic="rail0", reason="t"), timeout=30)
        print("OK")
    except grpc.RpcError as e:
        print(e.code().name, e.details())
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a caller as another user")
@pytest.mark.parametrize("extra_groups, expected", [((), "PERMISSION_DENIED"), ((1,), "OK")])
def test_drain_as_another_user_is_judged_by_its_kernel_credentials(
        fake: FakeDaemon, extra_groups: tuple[int, ...], expected: str) -> None:
    nobody, nogroup = 65534, 65534
    directory = short_socket_dir()
    os.chmod(directory, 0o755)  # `nobody` must reach the socket; grpc's private dir stays 0700
    admin = grp.getgrgid(1).gr_name  # gid 1 ("daemon" on Debian) stands in for the admin group
    with ServedFake(fake, directory, admin_group=admin,
                    socket_group=grp.getgrgid(nogroup).gr_name) as served:
        out = subprocess.run(
            [sys.executable, "-c", DROP_AND_DRAIN, served.socket_path, str(nobody),
             str(nogroup), *map(str, extra_groups)],
            capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.startswith(expected), out
    if expected == "PERMISSION_DENIED":
        assert f"uid {nobody}" in out and admin in out
        assert fake.nic("rail0").state == NicState.UP
    else:
        assert fake.nic("rail0").state == NicState.DRAINED


# --- sockets on disk ----------------------------------------------------------------------------
def test_socket_mode_group_and_cleanup(fake: FakeDaemon) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    directory = short_socket_dir()
    with ServedFake(fake, directory, socket_group=group) as served:
        st = os.stat(served.socket_path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_gid == os.getgid()
        private = [p for p in os.listdir(directory) if p.endswith(".private")]
        assert len(private) == 1
        assert stat.S_IMODE(os.stat(os.path.join(directory, private[0])).st_mode) == 0o700
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
    """Guards the seam: the engine implements DaemonView as the servicer and collector read it."""
    from linkguardd.engine import Engine
    from linkguardd.exporters.metrics import MetricsExporter
    from linkguardd.facts import LinkFact
    from linkguardd.settings import Settings

    directory = short_socket_dir()
    settings = Settings(interfaces=("rail0", "rail1"), shm_path=os.path.join(directory, "shm"),
                        sysfs_root=directory, metrics_address="")

    async def main() -> None:
        engine = Engine(settings, ["rail0", "rail1"], {"rail0": "rail1", "rail1": "rail0"}, [])
        exporter = engine.exporter(MetricsExporter)
        assert exporter is not None
        metrics = exporter.metrics
        await engine.start()
        api = ApiServer(engine, os.path.join(directory, "linkguard.sock"))
        await api.start()
        try:
            engine.on_fact(LinkFact("rail0", time.monotonic_ns(), admin_up=True, carrier=True,
                                    operstate="UP"))
            async with grpc.aio.insecure_channel("unix:" + api.socket_path) as channel:
                stub = pb_grpc.LinkguardStub(channel)
                status = await stub.GetStatus(pb.GetStatusRequest(), timeout=WAIT_S)
                assert [n.name for n in status.nics] == ["rail0", "rail1"]
                assert status.nics[1].reason == "ABSENT"  # no such netdev under the fake sysfs
                nic = await stub.Drain(pb.DrainRequest(nic="rail0", reason="swap"),
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
