"""The linkguard.v1 gRPC API on two unix sockets: a servicer that reads only a DaemonView.

The kernel decides who may connect (libvirt's model), so the daemon never judges a caller:
  linkguard.sock     mode 0660, group admin_group: every call, Drain and Undrain included
  linkguard-ro.sock  mode 0660, group reader_group: reads; Drain/Undrain are PERMISSION_DENIED
Each socket is its own grpc server. grpc binds it inside a private 0700 directory; the daemon
then sets its mode and group and renames it into place, so it is never reachable with looser
permissions than configured, whatever the umask.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import metadata
from typing import Any, NoReturn

import grpc

from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc
from linkguardd.api import convert
from linkguardd.api.callers import CALLER_PID_KEY, describe_caller, group_id, read_peer_credentials
from linkguardd.bind_dir import private_bind_dir
from linkguardd.state_file import StateNotSaved
from linkguardd.states import NicState
from linkguardd.validate import drain_reason_problem, nic_name_problem
from linkguardd.view import (
    WATCH_QUEUE_EVENTS,
    DaemonView,
    EventView,
    FellBehind,
    NicView,
    UnknownNic,
)

log = logging.getLogger(__name__)

MISSED_EVENTS_KEY = "linkguard-missed-events"
RESUME_SINCE_KEY = "linkguard-resume-since"  # trailer of a Watch cut off for falling behind
# Each open Watch holds a queue of up to WATCH_QUEUE_EVENTS events and a connection: enough for
# every dashboard and operator of a host, far below what would weigh on the daemon.
MAX_WATCHERS_PER_SOCKET = 64
# Each socket is its own grpc server with its own connection cap, so a flood of connections to
# the read-only socket (open to every reader) leaves the admin socket reachable, and both caps
# together stay far below the daemon's open-file limit (OPEN_FILES in main.py).
MAX_CONNECTIONS_PER_SOCKET = 256
SERVER_OPTIONS = (
    ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS_PER_SOCKET),
    # A connection with no call for a minute is closed (GOAWAY): the CLI makes one call and
    # goes; a watcher has a call open, so it stays.
    ("grpc.max_connection_idle_ms", 60_000),
    # A local client sends its HTTP/2 preface at once; a connection that never does is closed.
    ("grpc.server_handshake_timeout_ms", 5_000),
)


class ApiError(RuntimeError):
    """The API could not start (the message says why and what to do)."""


def _json_default(value: Any) -> Any:
    """Dump() helper: the daemon's state holds dataclasses, enums and sets."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@dataclasses.dataclass(frozen=True)
class DaemonIdentity:
    """What GetStatus says about the daemon itself (injectable so golden outputs are stable)."""

    pid: int = dataclasses.field(default_factory=os.getpid)
    start_unix: float = dataclasses.field(default_factory=time.time)
    hostname: str = dataclasses.field(default_factory=socket.gethostname)
    version: str = ""

    def __post_init__(self) -> None:
        if not self.version:
            try:
                version = metadata.version("linkguard")
            except metadata.PackageNotFoundError:
                version = "unknown"
            object.__setattr__(self, "version", version)


@dataclasses.dataclass(frozen=True)
class SocketSpec:
    """One API socket: where, which group may connect, and whether it may change anything."""

    path: str
    group: str | None
    admin: bool


class LinkguardServicer(pb_grpc.LinkguardServicer):
    """Every call of one socket; `caller(context)` names the caller for the audit log."""

    def __init__(
        self,
        view: DaemonView,
        caller: Callable[[Any], str],
        identity: DaemonIdentity,
        sockets: tuple[SocketSpec, ...] = (),
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._view = view
        self._caller = caller
        self._identity = identity
        self._sockets = sockets
        self._now_ns = monotonic_ns
        self._watchers = 0  # open Watch streams on this socket
        self._verdict_messages = convert.VerdictMessages()

    # --- reads ------------------------------------------------------------------------------
    async def GetStatus(self, request: pb.GetStatusRequest, context: Any) -> pb.GetStatusResponse:
        now = self._now_ns()
        ident = self._identity
        verdict_message = self._verdict_messages.round()
        return pb.GetStatusResponse(
            nics=[convert.nic_message(nic, now, verdict_message) for nic in self._view.nics()],
            daemon=pb.DaemonInfo(
                version=ident.version,
                pid=ident.pid,
                start_unix=ident.start_unix,
                heartbeat_age_seconds=self._view.heartbeat_age_s(),
                hostname=ident.hostname,
            ),
        )

    async def ListEvents(
        self, request: pb.ListEventsRequest, context: Any
    ) -> pb.ListEventsResponse:
        await self._since_argument(request.since_seq, context)
        events = self._view.events_since(request.since_seq)
        missed = _missed(request.since_seq, events)
        if request.limit:
            events = events[-request.limit:]
        return pb.ListEventsResponse(
            events=[convert.event_message(e) for e in events], missed=missed
        )

    async def Watch(self, request: pb.WatchRequest, context: Any) -> AsyncIterator[pb.Event]:
        await self._since_argument(request.since_seq, context)
        if self._watchers >= MAX_WATCHERS_PER_SOCKET:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
                f"{self._watchers} watchers are already open on this socket, the most it "
                "serves; close one (each `linkguard-cli watch` holds one) and retry"))
        # Subscribe before reading the history: an event published in between is then in both,
        # and the seq check below drops the second copy, so nothing falls in the gap.
        queue = self._view.subscribe()
        self._watchers += 1
        try:
            last, missed = 0, 0
            history: list[EventView] = []
            if request.since_seq or request.replay:
                history = self._view.events_since(request.since_seq)
                missed = _missed(request.since_seq, history)
            # Sent at once, even with nothing to stream yet: the client waits for these headers
            # to know the daemon answers, then waits for events without a deadline.
            await context.send_initial_metadata(((MISSED_EVENTS_KEY, str(missed)),))
            for event in history:
                yield convert.event_message(event)
                last = event.seq
            while True:
                try:
                    event = await queue.get()
                except FellBehind as behind:
                    last = max(last, behind.last_seq)
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
                        f"this watcher fell more than {WATCH_QUEUE_EVENTS} events behind "
                        f"(it did not read them); resume with `linkguard-cli watch --since "
                        f"{last}`"), ((RESUME_SINCE_KEY, str(last)),))
                if event.seq > last:
                    yield convert.event_message(event)
                    last = event.seq
        finally:
            # Reached on client cancel (CancelledError at the await) and on server stop alike.
            self._watchers -= 1
            self._view.unsubscribe(queue)

    async def GetModule(self, request: pb.GetModuleRequest, context: Any) -> pb.ModuleDiagnostics:
        name = await self._nic_argument(request.nic, context)
        return convert.module_message(await self._lookup(name, context))

    async def Dump(self, request: pb.DumpRequest, context: Any) -> pb.DumpResponse:
        state = dict(self._view.dump())
        state.setdefault("api", {"sockets": [dataclasses.asdict(s) for s in self._sockets]})
        return pb.DumpResponse(json=json.dumps(state, indent=2, sort_keys=True,
                                               default=_json_default))

    async def ListJobs(self, request: pb.ListJobsRequest, context: Any) -> pb.ListJobsResponse:
        return pb.ListJobsResponse(jobs=[convert.job_message(j) for j in self._view.jobs()])

    # --- operator actions -------------------------------------------------------------------
    async def Drain(self, request: pb.DrainRequest, context: Any) -> pb.Nic:
        name = await self._nic_argument(request.nic, context)
        problem = drain_reason_problem(request.reason)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        reason = request.reason.strip()
        target = await self._lookup(name, context)
        problem = "" if request.force else backup_problem(target, self._view)
        if problem:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        forced = " (forced)" if request.force else ""
        try:
            nic = self._view.drain(name, reason)
        except UnknownNic:
            await self._not_found(name, context)
        except StateNotSaved as exc:
            log.warning("api: %s drained %s%s: %s (not saved: %s)", self._caller(context),
                        name, forced, reason, exc)
            await context.abort(grpc.StatusCode.INTERNAL, not_saved(name, "DRAINED", exc))
        log.info("api: %s drained %s%s: %s", self._caller(context), name, forced, reason)
        return convert.nic_message(nic, self._now_ns())

    async def Undrain(self, request: pb.UndrainRequest, context: Any) -> pb.Nic:
        name = await self._nic_argument(request.nic, context)
        try:
            nic = self._view.undrain(name)
        except UnknownNic:
            await self._not_found(name, context)
        except StateNotSaved as exc:
            log.warning("api: %s undrained %s (not saved: %s)", self._caller(context), name, exc)
            await context.abort(grpc.StatusCode.INTERNAL, not_saved(name, "undrained", exc))
        log.info("api: %s undrained %s", self._caller(context), name)
        return convert.nic_message(nic, self._now_ns())

    # --- helpers ----------------------------------------------------------------------------
    async def _nic_argument(self, name: str, context: Any) -> str:
        problem = nic_name_problem(name)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return name

    async def _since_argument(self, since: int, context: Any) -> None:
        head = self._view.head_seq()
        if since > head:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, since_problem(since, head))

    async def _lookup(self, name: str, context: Any) -> Any:
        try:
            return self._view.nic(name)
        except UnknownNic:
            await self._not_found(name, context)

    async def _not_found(self, name: str, context: Any) -> NoReturn:
        known = ", ".join(n.name for n in self._view.nics()) or "none"
        await context.abort(
            grpc.StatusCode.NOT_FOUND, f"no NIC named {name!r}; monitored NICs: {known}"
        )
        raise AssertionError("unreachable: abort raises")


class ReadOnlyServicer(LinkguardServicer):
    """The read-only socket: every read, and a clear refusal of anything that changes state."""

    async def Drain(self, request: pb.DrainRequest, context: Any) -> pb.Nic:
        await self._refuse("drain", context)

    async def Undrain(self, request: pb.UndrainRequest, context: Any) -> pb.Nic:
        await self._refuse("undrain", context)

    async def _refuse(self, action: str, context: Any) -> NoReturn:
        ro = next((s for s in self._sockets if not s.admin), None)
        admin = next((s for s in self._sockets if s.admin), None)
        here = f" {ro.path}" if ro else ""
        there = (f"use the admin socket {admin.path} (root, or group {admin.group})"
                 if admin and admin.group else
                 f"use the admin socket {admin.path} (root)" if admin else "use the admin socket")
        await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                            f"{action} is not served on the read-only socket{here}: {there}")
        raise AssertionError("unreachable: abort raises")


def backup_problem(nic: NicView, view: DaemonView) -> str:
    """Why draining `nic` would leave its traffic nowhere to go ('' when the backup is UP)."""
    force = "drain it anyway with --force"
    if not nic.backup:
        return f"refusing to drain {nic.name}: it has no backup NIC; {force}"
    try:
        backup = view.nic(nic.backup)
    except UnknownNic:
        return f"refusing to drain {nic.name}: its backup {nic.backup} is not monitored; {force}"
    if backup.state == NicState.UP:
        return ""
    state = convert.state_name(backup.state)
    return (f"refusing to drain {nic.name}: its backup {nic.backup} is {state} "
            f"({convert.reason_name(backup.reason).lower()}), so its traffic would have "
            f"nowhere to go; {force}")


def since_problem(since: int, head: int) -> str:
    return (f"there is no event #{since} yet: the newest is #{head}. Event numbers continue "
            "across daemon restarts, so a larger one comes from another host or from before "
            f"the daemon's state directory was lost; resume with --since {head}")


def not_saved(name: str, what: str, exc: Exception) -> str:
    return (f"{name} is {what}, but the daemon could not save it ({exc}): it will not survive "
            "a restart of linkguardd; see its log")


def _missed(since_seq: int, events: list[Any]) -> int:
    """How many events after since_seq fell out of the history before the first one kept."""
    if since_seq and events and events[0].seq > since_seq + 1:
        return events[0].seq - since_seq - 1
    return 0


class ApiServer:
    """The API on the admin socket and, when set, the read-only one. main.py calls
    `await start()` once the view can answer and `await stop()` on shutdown; SIGHUP needs
    nothing from here (the view stays the same)."""

    def __init__(
        self,
        view: DaemonView,
        socket_path: str,
        *,
        ro_socket_path: str = "",
        admin_group: str | None = None,
        reader_group: str | None = None,
        identity: DaemonIdentity | None = None,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self.ro_socket_path = os.path.abspath(ro_socket_path) if ro_socket_path else ""
        self.sockets = (SocketSpec(self.socket_path, admin_group or None, True),)
        if self.ro_socket_path:
            self.sockets += (SocketSpec(self.ro_socket_path, reader_group or None, False),)
        self._view = view
        self._identity = identity or DaemonIdentity()
        self._monotonic_ns = monotonic_ns
        self._servers: list[tuple[grpc.aio.Server, str]] = []  # with each one's public path

    async def start(self) -> None:
        for spec in self.sockets:
            _refuse_if_served(spec.path)
        try:
            for spec in self.sockets:
                await self._serve(spec)
        except BaseException:
            await self.stop(grace=0)
            raise
        log.info("api: serving on %s", " and ".join(s.path for s in self.sockets))

    async def _serve(self, spec: SocketSpec) -> None:
        os.makedirs(os.path.dirname(spec.path), mode=0o755, exist_ok=True)
        bind_dir = private_bind_dir(spec.path)
        bound = os.path.join(bind_dir, "s")  # stays the socket's address (getsockname)
        make = LinkguardServicer if spec.admin else ReadOnlyServicer
        servicer = make(
            self._view,
            lambda context: describe_caller(bound, _metadata(context, CALLER_PID_KEY)),
            self._identity, self.sockets, self._monotonic_ns)
        server = grpc.aio.server(options=SERVER_OPTIONS)
        pb_grpc.add_LinkguardServicer_to_server(servicer, server)
        try:
            server.add_insecure_port("unix:" + bound)
        except RuntimeError as exc:
            shutil.rmtree(bind_dir, ignore_errors=True)
            raise ApiError(f"cannot serve grpc on {bound}: {exc}") from exc
        self._servers.append((server, spec.path))
        await server.start()
        try:
            os.chmod(bound, SOCKET_MODE)  # still in the 0700 directory: nobody can reach it
            _apply_group(bound, spec)
            os.rename(bound, spec.path)  # atomically replaces a stale socket
        except OSError as exc:
            raise ApiError(f"cannot create the API socket {spec.path}: {exc}") from exc
        finally:
            shutil.rmtree(bind_dir, ignore_errors=True)

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting, end open calls (watchers see the stream end), remove the sockets."""
        servers, self._servers = self._servers, []
        for server, path in servers:
            await server.stop(grace)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


SOCKET_MODE = 0o660  # owner root and the socket's group may connect; nobody else


def _apply_group(path: str, spec: SocketSpec) -> None:
    if not spec.group:
        return
    gid = group_id(spec.group)
    if gid is None:
        log.warning("api: group %r does not exist; only root can use %s (create it: "
                    "systemd-sysusers, or groupadd %s)", spec.group, spec.path, spec.group)
        return
    try:
        os.chown(path, -1, gid)
    except OSError as exc:
        log.warning("api: cannot give %s to group %r: %s", spec.path, spec.group, exc)


def _metadata(context: Any, key: str) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return str(v)
    return None


def _refuse_if_served(path: str) -> None:
    """A second daemon must not steal a live daemon's socket; a stale file is fine."""
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        return  # nobody listening: a leftover from a daemon that was killed
    else:
        owner = read_peer_credentials(probe)
        raise ApiError(
            f"{path} is served by a running process (pid {owner.pid}); "
            "is another linkguardd running? (systemctl status linkguardd)"
        )
    finally:
        probe.close()
