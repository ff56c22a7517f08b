"""Who is calling: the kernel's credentials of each API connection, for drain/undrain checks.

grpc (python, 1.85) does not expose a connection's file descriptor, and its peer string for a
unix socket is just "unix:" (the client socket is unnamed); the auth context of local
credentials carries no uid either. So the daemon accepts connections itself (CredentialGate):
it reads SO_PEERCRED and SO_PEERGROUPS from the accepted socket, then relays the bytes to the
grpc server on a private socket, from a client socket bound to a random abstract name. grpc
reports that name as the call's peer ("unix-abstract:lg-peer-<token>"), and the servicer looks
the credentials up by it. The private socket lives in a 0700 directory, so nobody but the
daemon's own user can reach grpc without passing the gate; a peer that is not in the table
(never the case through the gate) gets no admin rights.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import logging
import os
import pwd
import secrets
import shutil
import socket
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

# SO_PEERGROUPS: Linux >= 4.13, asm-generic/socket.h; Python 3.11's socket module lacks the name.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;} (socket(7))
_GETSOCKOPT_MAX = 1024  # CPython caps getsockopt's buflen at 1024 bytes: 256 groups
PEER_PREFIX = "lg-peer-"
_RELAY_CHUNK = 64 * 1024
_MAX_CONNECTIONS = 128  # a local client opening sockets in a loop must not exhaust our fds


@dataclass(frozen=True)
class PeerCredentials:
    """The calling process as the kernel saw it when it connected."""

    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()  # supplementary groups

    def describe(self) -> str:
        """"uid 1000 (alice) pid 4242" for logs and error messages."""
        try:
            user = pwd.getpwuid(self.uid).pw_name
        except KeyError:
            user = "?"
        return f"uid {self.uid} ({user}) pid {self.pid}"


def read_peer_credentials(sock: socket.socket) -> PeerCredentials:
    """SO_PEERCRED, plus SO_PEERGROUPS (or /proc/<pid>/status when the kernel lacks it)."""
    pid, uid, gid = _UCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    )
    return PeerCredentials(pid, uid, gid, _peer_groups(sock, pid))


def _peer_groups(sock: socket.socket, pid: int) -> tuple[int, ...]:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, _GETSOCKOPT_MAX)
        return struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except OSError as exc:
        if exc.errno not in (errno.ENOPROTOOPT, errno.ERANGE):
            raise
    # Older kernel, or more than 256 groups: the process's current groups (proc(5) "Groups:").
    # The pid belongs to the caller while its connection is open, which it is now.
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Groups:"):
                    return tuple(int(g) for g in line.split()[1:])
    except OSError:
        pass
    return ()


def group_id(name: str | None) -> int | None:
    """A group name (or number) -> gid; None when unset or unknown (then nobody but root)."""
    if not name:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def is_admin(creds: PeerCredentials | None, admin_gid: int | None) -> bool:
    """Root, or a member (primary or supplementary) of the admin group."""
    if creds is None:
        return False
    if creds.uid == 0:
        return True
    return admin_gid is not None and (creds.gid == admin_gid or admin_gid in creds.groups)


class CredentialGate:
    """Listens on the public socket; relays each connection to grpc's private socket.

    Everything on the connection is relayed unchanged (it is the grpc client's HTTP/2 stream);
    the gate only names the relay's own client socket so the servicer can find the caller.
    """

    def __init__(self, public_path: str, private_path: str) -> None:
        self.public_path = public_path
        self.private_path = private_path
        self._peers: dict[str, PeerCredentials] = {}
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def lookup(self, grpc_peer: str) -> PeerCredentials | None:
        """The caller of a grpc call, from `context.peer()`; None if it did not pass the gate."""
        scheme, _, name = grpc_peer.partition(":")
        if scheme != "unix-abstract" or not name.startswith(PEER_PREFIX):
            return None
        return self._peers.get(name)

    async def start(self, listener: socket.socket) -> None:
        """Serve on `listener`, a bound (not yet listening) unix socket at public_path."""
        self._server = await asyncio.start_unix_server(self._accept, sock=listener)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= _MAX_CONNECTIONS:
            log.warning("api: more than %d connections open; refusing one", _MAX_CONNECTIONS)
            writer.close()
            return
        self._tasks.add(task)
        name = PEER_PREFIX + secrets.token_hex(16)
        upstream: asyncio.StreamWriter | None = None
        try:
            self._peers[name] = read_peer_credentials(writer.get_extra_info("socket"))
            up_reader, upstream = await self._connect_upstream(name)
            # grpc never half-closes a connection, so the end of either direction ends both.
            relays = {
                asyncio.create_task(_relay(reader, upstream)),
                asyncio.create_task(_relay(up_reader, writer)),
            }
            try:
                await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for relay in relays:
                    relay.cancel()
                await asyncio.gather(*relays, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.debug("api: connection %s ended: %s", name, exc)
        except asyncio.CancelledError:
            # stop() cancels open connections. Returning instead of re-raising matters: asyncio
            # (3.11) calls task.exception() on a connection handler, which raises (and logs a
            # traceback) for a task that ended cancelled.
            pass
        finally:
            self._peers.pop(name, None)
            self._tasks.discard(task)
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _connect_upstream(
        self, name: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + name)  # abstract: no file to clean up (unix(7))
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.private_path)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_unix_connection(sock=sock)


async def _relay(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF or a broken connection (a client killed mid-call is normal)."""
    with contextlib.suppress(ConnectionError):
        while data := await src.read(_RELAY_CHUNK):
            dst.write(data)
            await dst.drain()


def private_dir_for(public_path: str) -> str:
    """The 0700 directory, next to the public socket, that holds grpc's private socket."""
    parent, base = os.path.split(os.path.abspath(public_path))
    return os.path.join(parent, f".{base}.private")


def make_private_dir(public_path: str) -> str:
    """(Re)create the private directory; a leftover from a killed daemon is removed first."""
    path = private_dir_for(public_path)
    shutil.rmtree(path, ignore_errors=True)
    os.mkdir(path, 0o700)
    return path
