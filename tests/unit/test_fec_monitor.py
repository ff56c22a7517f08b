"""The FEC monitor and its ethtool netlink codec, from message bytes laid out as the kernel's
uapi says (linux/netlink.h, linux/genetlink.h, linux/ethtool_netlink.h: enum ETHTOOL_MSG_*,
ETHTOOL_A_HEADER_*, ETHTOOL_A_FEC_*, ETHTOOL_A_FEC_STAT_*). The live kernel path (a veth
answers EOPNOTSUPP) is tests/lab/test_fec_veth.py."""
from __future__ import annotations

import asyncio
import errno
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkguardd.facts import Fact
from linkguardd.monitors import ethtool_fec as fec
from linkguardd.monitors.fec import FecMonitor

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


def error(seq: int, code: int) -> bytes:
    """NLMSG_ERROR (2): struct nlmsgerr {int error (-errno); struct nlmsghdr msg}."""
    return struct.pack("=IHHII", 36, 2, 0, seq, 0) + struct.pack("=i", -code) + b"\0" * 16


def decode(buf: bytes) -> dict[str, int]:
    [(_t, _f, _s, off, end)] = list(fec.parse_messages(buf, len(buf)))
    return fec.parse_fec_reply(buf, off, end)


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


def test_the_request_is_laid_out_as_the_uapi_says() -> None:
    got = fec.fec_request(FAMILY, 9, "rail0")
    header = nla(2, b"rail0\0") + nla(3, struct.pack("=I", 4))  # DEV_NAME, FLAGS = STATS
    body = struct.pack("=BBH", 29, 1, 0) + nla(1 | 0x8000, header)  # FEC_GET, nested HEADER
    assert got == struct.pack("=IHHII", 16 + len(body), FAMILY, 1, 9, 0) + body  # NLM_F_REQUEST
    family = fec.family_request(3)
    assert family[4:6] == struct.pack("=H", 16) and family[16] == 3  # GENL_ID_CTRL, GETFAMILY
    assert nla(2, b"ethtool\0") in family


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
    lambda cut, junk: fec_reply()[:cut] + junk, st.integers(0, 200), st.binary(max_size=40)))
def test_any_bytes_decode_without_error_and_only_from_their_message(data: bytes) -> None:
    buf = bytearray(data) + bytearray(64)
    for _t, _f, _s, off, end in fec.parse_messages(buf, len(data)):
        alone = bytearray(b"\xaa" * len(buf))
        alone[off:end] = buf[off:end]
        got = fec.parse_fec_reply(buf, off, end)
        assert got == fec.parse_fec_reply(alone, off, end)
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


def client(answers: list[list[bytes]]) -> fec.EthtoolFec:
    nl = object.__new__(fec.EthtoolFec)
    nl._sock, nl._seq, nl._buf, nl.family = FakeSocket(answers), 0, bytearray(4096), FAMILY
    return nl


def test_a_stale_reply_is_skipped_and_eopnotsupp_is_no_fec() -> None:
    nl = client([[error(0, errno.ETIMEDOUT), fec_reply(seq=1)],
                 [error(2, errno.EOPNOTSUPP)], [error(3, errno.ENODEV)], [error(4, errno.EPERM)]])
    assert nl.read("rail0") == {"fec_corrected_blocks": 1234, "fec_uncorrectable_blocks": 5,
                                "fec_corrected_bits": 98765}
    assert nl.read("veth0") is None  # a driver without FEC: an answer, not an error
    assert nl.read("gone0") is None  # no such netdev
    with pytest.raises(PermissionError, match="rail0: EPERM"):
        nl.read("rail0")


# --- the monitor ---------------------------------------------------------------------------

class FakeFec:
    """EthtoolFec's interface with scripted answers per NIC: a dict, None or an exception."""

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


def run_polls(mon: FecMonitor, polls: int) -> list[Fact]:
    facts: list[Fact] = []
    mon._sink = facts.append
    for _ in range(polls):
        asyncio.run(mon.poll_once())
    return facts


def test_the_monitor_samples_nics_with_fec_and_says_nothing_of_the_others() -> None:
    opened: list[str | None] = []
    rail0 = {"fec_corrected_blocks": 10, "fec_uncorrectable_blocks": 0}
    fake = FakeFec({"rail0": rail0, "veth0": None, "rail1": {}})

    def opener(ns: str | None) -> FakeFec:
        opened.append(ns)
        return fake

    mon = FecMonitor(["rail0", "veth0", "rail1"], "ns1", opener=opener)  # type: ignore[arg-type]
    facts = run_polls(mon, 2)
    assert [(f.ifname, f.counters, f.source) for f in facts  # type: ignore[union-attr]
            ] == [("rail0", rail0, "fec")] * 2
    assert opened == ["ns1"]  # one socket, kept
    assert mon.supported == {"rail0": True, "veth0": False, "rail1": False}
    assert mon.health.success


def test_a_failed_request_is_a_monitor_error_and_the_socket_is_opened_again() -> None:
    fakes = [FakeFec({"rail0": PermissionError(errno.EPERM, "rail0: EPERM")}),
             FakeFec({"rail0": {"fec_uncorrectable_blocks": 3}})]
    mon = FecMonitor(["rail0"], opener=lambda ns: fakes.pop(0))
    assert run_polls(mon, 1) == []
    assert not mon.health.success and "rail0: FEC_GET: [Errno 1] rail0: EPERM" in \
        mon.health.last_error
    assert len(run_polls(mon, 1)) == 1 and mon.health.success


def test_a_kernel_without_the_ethtool_family_is_no_data() -> None:
    def opener(ns: str | None) -> fec.EthtoolFec:
        raise FileNotFoundError(errno.ENOENT, "ethtool family: ENOENT")

    mon = FecMonitor(["rail0"], opener=opener)
    assert run_polls(mon, 1) == [] and mon.health.success
