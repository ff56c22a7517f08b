"""The PHY monitor and its ethtool netlink codec, from message bytes laid out as the kernel's
uapi says (linux/netlink.h, linux/genetlink.h, linux/ethtool_netlink.h: enum ETHTOOL_MSG_*,
ETHTOOL_A_HEADER_*, ETHTOOL_A_FEC_*, ETHTOOL_A_FEC_STAT_*, ETHTOOL_A_STATS_*, ETHTOOL_A_BITSET_*).
The live kernel path (a veth answers EOPNOTSUPP and an empty group) is in
tests/lab/test_error_counters.py."""
from __future__ import annotations

import asyncio
import errno
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkguardd.facts import Fact
from linkguardd.monitors import ethtool_stats as fec
from linkguardd.monitors.phy import PhyMonitor

FAMILY = 21  # whatever id the kernel gave the "ethtool" family
UAPI = Path("/usr/include/linux/ethtool_netlink.h")  # linux-libc-dev, with the C toolchain


def nla(atype: int, payload: bytes) -> bytes:
    """struct nlattr {u16 nla_len; u16 nla_type} + payload, padded to 4 (NLA_ALIGN)."""
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def message(mtype: int, seq: int, cmd: int, attrs: bytes) -> bytes:
    """struct nlmsghdr {u32 len; u16 type, flags; u32 seq, pid} + struct genlmsghdr."""
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, seq, 0) + body


def u64s(*values: int) -> bytes:
    return struct.pack(f"={len(values)}Q", *values)


def fec_reply(seq: int = 1, stats: bytes | None = None) -> bytes:
    """ETHTOOL_MSG_FEC_GET_REPLY (30) as an RS-FEC mlx5 port sends it: header (ifindex 1, name),
    ETHTOOL_A_FEC_AUTO (3, u8), ETHTOOL_A_FEC_ACTIVE (4, u32: link mode bit 50 FEC_RS) and
    ETHTOOL_A_FEC_STATS (5, nested): a PAD (1) before each 64-bit array, then CORRECTED (2),
    UNCORR (3), CORR_BITS (4), each the total then one value per lane."""
    header = nla(1, struct.pack("=I", 7)) + nla(2, b"rail0\0")
    if stats is None:
        stats = (nla(1, b"") + nla(2, u64s(1234, 1000, 234)) + nla(1, b"")
                 + nla(3, u64s(5, 5, 0)) + nla(1, b"") + nla(4, u64s(98765)))
    attrs = (nla(1 | 0x8000, header) + nla(3, b"\x01") + nla(4, struct.pack("=I", 50))
             + nla(5 | 0x8000, stats))
    return message(FAMILY, seq, 30, attrs)


def stats_reply(seq: int = 2, phy: int | None = 77) -> bytes:
    """ETHTOOL_MSG_STATS_GET_REPLY (33): header, ETHTOOL_A_STATS_SRC (5, u32 0: aggregate), one
    ETHTOOL_A_STATS_GRP (4) nest per group: GRP_ID (2), GRP_SS_ID (3), a GRP_STAT (4) nest per
    value holding one attribute whose type is the stat's index. An eth-mac group (ID 1) with its
    own stat 0 comes first: it must not be read as the PHY's."""
    mac = nla(2, struct.pack("=I", 1)) + nla(3, struct.pack("=I", 18)) + nla(4 | 0x8000,
                                                                             nla(0, u64s(999)))
    phy_grp = nla(2, struct.pack("=I", 0)) + nla(3, struct.pack("=I", 17))
    if phy is not None:
        phy_grp += nla(4 | 0x8000, nla(0, u64s(phy)))
    attrs = (nla(2 | 0x8000, nla(1, struct.pack("=I", 7)) + nla(2, b"rail0\0"))
             + nla(5, struct.pack("=I", 0)) + nla(4 | 0x8000, mac) + nla(4 | 0x8000, phy_grp))
    return message(FAMILY, seq, 33, attrs)


def error(seq: int, code: int) -> bytes:
    """NLMSG_ERROR (2): struct nlmsgerr {int error (-errno); struct nlmsghdr msg}."""
    return struct.pack("=IHHII", 36, 2, 0, seq, 0) + struct.pack("=i", -code) + b"\0" * 16


def decode(buf: bytes, parse: Any = fec.parse_fec_reply) -> dict[str, int]:
    [(_t, _f, _s, off, end)] = list(fec.parse_messages(buf, len(buf)))
    result: dict[str, int] = parse(buf, off, end)
    return result


# --- the codec -----------------------------------------------------------------------------

def test_the_constants_are_the_kernels() -> None:
    """Against the uapi header itself, so a number copied wrong cannot pass."""
    text = UAPI.read_text()

    def index(first: str, name: str) -> int:
        block = text[text.index(first):]
        body = block[:block.index("};")]
        names = re.findall(r"^\s*(ETHTOOL_[A-Z0-9_]+)\s*[,=]", body, re.MULTILINE)
        return names.index(name)

    assert index("ETHTOOL_MSG_USER_NONE", "ETHTOOL_MSG_FEC_GET") == fec.ETHTOOL_MSG_FEC_GET
    assert index("ETHTOOL_MSG_KERNEL_NONE", "ETHTOOL_MSG_FEC_GET_REPLY") == \
        fec.ETHTOOL_MSG_FEC_GET_REPLY
    assert index("ETHTOOL_A_HEADER_UNSPEC", "ETHTOOL_A_HEADER_DEV_NAME") == \
        fec.ETHTOOL_A_HEADER_DEV_NAME
    assert index("ETHTOOL_A_HEADER_UNSPEC", "ETHTOOL_A_HEADER_FLAGS") == fec.ETHTOOL_A_HEADER_FLAGS
    assert index("ETHTOOL_A_FEC_UNSPEC", "ETHTOOL_A_FEC_HEADER") == fec.ETHTOOL_A_FEC_HEADER
    assert index("ETHTOOL_A_FEC_UNSPEC", "ETHTOOL_A_FEC_STATS") == fec.ETHTOOL_A_FEC_STATS
    for number, name in fec.FEC_STATS.items():
        uapi = {"fec_corrected_blocks": "CORRECTED", "fec_uncorrectable_blocks": "UNCORR",
                "fec_corrected_bits": "CORR_BITS"}[name]
        assert index("ETHTOOL_A_FEC_STAT_UNSPEC", f"ETHTOOL_A_FEC_STAT_{uapi}") == number
    assert re.search(r"#define ETHTOOL_FLAG_STATS\s+\(1 << 2\)", text)
    assert index("ETHTOOL_MSG_USER_NONE", "ETHTOOL_MSG_STATS_GET") == fec.ETHTOOL_MSG_STATS_GET
    assert index("ETHTOOL_MSG_KERNEL_NONE", "ETHTOOL_MSG_STATS_GET_REPLY") == \
        fec.ETHTOOL_MSG_STATS_GET_REPLY
    for name in ("HEADER", "GROUPS", "GRP"):
        assert index("ETHTOOL_A_STATS_UNSPEC", f"ETHTOOL_A_STATS_{name}") == \
            getattr(fec, f"ETHTOOL_A_STATS_{name}")
    for name in ("ID", "STAT"):
        assert index("ETHTOOL_A_STATS_GRP_UNSPEC", f"ETHTOOL_A_STATS_GRP_{name}") == \
            getattr(fec, f"ETHTOOL_A_STATS_GRP_{name}")
    for name in ("NOMASK", "SIZE", "VALUE"):
        assert index("ETHTOOL_A_BITSET_UNSPEC", f"ETHTOOL_A_BITSET_{name}") == \
            getattr(fec, f"ETHTOOL_A_BITSET_{name}")
    assert index("ETHTOOL_STATS_ETH_PHY", "ETHTOOL_STATS_ETH_PHY") == fec.ETHTOOL_STATS_ETH_PHY
    assert index("ETHTOOL_A_STATS_ETH_PHY_5_SYM_ERR", "ETHTOOL_A_STATS_ETH_PHY_5_SYM_ERR") == 0
    assert fec.PHY_STATS == {0: "symbol_error_during_carrier"}


def test_the_request_is_laid_out_as_the_uapi_says() -> None:
    got = fec.fec_request(FAMILY, 9, "rail0")
    header = nla(2, b"rail0\0") + nla(3, struct.pack("=I", 4))  # DEV_NAME, FLAGS = STATS
    body = struct.pack("=BBH", 29, 1, 0) + nla(1 | 0x8000, header)  # FEC_GET, nested HEADER
    assert got == struct.pack("=IHHII", 16 + len(body), FAMILY, 1, 9, 0) + body  # NLM_F_REQUEST
    family = fec.family_request(3)
    assert family[4:6] == struct.pack("=H", 16) and family[16] == 3  # GENL_ID_CTRL, GETFAMILY
    assert nla(2, b"ethtool\0") in family


def test_the_stats_request_asks_the_eth_phy_group_only() -> None:
    got = fec.stats_request(FAMILY, 4, "rail0")
    groups = nla(1, b"") + nla(2, struct.pack("=I", 1)) + nla(4, struct.pack("=I", 1))
    body = (struct.pack("=BBH", 32, 1, 0) + nla(2 | 0x8000, nla(2, b"rail0\0"))
            + nla(3 | 0x8000, groups))  # STATS_GET: HEADER (2), GROUPS (3): NOMASK, SIZE, VALUE
    assert got == struct.pack("=IHHII", 16 + len(body), FAMILY, 1, 4, 0) + body


def test_the_phy_symbol_errors_are_read_from_their_group_only() -> None:
    assert decode(stats_reply(), fec.parse_stats_reply) == {"symbol_error_during_carrier": 77}
    assert decode(stats_reply(phy=None), fec.parse_stats_reply) == {}  # a veth: an empty group


def test_the_reply_totals_are_the_first_array_entries() -> None:
    assert decode(fec_reply()) == {"fec_corrected_blocks": 1234, "fec_uncorrectable_blocks": 5,
                                   "fec_corrected_bits": 98765}


def test_statistics_the_driver_does_not_fill_are_absent() -> None:
    """"If stats can't be reported the relevant attributes will be empty" (the kernel's FEC
    statistics commit): an empty array is no value, not a zero."""
    assert decode(fec_reply(stats=nla(2, b"") + nla(3, u64s(0)))) == {
        "fec_uncorrectable_blocks": 0}
    no_stats = message(FAMILY, 1, 30, nla(1 | 0x8000, nla(2, b"rail0\0")) + nla(3, b"\0"))
    assert decode(no_stats) == {}


def test_the_family_id_is_read_from_the_controller_reply() -> None:
    reply = message(16, 1, 1, nla(2, b"ethtool\0") + nla(1, struct.pack("=H", FAMILY)))
    [(_t, _f, _s, off, end)] = list(fec.parse_messages(reply, len(reply)))
    assert fec.parse_family_id(reply, off, end) == FAMILY


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300) | st.builds(
    lambda reply, cut, junk: reply[:cut] + junk, st.sampled_from([fec_reply(), stats_reply()]),
    st.integers(0, 200), st.binary(max_size=40)))
def test_any_bytes_decode_without_error_and_only_from_their_message(data: bytes) -> None:
    buf = bytearray(data) + bytearray(64)
    for _t, _f, _s, off, end in fec.parse_messages(buf, len(data)):
        alone = bytearray(b"\xaa" * len(buf))
        alone[off:end] = buf[off:end]
        for parse in (fec.parse_fec_reply, fec.parse_stats_reply):
            got = parse(buf, off, end)
            assert got == parse(alone, off, end)
            assert all(isinstance(v, int) and 0 <= v < 2**64 for v in got.values())


# --- the socket conversation ---------------------------------------------------------------

class FakeSocket:
    """Answers each request with the scripted datagrams (stale ones first, as after a timeout)."""

    def __init__(self, answers: list[list[bytes]]) -> None:
        self.answers = answers
        self.sent: list[bytes] = []
        self.pending: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        self.pending += self.answers.pop(0)
        return len(data)

    def recv_into(self, buf: bytearray) -> int:
        data = self.pending.pop(0)
        buf[:len(data)] = data
        return len(data)

    def close(self) -> None:
        pass


def client(answers: list[list[bytes]]) -> fec.EthtoolStats:
    nl = object.__new__(fec.EthtoolStats)
    nl._sock, nl._seq, nl._buf, nl.family = FakeSocket(answers), 0, bytearray(4096), FAMILY
    return nl


def test_a_stale_reply_is_skipped_and_eopnotsupp_is_no_fec() -> None:
    nl = client([[error(0, errno.ETIMEDOUT), fec_reply(seq=1)], [stats_reply(seq=2)],
                 [error(3, errno.EOPNOTSUPP)], [stats_reply(seq=4, phy=None)],
                 [error(5, errno.ENODEV)], [error(6, errno.EPERM)]])
    assert nl.read("rail0") == {"fec_corrected_blocks": 1234, "fec_uncorrectable_blocks": 5,
                                "fec_corrected_bits": 98765, "symbol_error_during_carrier": 77}
    assert nl.read("veth0") == {}  # a driver without FEC: an answer, not an error
    assert nl.read("gone0") is None  # no such netdev
    with pytest.raises(PermissionError, match="rail0: EPERM"):
        nl.read("rail0")


# --- the monitor ---------------------------------------------------------------------------

class FakeStats:
    """EthtoolStats's interface with scripted answers per NIC: a dict, None or an exception."""

    def __init__(self, answers: dict[str, dict[str, int] | None | Exception]) -> None:
        self.answers = answers
        self.closed = 0

    def read(self, ifname: str) -> dict[str, int] | None:
        answer = self.answers[ifname]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self.closed += 1


def run_polls(mon: PhyMonitor, polls: int) -> list[Fact]:
    facts: list[Fact] = []
    mon._sink = facts.append
    for _ in range(polls):
        asyncio.run(mon.poll_once())
    return facts


def test_the_monitor_samples_nics_with_fec_and_says_nothing_of_the_others() -> None:
    opened: list[str | None] = []
    rail0 = {"fec_corrected_blocks": 10, "fec_uncorrectable_blocks": 0}
    fake = FakeStats({"rail0": rail0, "veth0": None, "rail1": {}})

    def opener(ns: str | None) -> FakeStats:
        opened.append(ns)
        return fake

    mon = PhyMonitor(["rail0", "veth0", "rail1"], "ns1", opener=opener)  # type: ignore[arg-type]
    facts = run_polls(mon, 2)
    assert [(f.ifname, f.counters, f.source) for f in facts  # type: ignore[union-attr]
            ] == [("rail0", rail0, "phy")] * 2
    assert opened == ["ns1"]  # one socket, kept
    assert mon.supported == {"rail0": True, "veth0": False, "rail1": False}
    assert mon.health.success


def test_a_failed_request_is_a_monitor_error_and_the_socket_is_opened_again() -> None:
    fakes = [FakeStats({"rail0": PermissionError(errno.EPERM, "rail0: EPERM")}),
             FakeStats({"rail0": {"fec_uncorrectable_blocks": 3}})]
    mon = PhyMonitor(["rail0"], opener=lambda ns: fakes.pop(0))
    assert run_polls(mon, 1) == []
    assert not mon.health.success and "rail0: ethtool statistics: [Errno 1] rail0: EPERM" in \
        mon.health.last_error
    assert len(run_polls(mon, 1)) == 1 and mon.health.success


def test_a_kernel_without_the_ethtool_family_is_no_data() -> None:
    def opener(ns: str | None) -> fec.EthtoolStats:
        raise FileNotFoundError(errno.ENOENT, "ethtool family: ENOENT")

    mon = PhyMonitor(["rail0"], opener=opener)
    assert run_polls(mon, 1) == [] and mon.health.success
