"""A fake DaemonView with a few NICs and fault injection, and a harness serving it over gRPC.

FakeDaemon implements view.DaemonView the way the engine does (history, subscribers, drain and
undrain) without monitors or shared memory; tests change its state with the inject_* methods
from any thread. ServedFake runs the real ApiServer over it on its own event-loop thread, so
click's CliRunner and plain grpc clients can call it synchronously. Times are fixed so golden
outputs do not move.
"""
from __future__ import annotations

import asyncio
import atexit
import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, Self

from linkguardd.api import ApiServer, DaemonIdentity
from linkguardd.census.store import JobTraffic
from linkguardd.dom.common import ModuleDiagnostics
from linkguardd.facts import PluginVerdictFact
from linkguardd.monitors.base import MonitorHealth
from linkguardd.states import NicState, Reason
from linkguardd.verdicts.store import describe
from linkguardd.view import EventView, NicView, PluginVerdictView, UnknownNic, WatchQueue

BOOT_UNIX = 1_700_000_000.0  # 2023-11-14T22:13:20Z: the fake host's wall clock at monotonic 0
NOW_NS = 7_200 * 10**9  # the fake's "now" on CLOCK_MONOTONIC: two hours after boot
IDENTITY = DaemonIdentity(pid=4242, start_unix=BOOT_UNIX + 60, hostname="gpu-node-7",
                          version="0.1.0")

QSFP28_THRESHOLDS = {
    "temperature": {"high_alarm": 75.0, "low_alarm": -5.0, "high_warning": 70.0,
                    "low_warning": 0.0},
    "supply_voltage": {"high_alarm": 3.63, "low_alarm": 2.97, "high_warning": 3.465,
                       "low_warning": 3.135},
    "tx_bias": {"high_alarm": 0.015, "low_alarm": 0.002, "high_warning": 0.0135,
                "low_warning": 0.003},
    "tx_power": {"high_alarm": 0.002239, "low_alarm": 0.0001259, "high_warning": 0.001778,
                 "low_warning": 0.0001585},
    "rx_power": {"high_alarm": 0.002239, "low_alarm": 0.0000501, "high_warning": 0.001778,
                 "low_warning": 0.0001},
}


def qsfp28(rx_power_w: tuple[float, ...] = (0.00071, 0.00068, 0.00074, 0.00070),
           flags: frozenset[str] = frozenset(), serial: str = "FS2231A0042") -> ModuleDiagnostics:
    """A healthy 100G-SR4 optic as dom.sff8636 would decode it."""
    return ModuleDiagnostics(
        identifier=0x11, identifier_name="QSFP28", spec="SFF-8636", vendor="FS",
        part_number="QSFP28-SR4-100G", serial_number=serial, temperature_c=41.5,
        supply_voltage_v=3.2981, tx_bias_a=(0.00652, 0.00648, 0.0066, 0.00655),
        tx_power_w=(0.00081, 0.00079, 0.00083, 0.0008), rx_power_w=rx_power_w,
        rx_power_type="average", thresholds=QSFP28_THRESHOLDS, flags=flags)


# A job on rail0 saw one of its flows stall (the daemon saw nothing: rail0 stays UP).
_STALLED_FACT = PluginVerdictFact("rail0", NOW_NS - 5 * 10**9, "stalled", pid=31337, uid=1000,
                                  for_ms=812, conn=0xC0FFEE, peer="198.18.1.2:40001")
STALLED = PluginVerdictView(
    _STALLED_FACT, first_unix=BOOT_UNIX + 7_190, last_unix=BOOT_UNIX + 7_195, reports=2,
    expires_unix=BOOT_UNIX + 7_495, detail=describe(_STALLED_FACT))


def default_nics() -> list[NicView]:
    """rail0 healthy with an optic, but a job reports it stalled; rail1 DEGRADED by a weak lane;
    rail2 DOWN, no module."""
    weak = qsfp28((0.00069, 0.00008, 0.00072, 0.00071), frozenset({"rx_power_low_warning[2]"}),
                  serial="FS2231A0043")
    counters = {"rx_crc_errors": 0, "rx_frame_errors": 0, "rx_missed_errors": 3, "rx_errors": 3,
                "tx_errors": 0}
    return [
        NicView("rail0", NicState.UP, Reason.STARTUP, "rail1", True, True, "UP", 100000, 1,
                60 * 10**9, BOOT_UNIX + 60, dict(counters, carrier_changes=2), "ok", (), (),
                qsfp28(), rdma_device="mlx5_0", plugin_verdicts=(STALLED,)),
        NicView("rail1", NicState.DEGRADED, Reason.DOM_WARNING, "rail0", True, True, "UP",
                100000, 3, NOW_NS - 754 * 10**9, BOOT_UNIX + 7_200 - 754,
                dict(counters, rx_crc_errors=41, carrier_changes=6, symbol_error=3402,
                     packet_seq_err=17, fec_corrected_blocks=912345, fec_uncorrectable_blocks=2),
                "ok", weak.warnings(), weak.alarms(), weak, rdma_device="mlx5_1",
                dom_flags_seen={"rx_power_low_warning[2]": 3, "temperature_high_warning": 1},
                counter_rates={"fec_corrected_blocks": 1520.0, "fec_uncorrectable_blocks": 0.0,
                               "packet_seq_err": 2.0, "rx_crc_errors": 0.0,
                               "symbol_error": 25.0},
                counters_over=("symbol_error",)),
        NicView("rail2", NicState.DOWN, Reason.CARRIER_LOST, "rail0", True, False,
                "LOWERLAYERDOWN", None, 2, NOW_NS - 9_500_000_000, BOOT_UNIX + 7_190.5,
                dict(counters, carrier_changes=1), backup_set=("rail0", "rail1")),
    ]


def all_up_nics() -> list[NicView]:
    return [dataclasses.replace(n, state=NicState.UP, reason=Reason.STARTUP, carrier=True,
                                operstate="UP") for n in default_nics()]


class FakeDaemon:
    """DaemonView over a dict of NicViews; thread-safe, so tests inject from their own thread."""

    def __init__(self, nics: list[NicView] | None = None) -> None:
        self._lock = threading.Lock()
        self._nics: dict[str, NicView] = {n.name: n for n in (nics or default_nics())}
        self._history: list[EventView] = []
        self._subscribers: dict[WatchQueue, asyncio.AbstractEventLoop] = {}
        self._seq = 0
        self.monotonic_ns = NOW_NS
        self.heartbeat_age = 0.042
        self.verdicts_accepted: dict[tuple[str, str], int] = {}
        self.verdicts_rejected: dict[str, int] = {}
        self.census_jobs: list[JobTraffic] = []
        self.census_processes = 0
        self.census_rejected: dict[str, int] = {}
        # called inside subscribe(), e.g. to publish an event between a watcher's subscribe and
        # its history read (the race the API must close)
        self.on_subscribe: Callable[[], object] | None = None
        self.health: dict[str, MonitorHealth] = {
            "netlink": MonitorHealth(True, 0.0012),
            "rdma": MonitorHealth(True, 0.0008),
            "dom": MonitorHealth(False, 0.0153, "rail2: EIO", errors=4),
        }

    # --- DaemonView ---------------------------------------------------------------------------
    def nics(self) -> list[NicView]:
        with self._lock:
            return list(self._nics.values())

    def nic(self, name: str) -> NicView:
        with self._lock:
            try:
                return self._nics[name]
            except KeyError:
                raise UnknownNic(name) from None

    def events_since(self, seq: int) -> list[EventView]:
        with self._lock:
            return [e for e in self._history if e.seq > seq]

    def head_seq(self) -> int:
        with self._lock:
            return self._seq

    def subscribe(self) -> WatchQueue:
        queue = WatchQueue()
        with self._lock:
            self._subscribers[queue] = asyncio.get_running_loop()
        if self.on_subscribe is not None:
            self.on_subscribe()
        return queue

    def unsubscribe(self, queue: WatchQueue) -> None:
        with self._lock:
            self._subscribers.pop(queue, None)

    def drain(self, name: str, reason: str) -> NicView:
        self.nic(name)
        self.inject_state(name, NicState.DRAINED, Reason.OPERATOR_DRAIN, reason,
                          drain_reason=reason)
        return self.nic(name)

    def undrain(self, name: str) -> NicView:
        self.nic(name)
        self.inject_state(name, NicState.RECOVERING, Reason.OPERATOR_UNDRAIN, drain_reason="")
        return self.nic(name)

    def dump(self) -> dict[str, Any]:
        return {"settings": {"grpc_socket": "/run/linkguard/linkguard.sock"},
                "nics": [{"name": n.name, "state": NicState(n.state).name} for n in self.nics()],
                "events": len(self._history)}

    def monitor_health(self) -> Mapping[str, MonitorHealth]:
        return dict(self.health)

    def heartbeat_age_s(self) -> float:
        return self.heartbeat_age

    def plugin_verdict_counts(self) -> tuple[Mapping[tuple[str, str], int], Mapping[str, int]]:
        return dict(self.verdicts_accepted), dict(self.verdicts_rejected)

    def jobs(self) -> list[JobTraffic]:
        return list(self.census_jobs)

    def census_counts(self) -> tuple[int, Mapping[str, int]]:
        return self.census_processes, dict(self.census_rejected)

    # --- fault injection ----------------------------------------------------------------------
    def inject_state(self, name: str, state: NicState, reason: Reason, detail: str = "",
                     detection_ns: int = 0, **changes: Any) -> EventView:
        """Move `name` to `state` as the engine would: new epoch, event in history and queues."""
        with self._lock:
            old = self._nics[name]
            self.monotonic_ns += 10**9  # each event one second after the previous one
            new = dataclasses.replace(
                old, state=state, reason=reason, epoch=old.epoch + 1,
                since_monotonic_ns=self.monotonic_ns,
                since_unix=BOOT_UNIX + self.monotonic_ns / 1e9, **changes)
            self._nics[name] = new
            self._seq += 1
            event = EventView(self._seq, name, int(old.state), int(state), int(reason), detail,
                              new.epoch, new.since_unix, detection_ns)
            self._history.append(event)
            subscribers = list(self._subscribers.items())
        for queue, loop in subscribers:
            loop.call_soon_threadsafe(queue.put, event)
        return event

    def inject_down(self, name: str, reason: Reason = Reason.CARRIER_LOST,
                    detection_ns: int = 180_000) -> EventView:
        return self.inject_state(name, NicState.DOWN, reason, "", detection_ns, carrier=False,
                                 operstate="LOWERLAYERDOWN")

    def inject_up(self, name: str) -> EventView:
        return self.inject_state(name, NicState.UP, Reason.HOLDDOWN_EXPIRED, carrier=True,
                                 operstate="UP")

    def inject_dom(self, name: str, diagnostics: ModuleDiagnostics | None,
                   status: str = "ok") -> None:
        """A new module read, without a transition (the policy decides those)."""
        with self._lock:
            self._nics[name] = dataclasses.replace(
                self._nics[name], dom=diagnostics, dom_status=status,
                dom_warnings=diagnostics.warnings() if diagnostics else (),
                dom_alarms=diagnostics.alarms() if diagnostics else ())

    def forget_history_through(self, seq: int) -> None:
        """Drop old events, as the engine's bounded history does after many transitions."""
        with self._lock:
            self._history = [e for e in self._history if e.seq > seq]

    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)


def short_socket_dir() -> str:
    """A private directory with a short path: unix socket paths are limited to 107 bytes
    (pytest's tmp_path is often longer). Removed when the test process exits."""
    path = tempfile.mkdtemp(prefix="lg-", dir="/tmp")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


class ServedFake:
    """`with ServedFake(fake) as served:` the real API on served.socket_path (admin) and
    served.ro_socket_path (read-only), in a thread."""

    def __init__(self, fake: FakeDaemon, socket_dir: str | None = None, **server_args: Any):
        self.fake = fake
        directory = socket_dir or short_socket_dir()
        self.socket_path = os.path.join(directory, "linkguard.sock")
        self.ro_socket_path = os.path.join(directory, "linkguard-ro.sock")
        server_args.setdefault("ro_socket_path", self.ro_socket_path)
        server_args.setdefault("identity", IDENTITY)
        server_args.setdefault("monotonic_ns", lambda: fake.monotonic_ns)
        self._server_args = server_args
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.server: ApiServer | None = None

    def run(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        future: Future[Any] = asyncio.run_coroutine_threadsafe(make(), self._loop)
        return future.result(timeout=30)

    def __enter__(self) -> Self:
        self._thread.start()

        async def start() -> ApiServer:
            server = ApiServer(self.fake, self.socket_path, **self._server_args)
            await server.start()
            return server

        self.server = self.run(start)
        return self

    def stop_server(self, grace: float = 0.5) -> None:
        """Stop the API as the daemon does on SIGTERM (open watches end)."""
        if self.server is not None:
            server, self.server = self.server, None
            self.run(lambda: server.stop(grace=grace))

    def __exit__(self, *exc: object) -> None:
        self.stop_server()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
