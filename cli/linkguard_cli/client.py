"""The CLI's gRPC client: a channel to linkguardd's read-only socket for reads and to its
admin socket for drain/undrain, a deadline on every call, and every failure turned into an
exit status and a message that says what to do."""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import click
import grpc

from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc
from linkguard_cli.defang import defang, printable

# Exit statuses: a health check may trust them (docs/operators.md has the same table).
EXIT_OK = 0  # every NIC asked about is UP (and every other command: it worked)
EXIT_NOT_UP = 1  # status: some NIC is not UP
EXIT_USAGE = 2  # bad arguments, unknown NIC, --since beyond the newest event (click uses 2 too)
EXIT_UNREACHABLE = 3  # no daemon on the socket, no permission to connect, no answer in time
EXIT_DENIED = 4  # the daemon refused: drain/undrain on the read-only socket
EXIT_DAEMON_ERROR = 5  # the daemon failed the request for another reason
EXIT_REFUSED = 6  # drain refused: the backup NIC is not UP (--force overrides)
EXIT_NO_NICS = 7  # status: the daemon monitors no NIC at all (nothing is known to be UP)
EXIT_NOT_EMPTY = 8  # drain --wait: connections were still on the NIC at the timeout
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): linkguard-cli itself crashed; never a NIC state
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
ADMIN_METHODS = frozenset({"Drain", "Undrain"})
CALLER_PID_KEY = "linkguard-caller-pid"  # api/callers.py: the audit line names our uid by it

MISSED_EVENTS_KEY = "linkguard-missed-events"  # api/server.py sends it on Watch
RESUME_SINCE_KEY = "linkguard-resume-since"  # api/server.py: a Watch cut off for falling behind


class FellBehind(Exception):
    """The daemon cut the stream off because we read too slowly; resume after `since`."""

    def __init__(self, since: int) -> None:
        super().__init__(since)
        self.since = since


class CliError(click.ClickException):
    """A failure with its own exit status; printed as `linkguard-cli: message`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares a class default

    def show(self, file: Any = None) -> None:
        click.echo(f"linkguard-cli: {self.format_message()}", err=True)


def unreachable(socket_path: str, why: str) -> CliError:
    return CliError(
        f"cannot reach linkguardd at {socket_path}: {why}\n"
        "  Is linkguardd running?  systemctl status linkguardd\n"
        f"  Permissions?  ls -l {socket_path}  and  id\n"
        "    (reads: the read-only socket, root or group linkguard by default;\n"
        "     drain/undrain: the admin socket, root or group linkguard-admin by default)\n"
        "  Another socket?  --socket PATH (LINKGUARD_SOCKET), --ro-socket PATH "
        "(LINKGUARD_RO_SOCKET)",
        EXIT_UNREACHABLE,
    )


def usable(path: str) -> bool:
    """Whether connect() to `path` can succeed for us (connecting needs write permission)."""
    return os.path.exists(path) and os.access(path, os.R_OK | os.W_OK)


class Client:
    """`socket_path` serves drain/undrain, `read_socket_path` everything else."""

    def __init__(self, socket_path: str, timeout: float, read_socket_path: str = "") -> None:
        self.admin_path = socket_path
        self.read_path = read_socket_path or socket_path
        self.timeout = timeout
        self._channels: dict[str, grpc.Channel] = {}
        self.socket_path = self.read_path  # the socket of the latest call, for messages

    def _stub(self, method: str) -> pb_grpc.LinkguardStub:
        path = self.admin_path if method in ADMIN_METHODS else self.read_path
        self.socket_path = path
        if path not in self._channels:
            self._precheck(path)
            self._channels[path] = grpc.insecure_channel("unix:" + path)
        return pb_grpc.LinkguardStub(self._channels[path])

    @staticmethod
    def _precheck(path: str) -> None:
        """Name the two common local causes before grpc folds them into UNAVAILABLE."""
        if not os.path.exists(path):
            raise unreachable(path, "no such socket")
        if not os.access(path, os.R_OK | os.W_OK):
            raise unreachable(path, "permission denied")

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def call(self, method: str, request: Any) -> Any:
        """A unary RPC with the client's deadline; grpc errors become CliError."""
        metadata = ((CALLER_PID_KEY, str(os.getpid())),) if method in ADMIN_METHODS else ()
        try:
            answer = getattr(self._stub(method), method)(request, timeout=self.timeout,
                                                         metadata=metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return defang(answer, keep="\n" if method == "Dump" else "")  # Dump: indented JSON

    def status(self) -> pb.GetStatusResponse:
        return self.call("GetStatus", pb.GetStatusRequest())

    def watch(self, since_seq: int, replay: bool) -> tuple[Any, int]:
        """(stream, missed): the stream has no deadline (it is meant to run), but the daemon must
        answer its headers within the timeout."""
        try:
            stream = self._stub("Watch").Watch(pb.WatchRequest(since_seq=since_seq, replay=replay))
            missed = 0
            metadata = self._within_timeout(stream.initial_metadata)
            for key, value in metadata or ():
                if key == MISSED_EVENTS_KEY and str(value).isdigit():
                    missed = int(value)
            return stream, missed
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def _within_timeout(self, fn: Any) -> Any:
        channel = self._channels[self.read_path]
        try:
            grpc.channel_ready_future(channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError:
            raise unreachable(self.socket_path,
                              f"no connection within {self.timeout:g} s") from None
        return fn()

    def events(self, stream: Any) -> Iterator[pb.Event]:
        """The stream's events; ends quietly when we cancel it or the daemon goes away (the
        caller says how to resume)."""
        try:
            for event in stream:
                yield defang(event)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                return
            for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
                if key == RESUME_SINCE_KEY and str(value).isdigit():
                    raise FellBehind(int(value)) from None
            raise self.error(exc) from None

    def error(self, exc: grpc.RpcError) -> CliError:
        code, details = exc.code(), printable(exc.details() or "")
        if code == grpc.StatusCode.UNAVAILABLE:
            return unreachable(self.socket_path, _short(details) or "unavailable")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return unreachable(self.socket_path,
                               f"no answer within {self.timeout:g} s (--timeout)")
        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.OUT_OF_RANGE):
            return CliError(details, EXIT_USAGE)
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return CliError(details, EXIT_REFUSED)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return CliError(f"permission denied: {details}", EXIT_DENIED)
        return CliError(f"linkguardd failed the request ({code.name}): {details}",
                        EXIT_DAEMON_ERROR)


def _short(details: str) -> str:
    """grpc's 'failed to connect to all addresses; last error: UNKNOWN: unix:/x: Connection
    refused' -> 'Connection refused'."""
    return details.rsplit(": ", 1)[-1].strip() if details else ""
