"""The CLI's gRPC client: one channel to linkguardd's socket, a deadline on every call, and
every failure turned into an exit status and a message that says what to do."""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import click
import grpc

from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc

EXIT_OK = 0
EXIT_NOT_UP = 1  # status: some NIC is not UP
EXIT_USAGE = 2  # bad arguments, unknown NIC (click uses 2 for usage errors too)
EXIT_UNREACHABLE = 3  # no daemon on the socket, no permission to connect, no answer in time
EXIT_DENIED = 4  # the daemon refused: drain/undrain without root or the admin group
EXIT_DAEMON_ERROR = 5  # the daemon failed the request for another reason

MISSED_EVENTS_KEY = "linkguard-missed-events"  # api/server.py sends it on Watch


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
        f"  Permissions?  ls -l {socket_path}  (reading needs the socket's group; "
        "drain/undrain need root or the admin group)\n"
        "  Another socket?  --socket PATH or LINKGUARD_SOCKET=PATH",
        EXIT_UNREACHABLE,
    )


class Client:
    def __init__(self, socket_path: str, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.Channel | None = None

    def _stub(self) -> pb_grpc.LinkguardStub:
        if self._channel is None:
            self._precheck()
            self._channel = grpc.insecure_channel("unix:" + self.socket_path)
        return pb_grpc.LinkguardStub(self._channel)

    def _precheck(self) -> None:
        """Name the two common local causes before grpc folds them into UNAVAILABLE."""
        if not os.path.exists(self.socket_path):
            raise unreachable(self.socket_path, "no such socket")
        if not os.access(self.socket_path, os.R_OK | os.W_OK):
            raise unreachable(self.socket_path, "permission denied")

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def call(self, method: str, request: Any) -> Any:
        """A unary RPC with the client's deadline; grpc errors become CliError."""
        try:
            return getattr(self._stub(), method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def status(self) -> pb.GetStatusResponse:
        return self.call("GetStatus", pb.GetStatusRequest())

    def watch(self, since_seq: int, replay: bool) -> tuple[Any, int]:
        """(stream, missed): the stream has no deadline (it is meant to run), but the daemon must
        answer its headers within the timeout."""
        try:
            stream = self._stub().Watch(pb.WatchRequest(since_seq=since_seq, replay=replay))
            missed = 0
            metadata = self._within_timeout(stream.initial_metadata)
            for key, value in metadata or ():
                if key == MISSED_EVENTS_KEY and str(value).isdigit():
                    missed = int(value)
            return stream, missed
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def _within_timeout(self, fn: Any) -> Any:
        channel = self._channel
        assert channel is not None
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
            yield from stream
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                return
            raise self.error(exc) from None

    def error(self, exc: grpc.RpcError) -> CliError:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            return unreachable(self.socket_path, _short(details) or "unavailable")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return unreachable(self.socket_path,
                               f"no answer within {self.timeout:g} s (--timeout)")
        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            return CliError(details, EXIT_USAGE)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return CliError(f"permission denied: {details}", EXIT_DENIED)
        return CliError(f"linkguardd failed the request ({code.name}): {details}",
                        EXIT_DAEMON_ERROR)


def _short(details: str) -> str:
    """grpc's 'failed to connect to all addresses; last error: UNKNOWN: unix:/x: Connection
    refused' -> 'Connection refused'."""
    return details.rsplit(": ", 1)[-1].strip() if details else ""
