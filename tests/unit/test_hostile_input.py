"""Property tests of the daemon's parsers of outside input (issue #16): whatever bytes or
values arrive, each raises only its documented error, never anything else.

- the config loader (TOML files and flag/environment overrides): ConfigError, naming the key;
- the rtnetlink decoder (datagrams from the kernel): no exception at all, every message and
  attribute it yields lies inside the datagram and inside its own message;
- gRPC requests to the real API server: only documented status codes, each with a message;
- plugin verdict and census datagrams (any local user can send one): a valid fact or Rejected.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from fake_daemon import FakeDaemon, ServedFake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc
from linkguard_cli.defang import defang, printable
from linkguardd import state_file
from linkguardd.census import wire as census_wire
from linkguardd.datagram import REJECT_REASONS
from linkguardd.facts import NicCensus
from linkguardd.monitors import rtnl
from linkguardd.settings import ConfigError, Settings, build_settings, load_config
from linkguardd.validate import drain_reason_problem, nic_name_problem
from linkguardd.verdicts import wire as verdict_wire

KEYS = [f.name for f in dataclasses.fields(Settings)]

# ---- config ------------------------------------------------------------------------------

scalars = (st.integers(min_value=-2**63, max_value=2**63 - 1) | st.booleans()
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=8)


def toml_value(v: Any) -> str:
    """A TOML rendering of v (inline tables and arrays), enough for the loader's input."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}"
                             for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_value(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS) | st.text(min_size=1, max_size=12), values,
                       max_size=6))
def test_any_config_values_load_or_name_the_problem(data: dict[str, Any]) -> None:
    try:
        s = build_settings(data)
    except ConfigError as e:
        assert str(e)  # says what is wrong
    else:
        assert isinstance(s, Settings)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_config_file_bytes_load_or_raise_config_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "hostile.toml"
    path.write_bytes(raw)
    try:
        load_config(path)
    except ConfigError as e:
        assert str(path) in str(e) or "'" in str(e) or ":" in str(e)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), st.text(max_size=30), max_size=4))
def test_any_override_strings_load_or_raise_config_error(overrides: dict[str, str]) -> None:
    try:
        build_settings({}, overrides=overrides)
    except ConfigError as e:
        assert str(e)


# ---- rtnetlink ---------------------------------------------------------------------------

def nlattr(atype: int, payload: bytes) -> bytes:
    raw = rtnl.NLA.pack(rtnl.NLA.size + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


attrs = st.lists(st.tuples(st.sampled_from(sorted(rtnl.LINK_ATTRS | rtnl.STATS_ATTRS) + [0, 999]),
                           st.binary(max_size=24)), max_size=6)


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    """A netlink message near the real shape: a header whose length and type may lie, an
    ifinfomsg that may be cut short, attributes whose lengths may lie."""
    mtype = draw(st.sampled_from([rtnl.RTM_NEWLINK, rtnl.RTM_DELLINK, rtnl.NLMSG_ERROR,
                                  rtnl.NLMSG_DONE, 0, 77]))
    body = rtnl.IFI.pack(0, 1, draw(st.integers(-2**31, 2**31 - 1)), draw(st.integers(0, 2**32 - 1)), 0)
    body = body[:draw(st.integers(0, len(body)))]
    for atype, payload in draw(attrs):
        a = nlattr(atype, payload)
        if draw(st.booleans()):  # a lying attribute length
            a = struct.pack("=H", draw(st.integers(0, 0xFFFF))) + a[2:]
        body += a
    length = rtnl.HDR.size + len(body)
    if draw(st.booleans()):
        length = draw(st.integers(0, 0xFFFFFFFF))
    return rtnl.HDR.pack(length & 0xFFFFFFFF, mtype, draw(st.integers(0, 0xFFFF)), 1, 0) + body


def decode(buf: bytearray, mtype: int, off: int, end: int) -> Any:
    if mtype in (rtnl.RTM_NEWLINK, rtnl.RTM_DELLINK):
        link = rtnl.parse_ifinfo(buf, off, end, rtnl.LINK_ATTRS)
        _family, index, flags, got = link
        fact = rtnl.link_fact(rtnl.ifname_of(got) or "x", index, flags, got, 0, {})
        stats = rtnl.parse_ifinfo(buf, off, end, rtnl.STATS_ATTRS)
        raw = stats[3].get(rtnl.IFLA_STATS64)
        return link, fact, stats, rtnl.parse_stats64(raw) if raw is not None else None
    return rtnl.error_code(buf, off) if mtype == rtnl.NLMSG_ERROR else None


@settings(max_examples=500, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4).map(b"".join) | st.binary(max_size=200))
def test_any_datagram_decodes_from_its_own_bytes_only(datagram: bytes) -> None:
    """No exception, and each message's decoding depends on its own bytes alone: the same
    with everything around it (other messages, the rest of the receive buffer) overwritten."""
    n = len(datagram)
    buf = bytearray(datagram) + bytearray(64)  # the receive buffer is larger than the datagram
    for mtype, _flags, _seq, off, end in rtnl.parse_messages(buf, n):
        assert 0 <= off < end <= n
        alone = bytearray(b"\xaa" * len(buf))
        alone[off:end] = buf[off:end]
        assert decode(buf, mtype, off, end) == decode(alone, mtype, off, end)


def test_attribute_past_its_message_is_not_read() -> None:
    """An attribute whose length runs past its own message must not take the next message's
    bytes as its payload."""
    name = nlattr(rtnl.IFLA_IFNAME, b"rail0\0")
    lying = struct.pack("=HH", 200, rtnl.IFLA_OPERSTATE) + b"\x06\0\0\0"
    first = rtnl.IFI.pack(0, 1, 5, 0, 0) + name + lying
    msg1 = rtnl.HDR.pack(rtnl.HDR.size + len(first), rtnl.RTM_NEWLINK, 0, 1, 0) + first
    second = rtnl.IFI.pack(0, 1, 6, 0, 0) + nlattr(rtnl.IFLA_IFNAME, b"rail1\0")
    msg2 = rtnl.HDR.pack(rtnl.HDR.size + len(second), rtnl.RTM_NEWLINK, 0, 1, 0) + second
    buf = bytearray(msg1 + msg2)
    decoded = [rtnl.parse_ifinfo(buf, off, end, rtnl.LINK_ATTRS)
               for _t, _f, _s, off, end in rtnl.parse_messages(buf, len(buf))]
    assert [rtnl.ifname_of(a) for _fa, _i, _fl, a in decoded] == ["rail0", "rail1"]
    assert rtnl.IFLA_OPERSTATE not in decoded[0][3]


def test_message_too_short_for_its_type_is_skipped() -> None:
    short_link = rtnl.HDR.pack(rtnl.HDR.size + 4, rtnl.RTM_NEWLINK, 0, 1, 0) + b"\0" * 4
    short_err = rtnl.HDR.pack(rtnl.HDR.size + 2, rtnl.NLMSG_ERROR, 0, 1, 0) + b"\0" * 4
    done = rtnl.HDR.pack(rtnl.HDR.size, rtnl.NLMSG_DONE, 0, 1, 0)
    buf = bytearray(short_link + short_err + done)
    assert [m[0] for m in rtnl.parse_messages(buf, len(buf))] == [rtnl.NLMSG_DONE]


# ---- gRPC requests -------------------------------------------------------------------------

# What a request may be answered with; anything else (UNKNOWN, INTERNAL: an exception in a
# handler) means the server did not validate what it was given.
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE,
           grpc.StatusCode.PERMISSION_DENIED}
names = st.sampled_from(["rail0", "rail1", "rail2", ""]) | st.text(max_size=40)
seqs = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.fixture(scope="module")
def api_stub() -> Iterator[pb_grpc.LinkguardStub]:
    with ServedFake(FakeDaemon()) as served, \
            grpc.insecure_channel("unix:" + served.socket_path) as channel:
        yield pb_grpc.LinkguardStub(channel)


def answer(call: Any, request: Any) -> grpc.StatusCode:
    try:
        call(request, timeout=30)
    except grpc.RpcError as e:
        assert e.code() in ALLOWED, (request, e.code(), e.details())
        assert e.details(), request  # an error says what is wrong
        return e.code()
    return grpc.StatusCode.OK


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(nic=names, reason=st.text(max_size=300), force=st.booleans())
def test_any_drain_request_gets_a_documented_answer(api_stub: pb_grpc.LinkguardStub, nic: str,
                                                    reason: str, force: bool) -> None:
    code = answer(api_stub.Drain, pb.DrainRequest(nic=nic, reason=reason, force=force))
    if code == grpc.StatusCode.OK:  # leave the fake as it was for the next example
        answer(api_stub.Undrain, pb.UndrainRequest(nic=nic))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(nic=names, since=seqs, limit=st.integers(min_value=0, max_value=2**32 - 1))
def test_any_read_request_gets_a_documented_answer(api_stub: pb_grpc.LinkguardStub, nic: str,
                                                   since: int, limit: int) -> None:
    answer(api_stub.Undrain, pb.UndrainRequest(nic=nic))
    answer(api_stub.GetModule, pb.GetModuleRequest(nic=nic))
    answer(api_stub.ListEvents, pb.ListEventsRequest(since_seq=since, limit=limit))
    answer(api_stub.GetStatus, pb.GetStatusRequest())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(since=seqs, replay=st.booleans())
def test_any_watch_request_gets_a_documented_answer(api_stub: pb_grpc.LinkguardStub, since: int,
                                                    replay: bool) -> None:
    stream = api_stub.Watch(pb.WatchRequest(since_seq=since, replay=replay), timeout=0.5)
    try:
        for _ in stream:
            pass
    except grpc.RpcError as e:
        code = e.code()
        # A healthy watch simply runs until the client's deadline.
        assert code in ALLOWED | {grpc.StatusCode.DEADLINE_EXCEEDED}, (since, code, e.details())


# ---- plugin verdict datagrams --------------------------------------------------------------

VALID_VERDICT = verdict_wire.MAGIC + struct.pack("<HBB16sIIQQQ48s", 1, 2, 0, b"rail0", 812, 0,
                                                 0, 0, 7, b"198.18.1.2:40001")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=verdict_wire.SIZE + 8)
       | st.lists(st.tuples(st.integers(0, verdict_wire.SIZE - 1), st.integers(0, 255)),
                  max_size=6).map(lambda edits: _edited(VALID_VERDICT, edits)))
def test_any_verdict_datagram_decodes_or_is_rejected(data: bytes) -> None:
    try:
        fact = verdict_wire.decode(data, 4242, 1000, 1)
    except verdict_wire.Rejected as exc:
        assert exc.reason in verdict_wire.REJECT_REASONS and str(exc)
        return
    assert len(data) == verdict_wire.SIZE and data[:4] == verdict_wire.MAGIC
    assert fact.verdict in verdict_wire.VERDICTS and fact.path in (0, 1)
    assert 0 < len(fact.ifname) < 16 and fact.ifname.isprintable() and "/" not in fact.ifname
    assert fact.peer.isprintable() and len(fact.peer) < 48 and fact.loss_ppm <= 1_000_000


VALID_CENSUS = census_wire.encode((NicCensus("rail0", 64, 0, 0, 64, 1, 1, 0, 1, 0, 0),
                                   NicCensus("rail1", 0, 64)), job="4242", seq=3, flags=1,
                                  instance=0xFEED)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=census_wire.SIZE + 8)
       | st.lists(st.tuples(st.integers(0, census_wire.SIZE - 1), st.integers(0, 255)),
                  max_size=6).map(lambda edits: _edited(VALID_CENSUS, edits))
       | st.tuples(st.integers(0, census_wire.SIZE - 1), st.binary(min_size=1, max_size=64))
       .map(lambda at: (VALID_CENSUS[:at[0]] + at[1] + VALID_CENSUS[at[0] + len(at[1]):])
            [:census_wire.SIZE]))
def test_any_census_datagram_decodes_or_is_rejected(data: bytes) -> None:
    try:
        fact = census_wire.decode(data, 4242, 1000, 1)
    except census_wire.Rejected as exc:
        assert exc.reason in REJECT_REASONS and str(exc)
        return
    assert len(data) == census_wire.SIZE and data[:4] == census_wire.MAGIC
    assert len(fact.nics) <= census_wire.MAX_NICS and fact.job.isprintable()
    names = [n.ifname for n in fact.nics]
    assert len(set(names)) == len(names)
    assert all(0 < len(n) < 16 and n.isprintable() and "/" not in n for n in names)
    assert census_wire.encode(fact.nics, job=fact.job, seq=fact.seq, instance=fact.instance,
                              flags=fact.change | fact.bye << 1) == data  # nothing unchecked


def _edited(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for index, value in edits:
        out[index] = value
    return bytes(out)


@given(st.text(max_size=200))
def test_any_text_from_the_daemon_prints_as_printable_text(text: str) -> None:
    """Issue 30, finding 7: whatever a string field holds, the CLI shows only printable
    characters, and a text that was printable already is shown unchanged."""
    shown = printable(text)
    assert shown.isprintable() and (shown == text or not text.isprintable())
    message = defang(pb.Nic(name=text, drain_reason=text, counters={text: 1}))
    assert all(s.isprintable() for s in (message.name, message.drain_reason,
                                         *message.counters))


@given(st.dictionaries(st.text(max_size=20), st.fixed_dictionaries(
    {"reason": st.text(max_size=220), "since_unix": st.floats()}), max_size=3),
    st.integers(min_value=-2, max_value=2**64))
def test_any_state_file_loads_as_drains_an_operator_could_give_or_is_refused(
        drains: dict[str, Any], next_seq: int) -> None:
    """Issue 30, finding 6: what state.json holds reaches `status` only if the API would
    have taken it from an operator."""
    try:
        state = state_file._parse({"format": 1, "next_seq": next_seq, "drains": drains})
    except state_file.StateFileError:
        return
    for nic, drain in state.drains.items():
        assert nic_name_problem(nic) is None and drain_reason_problem(drain.reason) is None
        assert math.isfinite(drain.since_unix)
