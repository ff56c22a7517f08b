"""The plugin's verdict datagram (plugin/src/daemon/verdict.h is the one definition) -> PluginVerdictFact.

    struct (LG_VERDICT_SIZE = 104 bytes, little-endian):
       0 u32 magic "LGVD"   8 char nic[16]   28 u32 loss_ppm      48 u64 conn
       4 u16 version       24 u32 for_ms     32 u64 rate_Bps      56 char peer[48]
       6 u8  kind                            40 u64 expected_Bps
       7 u8  path

Any local user can send one: every field is checked and anything else is a Rejected naming
the field, never an exception of another kind.
"""
from __future__ import annotations

import re
import struct

from linkguardd.datagram import REJECT_REASONS, Rejected, ifname, padded_text
from linkguardd.facts import PluginVerdictFact

__all__ = ["REJECT_REASONS", "Rejected", "decode"]

MAGIC = b"LGVD"
VERSION = 1
SIZE = 104
_FORMAT = struct.Struct("<4sHBB16sIIQQQ48s")
assert _FORMAT.size == SIZE
KINDS = {1: "healthy", 2: "stalled", 3: "lossy", 4: "slow"}  # enum lg_verdict_kind
VERDICTS = tuple(KINDS.values())
_PEER = re.compile(r"[0-9A-Za-z.:\[\]%_-]{0,47}")  # an address and port, nothing to escape


def decode(data: bytes, pid: int, uid: int, at_ns: int) -> PluginVerdictFact:
    """The fact a datagram from process `pid` (user `uid`) states; raises Rejected."""
    if len(data) != SIZE:
        raise Rejected("bad_size", f"{len(data)} bytes, a verdict has {SIZE}")
    (magic, version, kind, path, nic, for_ms, loss_ppm, rate, expected, conn,
     peer) = _FORMAT.unpack(data)
    if magic != MAGIC:
        raise Rejected("bad_magic", f"magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise Rejected("bad_version", f"version {version}, this daemon reads {VERSION}")
    if kind not in KINDS:
        raise Rejected("bad_field", f"kind: unknown verdict {kind}")
    if path > 1:
        raise Rejected("bad_field", f"path: {path} is neither 0 (primary) nor 1 (backup)")
    if loss_ppm > 1_000_000:
        raise Rejected("bad_field", f"loss_ppm: {loss_ppm} is more than 100 %")
    return PluginVerdictFact(
        ifname=ifname(nic, "nic"), at_ns=at_ns, verdict=KINDS[kind], pid=pid, uid=uid,
        path=path, for_ms=for_ms, loss_ppm=loss_ppm, rate_bps=rate, expected_bps=expected,
        conn=conn, peer=padded_text(peer, "peer", _PEER))
