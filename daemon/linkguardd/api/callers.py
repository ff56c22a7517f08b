"""Who is calling: the kernel's credentials of the connections on an API socket.

The kernel has already decided who may connect (each socket's mode and group, checked at
connect()); this is only for the audit line of a drain. grpc (python, 1.85) gives a servicer
neither the connection's file descriptor nor a usable peer address for a unix socket (the
client socket is unnamed: the peer is just "unix:"). So the daemon reads SO_PEERCRED from the
connections it holds on that socket (/proc/self/fd; an accepted unix socket keeps the
listener's bound address). The CLI sends its pid in metadata; when a connection from that pid
is open, the log names its uid as the kernel reports it, else every connected caller.
"""
from __future__ import annotations

import contextlib
import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass

CALLER_PID_KEY = "linkguard-caller-pid"  # metadata the CLI sends; only a hint, never trusted
_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;} (socket(7))


@dataclass(frozen=True)
class PeerCredentials:
    """The calling process as the kernel saw it when it connected."""

    pid: int
    uid: int
    gid: int

    def describe(self) -> str:
        """"uid 1000 (alice) pid 4242" for logs and error messages."""
        try:
            user = pwd.getpwuid(self.uid).pw_name
        except KeyError:
            user = "?"
        return f"uid {self.uid} ({user}) pid {self.pid}"


def read_peer_credentials(sock: socket.socket) -> PeerCredentials:
    pid, uid, gid = _UCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return PeerCredentials(pid, uid, gid)


def connected_peers(bound_path: str) -> list[PeerCredentials]:
    """The credentials of every accepted connection of this process on `bound_path`."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile, or not a socket
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as sock:
                if sock.family != socket.AF_UNIX or sock.getsockname() != bound_path:
                    continue
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    continue  # the listener itself
                out.append(read_peer_credentials(sock))
    return sorted(set(out), key=lambda c: (c.uid, c.pid))


def describe_caller(bound_path: str, claimed_pid: str | None) -> str:
    """The caller for the audit log, as precisely as the kernel allows (see the module doc)."""
    peers = connected_peers(bound_path)
    match = [p for p in peers if claimed_pid and str(p.pid) == claimed_pid]
    if match:
        return match[0].describe()
    if len(peers) == 1:
        return peers[0].describe()
    if not peers:
        return "an unidentified caller"
    return "one of " + ", ".join(p.describe() for p in peers)


def group_id(name: str | None) -> int | None:
    """A group name (or number) -> gid; None when unset or unknown."""
    if not name:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None
