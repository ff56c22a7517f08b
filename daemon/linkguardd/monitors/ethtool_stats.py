"""The PHY monitor's kernel interface: ETHTOOL_MSG_FEC_GET with statistics and ETHTOOL_MSG_STATS_GET
of the eth-phy group over generic netlink, encoded and decoded by hand (uapi linux/netlink.h,
linux/genetlink.h, linux/ethtool_netlink.h; Documentation/networking/ethtool-netlink.rst,
"FEC_GET" and "STATS_GET").

pyroute2 0.9.7's NlEthtool has no FEC_GET nor STATS_GET message class, and the requests need
ETHTOOL_FLAG_STATS and a group bitset; they are small enough to build here, and a decoder of our
own can be tested from bytes laid out as the uapi header says. pyroute2 still opens the socket
in a named netns. EOPNOTSUPP (a driver without FEC, such as veth) is an answer: no statistics;
so is a STATS_GET reply whose group carries no values (what a veth sends).
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
ETHTOOL_MSG_STATS_GET, ETHTOOL_MSG_STATS_GET_REPLY = 32, 33
ETHTOOL_A_HEADER_DEV_NAME, ETHTOOL_A_HEADER_FLAGS = 2, 3  # enum ETHTOOL_A_HEADER_*
ETHTOOL_FLAG_STATS = 1 << 2  # "request statistics, if supported by the driver"
ETHTOOL_A_FEC_HEADER, ETHTOOL_A_FEC_STATS = 1, 5  # enum ETHTOOL_A_FEC_*
# enum ETHTOOL_A_FEC_STAT_*: each an array of u64, the port's total first, then one per lane
# (IEEE 802.3 30.5.1.1.17 aFECCorrectedBlocks, 30.5.1.1.18 aFECUncorrectableBlocks; corrected
# bits are a common vendor extra). An attribute the driver did not fill is absent or empty.
FEC_STATS = {2: "fec_corrected_blocks", 3: "fec_uncorrectable_blocks", 4: "fec_corrected_bits"}
# enum ETHTOOL_A_STATS_*, ETHTOOL_A_STATS_GRP_*, ETHTOOL_A_BITSET_*; ETHTOOL_STATS_ETH_PHY is bit 0
# of the group set, and its ETHTOOL_A_STATS_ETH_PHY_5_SYM_ERR (IEEE 802.3 30.3.2.1.5
# aSymbolErrorDuringCarrier, counted by the PCS) is stat 0 of that group.
ETHTOOL_A_STATS_HEADER, ETHTOOL_A_STATS_GROUPS, ETHTOOL_A_STATS_GRP = 2, 3, 4
ETHTOOL_A_STATS_GRP_ID, ETHTOOL_A_STATS_GRP_STAT = 2, 4
ETHTOOL_A_BITSET_NOMASK, ETHTOOL_A_BITSET_SIZE, ETHTOOL_A_BITSET_VALUE = 1, 2, 4
ETHTOOL_STATS_ETH_PHY = 0
PHY_STATS = {0: "symbol_error_during_carrier"}
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF  # linux/netlink.h
GENL = struct.Struct("=BBH")  # struct genlmsghdr: cmd, version, reserved
U64 = struct.Struct("=Q")
RECV_SIZE = 16384  # one reply is ~200 bytes
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


def stats_request(family: int, seq: int, ifname: str) -> bytes:
    """STATS_GET of the eth-phy group; the group set as a compact bitset (NOMASK: only it)."""
    groups = (nla(ETHTOOL_A_BITSET_NOMASK, b"") + nla(ETHTOOL_A_BITSET_SIZE, struct.pack("=I", 1))
              + nla(ETHTOOL_A_BITSET_VALUE, struct.pack("=I", 1 << ETHTOOL_STATS_ETH_PHY)))
    return genl_message(family, ETHTOOL_MSG_STATS_GET, seq,
                        nla(ETHTOOL_A_STATS_HEADER | NLA_F_NESTED,
                            nla(ETHTOOL_A_HEADER_DEV_NAME, ifname.encode() + b"\0"))
                        + nla(ETHTOOL_A_STATS_GROUPS | NLA_F_NESTED, groups),
                        ETHTOOL_GENL_VERSION)


def iter_attrs(data: Any, off: int, end: int) -> list[tuple[int, bytes]]:
    """(type, payload) of the attributes in data[off:end], in order; one whose length runs past
    `end` ends the walk (nothing outside the message is read)."""
    out: list[tuple[int, bytes]] = []
    while off + NLA.size <= end:
        length, atype = NLA.unpack_from(data, off)
        if length < NLA.size or off + length > end:
            break
        out.append((atype & NLA_TYPE_MASK, bytes(data[off + NLA.size:off + length])))
        off += (length + 3) & ~3
    return out


def parse_attrs(data: Any, off: int, end: int) -> dict[int, bytes]:
    """{type: payload}; of an attribute given twice, the last."""
    return dict(iter_attrs(data, off, end))


def parse_fec_stats(payload: bytes) -> dict[str, int]:
    """The totals of an ETHTOOL_A_FEC_STATS nest; an empty or short array is no value."""
    out: dict[str, int] = {}
    for atype, raw in parse_attrs(payload, 0, len(payload)).items():
        if atype in FEC_STATS and len(raw) >= U64.size:
            out[FEC_STATS[atype]] = U64.unpack_from(raw)[0]
    return out


def parse_stats_reply(data: Any, off: int, end: int) -> dict[str, int]:
    """The eth-phy values of one STATS_GET_REPLY: each ETHTOOL_A_STATS_GRP nest names its group
    (GRP_ID) and holds one GRP_STAT nest per value, whose only attribute's type is the stat."""
    out: dict[str, int] = {}
    if end - off < HDR.size + GENL.size:
        return out
    for atype, grp in iter_attrs(data, off + HDR.size + GENL.size, end):
        if atype != ETHTOOL_A_STATS_GRP:
            continue
        attrs = iter_attrs(grp, 0, len(grp))
        ids = [raw for t, raw in attrs if t == ETHTOOL_A_STATS_GRP_ID and len(raw) >= 4]
        if not ids or struct.unpack_from("=I", ids[-1])[0] != ETHTOOL_STATS_ETH_PHY:
            continue
        for t, stat in attrs:
            if t != ETHTOOL_A_STATS_GRP_STAT:
                continue
            for index, raw in iter_attrs(stat, 0, len(stat)):
                if index in PHY_STATS and len(raw) >= U64.size:
                    out[PHY_STATS[index]] = U64.unpack_from(raw)[0]
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


class EthtoolStats:
    """A generic netlink socket in `netns` (None: our own) that asks FEC and PHY statistics.
    Blocking: use it from a worker thread. Raises FileNotFoundError for a missing netns,
    OSError(ENOENT) when the kernel has no ethtool family."""

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

    def phy_get(self, ifname: str) -> dict[str, int]:
        """The NIC's eth-phy statistics ({} if its driver reports none); OSError otherwise."""
        result: dict[str, int] = self._ask(lambda seq: stats_request(self.family, seq, ifname),
                                           parse_stats_reply, ifname)
        return result

    def read(self, ifname: str) -> dict[str, int] | None:
        """Both, merged ({}: neither has a value); None if there is no such netdev (ENODEV)."""
        values: dict[str, int] = {}
        for get in (self.fec_get, self.phy_get):
            try:
                values.update(get(ifname))
            except OSError as exc:
                if exc.errno == errno.ENODEV:
                    return None
                if exc.errno != errno.EOPNOTSUPP:  # no FEC (veth): an answer
                    raise
        return values

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
