"""The FEC monitor's kernel interface: ETHTOOL_MSG_FEC_GET with statistics over generic netlink,
encoded and decoded by hand (uapi linux/netlink.h, linux/genetlink.h, linux/ethtool_netlink.h;
Documentation/networking/ethtool-netlink.rst, "FEC_GET").

pyroute2 0.9.7's NlEthtool has no FEC_GET (nor STATS_GET) message class, and the request needs
ETHTOOL_FLAG_STATS in its header; the message is small enough to build here, and a decoder of our
own can be tested from bytes laid out as the uapi header says. pyroute2 still opens the socket
in a named netns. EOPNOTSUPP (a driver without FEC, such as veth) is an answer: no statistics.
"""
from __future__ import annotations

import errno
import socket
import struct
from typing import Any

from pyroute2 import netns as pr_netns

from linkguardd.monitors.rtnl import (
    HDR,
    NLA,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    error_code,
    parse_messages,
)

NETLINK_GENERIC = 16  # linux/netlink.h (Python's socket module lacks it)
GENL_ID_CTRL, CTRL_CMD_GETFAMILY = 16, 3  # linux/genetlink.h
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2  # enum CTRL_ATTR_*
ETHTOOL_GENL_NAME, ETHTOOL_GENL_VERSION = b"ethtool", 1  # linux/ethtool_netlink.h
ETHTOOL_MSG_FEC_GET, ETHTOOL_MSG_FEC_GET_REPLY = 29, 30  # enum ETHTOOL_MSG_* (user, kernel)
ETHTOOL_A_HEADER_DEV_NAME, ETHTOOL_A_HEADER_FLAGS = 2, 3  # enum ETHTOOL_A_HEADER_*
ETHTOOL_FLAG_STATS = 1 << 2  # "request statistics, if supported by the driver"
ETHTOOL_A_FEC_HEADER, ETHTOOL_A_FEC_STATS = 1, 5  # enum ETHTOOL_A_FEC_*
# enum ETHTOOL_A_FEC_STAT_*: each an array of u64, the port's total first, then one per lane
# (IEEE 802.3 30.5.1.1.17 aFECCorrectedBlocks, 30.5.1.1.18 aFECUncorrectableBlocks; corrected
# bits are a common vendor extra). An attribute the driver did not fill is absent or empty.
FEC_STATS = {2: "fec_corrected_blocks", 3: "fec_uncorrectable_blocks", 4: "fec_corrected_bits"}
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF  # linux/netlink.h
GENL = struct.Struct("=BBH")  # struct genlmsghdr: cmd, version, reserved
U64 = struct.Struct("=Q")
NO_FEC_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENODEV})  # no FEC, or no such netdev (yet)
RECV_SIZE = 16384  # one FEC reply is ~200 bytes
TIMEOUT_S = 1.0  # the driver asks the NIC's firmware (mlx5: the PPCNT register); ms at most


def nla(atype: int, payload: bytes) -> bytes:
    raw = NLA.pack(NLA.size + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)  # NLA_ALIGN


def genl_message(family: int, cmd: int, seq: int, attrs: bytes, version: int = 1) -> bytes:
    body = GENL.pack(cmd, version, 0) + attrs
    return HDR.pack(HDR.size + len(body), family, NLM_F_REQUEST, seq, 0) + body


def family_request(seq: int) -> bytes:
    """CTRL_CMD_GETFAMILY for "ethtool": its reply carries the family's message type."""
    return genl_message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, seq,
                        nla(CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME + b"\0"))


def fec_request(family: int, seq: int, ifname: str) -> bytes:
    header = (nla(ETHTOOL_A_HEADER_DEV_NAME, ifname.encode() + b"\0")
              + nla(ETHTOOL_A_HEADER_FLAGS, struct.pack("=I", ETHTOOL_FLAG_STATS)))
    return genl_message(family, ETHTOOL_MSG_FEC_GET, seq,
                        nla(ETHTOOL_A_FEC_HEADER | NLA_F_NESTED, header), ETHTOOL_GENL_VERSION)


def parse_attrs(data: Any, off: int, end: int) -> dict[int, bytes]:
    """{type: payload} of the attributes in data[off:end]; one whose length runs past `end`
    ends the walk (nothing outside the message is read)."""
    out: dict[int, bytes] = {}
    while off + NLA.size <= end:
        length, atype = NLA.unpack_from(data, off)
        if length < NLA.size or off + length > end:
            break
        out[atype & NLA_TYPE_MASK] = bytes(data[off + NLA.size:off + length])
        off += (length + 3) & ~3
    return out


def parse_fec_stats(payload: bytes) -> dict[str, int]:
    """The totals of an ETHTOOL_A_FEC_STATS nest; an empty or short array is no value."""
    out: dict[str, int] = {}
    for atype, raw in parse_attrs(payload, 0, len(payload)).items():
        if atype in FEC_STATS and len(raw) >= U64.size:
            out[FEC_STATS[atype]] = U64.unpack_from(raw)[0]
    return out


def parse_family_id(data: Any, off: int, end: int) -> int | None:
    raw = parse_attrs(data, off + HDR.size + GENL.size, end).get(CTRL_ATTR_FAMILY_ID)
    return struct.unpack_from("=H", raw)[0] if raw is not None and len(raw) >= 2 else None


def parse_fec_reply(data: Any, off: int, end: int) -> dict[str, int]:
    """FEC statistics of one FEC_GET_REPLY message ({} when the driver reports none)."""
    if end - off < HDR.size + GENL.size:
        return {}
    raw = parse_attrs(data, off + HDR.size + GENL.size, end).get(ETHTOOL_A_FEC_STATS)
    return parse_fec_stats(raw) if raw is not None else {}


class EthtoolFec:
    """A generic netlink socket in `netns` (None: our own) that asks FEC statistics. Blocking:
    use it from a worker thread. Raises FileNotFoundError for a missing netns, OSError(ENOENT)
    when the kernel has no ethtool family."""

    def __init__(self, netns: str | None = None) -> None:
        self._sock = pr_netns.create_socket(netns, socket.AF_NETLINK, socket.SOCK_RAW,
                                            NETLINK_GENERIC, flags=0)
        self._sock.settimeout(TIMEOUT_S)
        self._seq = 0
        self._buf = bytearray(RECV_SIZE)
        try:
            family = self._ask(family_request, parse_family_id, "ethtool family")
            if family is None:
                raise OSError(errno.EPROTO, "ethtool family: the reply has no family id")
        except BaseException:
            self._sock.close()
            raise
        self.family: int = family

    def close(self) -> None:
        self._sock.close()

    def fec_get(self, ifname: str) -> dict[str, int]:
        """The NIC's FEC statistics ({} if FEC but no statistics); OSError with the kernel's
        errno otherwise."""
        result: dict[str, int] = self._ask(lambda seq: fec_request(self.family, seq, ifname),
                                           parse_fec_reply, ifname)
        return result

    def read(self, ifname: str) -> dict[str, int] | None:
        """fec_get(), or None if the driver has no FEC (EOPNOTSUPP) or there is no such netdev
        (ENODEV)."""
        try:
            return self.fec_get(ifname)
        except OSError as exc:
            if exc.errno in NO_FEC_ERRNOS:
                return None
            raise

    def _ask(self, request: Any, parse: Any, what: str) -> Any:
        self._seq += 1
        seq = self._seq
        self._sock.send(request(seq))
        while True:  # skip stale replies (an earlier request that timed out)
            n = self._sock.recv_into(self._buf)
            for mtype, _flags, mseq, off, end in parse_messages(self._buf, n):
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    code = error_code(self._buf, off)
                    raise OSError(code, f"{what}: {errno.errorcode.get(code, code)}")
                return parse(self._buf, off, end)
