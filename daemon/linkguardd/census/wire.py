"""The plugin's census datagram (plugin/src/daemon/census.h is the one definition) -> PluginCensusFact.

    struct (LG_CENSUS_SIZE = 856 bytes, little-endian; docs/operators.md, "Who is on the
    backup"):
       0 u32  magic "LGCS"          16 u64  instance (random, once per process)
       4 u16  version (1)           24 char job[64] (NUL-padded, printable ASCII)
       6 u16  nnics (0..16)         88 entry[16], 48 bytes each:
       8 u32  seq                      0 char nic[16]   24 u32 away        36 u32 reintegrations
      12 u32  flags (bit 0 CHANGE,    16 u32 primary    28 u32 standing    40 u16 failed_no_path
              bit 1 BYE)              20 u32 backup     32 u32 failovers   42 u16 failed_peer
                                                                           44 u16 failed_timeout
                                                                           46 u16 failed_other

Entries past nnics are all zero. Counters are cumulative since the process started.

Any local user can send one: every field is checked and anything else is a Rejected naming
the field, never an exception of another kind. `encode` builds one, for tests and tools (the
plugin is the sender).
"""
from __future__ import annotations

import re
import struct
from dataclasses import astuple

from linkguardd.datagram import Rejected, ifname, padded_text
from linkguardd.facts import NicCensus, PluginCensusFact

MAGIC = b"LGCS"
VERSION = 1
SIZE = 856
MAX_NICS = 16  # LG_CENSUS_MAX_NICS
F_CHANGE = 1 << 0
F_BYE = 1 << 1
_KNOWN_FLAGS = F_CHANGE | F_BYE
_HEAD = struct.Struct("<4sHHIIQ64s")
_ENTRY = struct.Struct("<16sIIIIIIHHHH")
# Each number's modulus, in NicCensus field order (roles, then the cumulative counters, which
# wrap: failovers and reintegrations u32, the failures u16).
MODULI = tuple(1 << (8 * struct.calcsize("<" + c)) for c in _ENTRY.format[4:])
assert _HEAD.size == 88 and _ENTRY.size == 48 and _HEAD.size + MAX_NICS * _ENTRY.size == SIZE
_JOB = re.compile(r"[!-~]{0,63}")  # a Slurm job id or a pod name: nothing to escape
FAILURE_REASONS = ("no_path", "peer", "timeout", "other")  # the failed_* fields, in order
_NO_ENTRY = bytes(_ENTRY.size)


def decode(data: bytes, pid: int, uid: int, at_ns: int) -> PluginCensusFact:
    """The census a datagram from process `pid` (user `uid`) states; raises Rejected."""
    if len(data) != SIZE:
        raise Rejected("bad_size", f"{len(data)} bytes, a census has {SIZE}")
    magic, version, nnics, seq, flags, instance, job = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise Rejected("bad_magic", f"magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise Rejected("bad_version", f"version {version}, this daemon reads {VERSION}")
    if nnics > MAX_NICS:
        raise Rejected("bad_field", f"nnics: {nnics} is more than {MAX_NICS}")
    if flags & ~_KNOWN_FLAGS:
        raise Rejected("bad_field", f"flags: unknown bits {flags & ~_KNOWN_FLAGS:#x}")
    nics: list[NicCensus] = []
    for i in range(MAX_NICS):
        raw = data[_HEAD.size + i * _ENTRY.size:_HEAD.size + (i + 1) * _ENTRY.size]
        if i >= nnics:
            if raw != _NO_ENTRY:
                raise Rejected("bad_field", f"entry {i}: not zero, but nnics is {nnics}")
            continue
        name, *numbers = _ENTRY.unpack(raw)
        nic = NicCensus(ifname(name, f"entry {i} nic"), *numbers)
        if any(n.ifname == nic.ifname for n in nics):
            raise Rejected("bad_field", f"entry {i} nic: {nic.ifname} is in the report twice")
        nics.append(nic)
    return PluginCensusFact(
        at_ns=at_ns, pid=pid, uid=uid, instance=instance, seq=seq,
        job=padded_text(job, "job", _JOB), change=bool(flags & F_CHANGE),
        bye=bool(flags & F_BYE), nics=tuple(nics))


def encode(nics: tuple[NicCensus, ...] = (), *, job: str = "", seq: int = 1, flags: int = 0,
           instance: int = 1) -> bytes:
    """The datagram the plugin would send for this census (at most MAX_NICS entries)."""
    entries = b"".join(_ENTRY.pack(n.ifname.encode(), *astuple(n)[1:]) for n in nics)
    return (_HEAD.pack(MAGIC, VERSION, len(nics), seq, flags, instance, job.encode())
            + entries.ljust(MAX_NICS * _ENTRY.size, b"\0"))
