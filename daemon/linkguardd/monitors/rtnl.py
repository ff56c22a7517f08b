"""The netlink monitor's kernel interfaces: rtnetlink link messages, decoded by hand for the
event path (uapi linux/netlink.h, linux/rtnetlink.h, linux/if_link.h, linux/if.h), and the
ethtool ioctl for a link's speed (linux/ethtool.h).

pyroute2's ifinfmsg decodes every attribute (130-200 us per RTM_NEWLINK); this reads only the
few that a link's health needs (~8 us). pyroute2 still opens the sockets in a named netns.
"""
from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from collections.abc import Iterator
from typing import Any

from pyroute2 import netns as pr_netns

from linkguardd.facts import LinkFact

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_DUMP_INTR, NLM_F_REQUEST, NLM_F_DUMP = 0x10, 0x1, 0x300
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTMGRP_LINK = 0x1
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_STATS64, IFLA_CARRIER, IFLA_CARRIER_CHANGES = 3, 16, 23, 33, 35
IFLA_CARRIER_UP_COUNT, IFLA_CARRIER_DOWN_COUNT = 47, 48
# IF_OPER_* (linux/if.h, RFC 2863 ifOperStatus), named as pyroute2 and `ip link` name them.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
# struct rtnl_link_stats64 (linux/if_link.h) in order; older kernels send a shorter prefix.
STATS64_FIELDS = (
    "rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped",
    "tx_dropped", "multicast", "collisions", "rx_length_errors", "rx_over_errors",
    "rx_crc_errors", "rx_frame_errors", "rx_fifo_errors", "rx_missed_errors",
    "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors", "tx_heartbeat_errors",
    "tx_window_errors", "rx_compressed", "tx_compressed", "rx_nohandler", "rx_otherhost_dropped",
)
SPEED_UNKNOWN = 0xFFFFFFFF  # ethtool SPEED_UNKNOWN as u32; sysfs prints it as -1
SIOCETHTOOL, ETHTOOL_GLINKSETTINGS = 0x8946, 0x4C  # linux/sockios.h, linux/ethtool.h
LINK_SETTINGS_SIZE, NWORDS_OFFSET = 48, 15  # struct ethtool_link_settings, its s8 nwords

HDR = struct.Struct("=IHHII")  # struct nlmsghdr
IFI = struct.Struct("=BxHiII")  # struct ifinfomsg
NLA = struct.Struct("=HH")  # struct nlattr
U32 = struct.Struct("=I")
ERRNO = struct.Struct("=i")  # struct nlmsgerr.error
LINK_ATTRS = frozenset({IFLA_IFNAME, IFLA_OPERSTATE, IFLA_CARRIER, IFLA_CARRIER_CHANGES,
                        IFLA_CARRIER_UP_COUNT, IFLA_CARRIER_DOWN_COUNT})
STATS_ATTRS = frozenset({IFLA_IFNAME, IFLA_STATS64})
SO_RCVBUFFORCE = 33  # asm-generic/socket.h; needs CAP_NET_ADMIN, else SO_RCVBUF is used
RCVBUF = 4 << 20  # room for a burst of notifications before the kernel drops (ENOBUFS)


def _min_length(mtype: int) -> int:
    """Shortest message of this type whose fixed part the decoders below read."""
    if mtype in (RTM_NEWLINK, RTM_DELLINK):
        return HDR.size + IFI.size
    return HDR.size + ERRNO.size if mtype == NLMSG_ERROR else HDR.size


def parse_messages(data: Any, size: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (type, flags, seq, offset, end) for each netlink message in one datagram. A
    message too short for its type's fixed part is skipped: the decoders never read past a
    message's end."""
    off = 0
    while off + HDR.size <= size:
        length, mtype, flags, seq, _pid = HDR.unpack_from(data, off)
        if length < HDR.size or off + length > size:
            return  # malformed or truncated: the caller resyncs on truncation
        if length >= _min_length(mtype):
            yield mtype, flags, seq, off, off + length
        off += (length + 3) & ~3  # NLMSG_ALIGN


def parse_ifinfo(data: Any, off: int, end: int, wanted: frozenset[int]
                 ) -> tuple[int, int, int, dict[int, bytes]]:
    """Decode struct ifinfomsg and the `wanted` top-level IFLA_* attributes of one message:
    (family, ifindex, ifi_flags, {attr type: payload})."""
    family, _type, index, flags, _change = IFI.unpack_from(data, off + HDR.size)
    attrs: dict[int, bytes] = {}
    p = off + HDR.size + IFI.size
    while p + NLA.size <= end:
        alen, atype = NLA.unpack_from(data, p)
        if alen < NLA.size or p + alen > end:
            break  # malformed: never take the next message's bytes as a payload
        atype &= 0x3FFF  # NLA_TYPE_MASK: drop NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if atype in wanted:
            attrs[atype] = bytes(data[p + NLA.size:p + alen])
        p += (alen + 3) & ~3  # NLA_ALIGN
    return family, index, flags, attrs


def error_code(data: Any, off: int) -> int:
    """The positive errno of an NLMSG_ERROR message (struct nlmsgerr.error is -errno)."""
    return -ERRNO.unpack_from(data, off + HDR.size)[0]


def dump_request(seq: int) -> bytes:
    """RTM_GETLINK dump request (an all-zero ifinfomsg: every family, every link)."""
    hdr = HDR.pack(HDR.size + IFI.size, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
    return hdr + IFI.pack(0, 0, 0, 0, 0)


def parse_stats64(raw: bytes) -> dict[str, int]:
    n = min(len(raw) // 8, len(STATS64_FIELDS))
    return dict(zip(STATS64_FIELDS, struct.unpack_from(f"={n}Q", raw)))


def u32(raw: bytes | None) -> int | None:
    return U32.unpack_from(raw)[0] if raw is not None and len(raw) >= 4 else None


def ifname_of(attrs: dict[int, bytes]) -> str | None:
    raw = attrs.get(IFLA_IFNAME)
    return raw.split(b"\0", 1)[0].decode(errors="replace") if raw is not None else None


def link_fact(name: str, index: int, flags: int, attrs: dict[int, bytes], now: int,
              speeds: dict[int, int | None]) -> LinkFact:
    """The LinkFact of a RTM_NEWLINK; `speeds` holds the last known speed per ifindex."""
    raw = attrs.get(IFLA_CARRIER)
    carrier = bool(raw[0]) if raw else bool(flags & IFF_LOWER_UP)
    raw = attrs.get(IFLA_OPERSTATE)
    oper = raw[0] if raw else 0
    return LinkFact(
        ifname=name, at_ns=now, present=True, ifindex=index, admin_up=bool(flags & IFF_UP),
        carrier=carrier, operstate=OPERSTATES[oper] if oper < len(OPERSTATES) else str(oper),
        carrier_changes=u32(attrs.get(IFLA_CARRIER_CHANGES)),
        carrier_up_count=u32(attrs.get(IFLA_CARRIER_UP_COUNT)),
        carrier_down_count=u32(attrs.get(IFLA_CARRIER_DOWN_COUNT)),
        # No negotiated speed without carrier (drivers report -1 then): None, and no I/O here.
        speed_mbps=speeds.get(index) if carrier else None,
    )


def open_rtnl_socket(netns: str | None, groups: int) -> socket.socket:
    """A non-blocking NETLINK_ROUTE socket in `netns` (None: our own), bound to `groups`.

    Raises FileNotFoundError if the named netns does not exist (flags=0: never create it)."""
    sock = pr_netns.create_socket(netns, socket.AF_NETLINK, socket.SOCK_RAW,
                                  socket.NETLINK_ROUTE, flags=0)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.bind((0, groups))  # bind (join the group) before the dump: no event falls in between
    sock.setblocking(False)
    return sock


def open_ioctl_socket(netns: str | None) -> socket.socket:
    """An AF_INET socket in `netns` for ioctls on that namespace's interfaces."""
    return pr_netns.create_socket(netns, socket.AF_INET, socket.SOCK_DGRAM, 0, flags=0)


def ethtool_speed(sock: socket.socket, ifname: str) -> int | None:
    """Link speed in Mb/s (ETHTOOL_GLINKSETTINGS, as `ethtool` and sysfs `speed` get it), None
    when unknown. Raises OSError (EOPNOTSUPP for lo, ENODEV). Blocking: the driver may ask
    the NIC's firmware."""
    nwords = 0
    for _ in range(2):  # handshake: the first reply says how many link-mode mask words to pass
        buf = ctypes.create_string_buffer(LINK_SETTINGS_SIZE + 3 * 4 * nwords)
        struct.pack_into("=I", buf, 0, ETHTOOL_GLINKSETTINGS)
        struct.pack_into("=b", buf, NWORDS_OFFSET, nwords)
        ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(buf))  # struct ifreq
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        if (reply := struct.unpack_from("=b", buf, NWORDS_OFFSET)[0]) > 0:
            speed = U32.unpack_from(buf, 4)[0]
            return speed if 0 < speed < SPEED_UNKNOWN else None
        nwords = -reply
    return None
