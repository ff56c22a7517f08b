"""The linkguard.v1 gRPC API over a unix socket: a servicer that reads only a DaemonView.

Layout on disk (socket_path = /run/linkguard/linkguard.sock by default):
  linkguard.sock             the public socket (mode 0660, group = socket_group): CredentialGate
  .linkguard.sock.private/   0700, grpc's own socket inside; only the gate connects to it
Reads are open to whoever can connect; Drain/Undrain need root or the admin group, judged from
the connecting process's kernel credentials (see peercred.py for why the gate exists).
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
from linkguardd.api.peercred import (
    CredentialGate,
    PeerCredentials,
    group_id,
    is_admin,
    make_private_dir,
    read_peer_credentials,
)
from linkguardd.view import DaemonView, EventView, UnknownNic

log = logging.getLogger(__name__)

IFNAMSIZ = 16  # linux/if.h; a name has at most IFNAMSIZ-1 characters
MAX_REASON_CHARS = 200
MISSED_EVENTS_KEY = "linkguard-missed-events"


class ApiError(RuntimeError):
    """The API could not start (the message says why and what to do)."""


def nic_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Linux interface name (dev_valid_name, net/core/dev.c), or None."""
    if not name:
        return "the NIC name is empty"
    if len(name) >= IFNAMSIZ:
        return f"NIC name {name[:40]!r} is longer than {IFNAMSIZ - 1} characters"
    if name in (".", "..") or any(c in "/:" or c.isspace() or not c.isprintable() for c in name):
        return f"{name!r} is not a valid interface name"
    return None


def drain_reason_problem(reason: str) -> str | None:
    if not reason.strip():
        return "a drain needs a reason (e.g. --reason 'swap optic, ticket 1234')"
    if len(reason) > MAX_REASON_CHARS:
        return f"the reason is {len(reason)} characters long; at most {MAX_REASON_CHARS}"
    if not reason.isprintable():
        return "the reason must be printable text on one line (no control characters)"
    return None


def _json_default(value: Any) -> Any:
    """Dump() helper: the engine's state holds dataclasses, enums and sets."""
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


class LinkguardServicer(pb_grpc.LinkguardServicer):
    def __init__(
        self,
        view: DaemonView,
        caller: Callable[[grpc.aio.ServicerContext], PeerCredentials | None],
        admin_group: str | None,
        identity: DaemonIdentity,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._view = view
        self._caller = caller
        self._admin_group = admin_group
        self._identity = identity
        self._now_ns = monotonic_ns

    # --- reads ------------------------------------------------------------------------------
    async def GetStatus(self, request: pb.GetStatusRequest, context: Any) -> pb.GetStatusResponse:
        now = self._now_ns()
        ident = self._identity
        return pb.GetStatusResponse(
            nics=[convert.nic_message(nic, now) for nic in self._view.nics()],
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
        events = self._view.events_since(request.since_seq)
        missed = _missed(request.since_seq, events)
        if request.limit:
            events = events[-request.limit:]
        return pb.ListEventsResponse(
            events=[convert.event_message(e) for e in events], missed=missed
        )

    async def Watch(self, request: pb.WatchRequest, context: Any) -> AsyncIterator[pb.Event]:
        # Subscribe before reading the history: an event published in between is then in both,
        # and the seq check below drops the second copy, so nothing falls in the gap.
        queue = self._view.subscribe()
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
                event = await queue.get()
                if event.seq > last:
                    yield convert.event_message(event)
        finally:
            # Reached on client cancel (CancelledError at the await) and on server stop alike.
            self._view.unsubscribe(queue)

    async def GetModule(self, request: pb.GetModuleRequest, context: Any) -> pb.ModuleDiagnostics:
        name = await self._nic_argument(request.nic, context)
        return convert.module_message(await self._lookup(name, context))

    async def Dump(self, request: pb.DumpRequest, context: Any) -> pb.DumpResponse:
        state = dict(self._view.dump())
        state.setdefault("api", {"admin_group": self._admin_group or ""})
        return pb.DumpResponse(json=json.dumps(state, indent=2, sort_keys=True,
                                               default=_json_default))

    # --- operator actions -------------------------------------------------------------------
    async def Drain(self, request: pb.DrainRequest, context: Any) -> pb.Nic:
        who = await self._authorize(context, "drain")
        name = await self._nic_argument(request.nic, context)
        problem = drain_reason_problem(request.reason)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            nic = self._view.drain(name, request.reason.strip())
        except UnknownNic:
            await self._not_found(name, context)
        log.info("api: %s drained %s: %s", who.describe(), name, request.reason.strip())
        return convert.nic_message(nic, self._now_ns())

    async def Undrain(self, request: pb.UndrainRequest, context: Any) -> pb.Nic:
        who = await self._authorize(context, "undrain")
        name = await self._nic_argument(request.nic, context)
        try:
            nic = self._view.undrain(name)
        except UnknownNic:
            await self._not_found(name, context)
        log.info("api: %s undrained %s", who.describe(), name)
        return convert.nic_message(nic, self._now_ns())

    # --- helpers ----------------------------------------------------------------------------
    async def _authorize(self, context: Any, action: str) -> PeerCredentials:
        creds = self._caller(context)
        if creds is not None and is_admin(creds, group_id(self._admin_group)):
            return creds
        who = creds.describe() if creds else "an unidentified caller"
        group = f"members of group {self._admin_group!r}" if self._admin_group else "nobody else"
        log.warning("api: refused %s to %s", action, who)
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{action} needs root or membership of the admin group ({group}); "
            f"the caller is {who}",
        )
        raise AssertionError("unreachable: abort raises")

    async def _nic_argument(self, name: str, context: Any) -> str:
        problem = nic_name_problem(name)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return name

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


def _missed(since_seq: int, events: list[Any]) -> int:
    """How many events after since_seq fell out of the history before the first one kept."""
    if since_seq and events and events[0].seq > since_seq + 1:
        return events[0].seq - since_seq - 1
    return 0


class ApiServer:
    """The API on `socket_path`. The engine calls `await start()` once the view can answer,
    and `await stop()` on shutdown; SIGHUP needs nothing from here (the view stays the same)."""

    def __init__(
        self,
        view: DaemonView,
        socket_path: str,
        *,
        socket_group: str | None = None,
        admin_group: str | None = None,
        socket_mode: int = 0o660,
        identity: DaemonIdentity | None = None,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self._view = view
        self._socket_group = socket_group
        self._admin_group = admin_group
        self._socket_mode = socket_mode
        self._identity = identity or DaemonIdentity()
        self._monotonic_ns = monotonic_ns
        self._grpc: grpc.aio.Server | None = None
        self._gate: CredentialGate | None = None
        self._private_dir: str | None = None

    async def start(self) -> None:
        os.makedirs(os.path.dirname(self.socket_path), mode=0o755, exist_ok=True)
        _refuse_if_served(self.socket_path)
        self._private_dir = make_private_dir(self.socket_path)
        private_socket = os.path.join(self._private_dir, "grpc.sock")
        self._gate = CredentialGate(self.socket_path, private_socket)
        self._grpc = grpc.aio.server()
        servicer = LinkguardServicer(
            self._view,
            lambda context: self._gate.lookup(context.peer()) if self._gate else None,
            self._admin_group,
            self._identity,
            self._monotonic_ns,
        )
        pb_grpc.add_LinkguardServicer_to_server(servicer, self._grpc)
        try:
            self._grpc.add_insecure_port("unix:" + private_socket)
        except RuntimeError as exc:
            raise ApiError(f"cannot serve grpc on {private_socket}: {exc}") from exc
        await self._grpc.start()
        listener = self._bind_public_socket()
        await self._gate.start(listener)
        log.info("api: serving on %s", self.socket_path)

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting, end open calls (watchers see the stream end), remove the sockets."""
        if self._gate is not None:
            await self._gate.stop()
            self._gate = None
        if self._grpc is not None:
            await self._grpc.stop(grace)
            self._grpc = None
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        if self._private_dir:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

    def _bind_public_socket(self) -> socket.socket:
        """Bind under a temporary name, set mode and group, then rename into place: the socket
        is never reachable with looser permissions than configured (no umask window)."""
        tmp = f"{self.socket_path}.{os.getpid()}.tmp"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            sock.bind(tmp)
            os.chmod(tmp, self._socket_mode)  # chmod after bind: bind honours the umask
            self._apply_group(tmp)
            os.rename(tmp, self.socket_path)  # atomically replaces a stale socket
        except OSError as exc:
            sock.close()
            raise ApiError(f"cannot create the API socket {self.socket_path}: {exc}") from exc
        return sock

    def _apply_group(self, path: str) -> None:
        if not self._socket_group:
            return
        gid = group_id(self._socket_group)
        if gid is None:
            log.warning(
                "api: socket group %r does not exist; only root can use %s "
                "(create it: systemd-sysusers, or groupadd %s)",
                self._socket_group, self.socket_path, self._socket_group,
            )
            return
        try:
            os.chown(path, -1, gid)
        except OSError as exc:
            log.warning("api: cannot give %s to group %r: %s", path, self._socket_group, exc)


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
