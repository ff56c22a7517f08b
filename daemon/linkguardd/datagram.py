"""What the decoders of jobs' datagrams share (verdicts/wire.py, census/wire.py): the Rejected
error whose reason is a metric label, and the checks of NUL-padded text fields."""
from __future__ import annotations

import re

# The reasons a datagram on the plugin socket is not taken, as metric labels (both kinds).
REJECT_REASONS = ("bad_size", "bad_magic", "bad_version", "bad_field", "unknown_nic",
                  "no_credentials", "rate_limited")
# dev_valid_name() in net/core/dev.c: < IFNAMSIZ bytes, no '/', ':' or whitespace (and here,
# printable ASCII: it ends up in logs and label values).
IFNAME = re.compile(r"[!-~]{1,15}")
_NOT_IN_IFNAME = frozenset("/:")


class Rejected(ValueError):
    """A datagram that is not valid; `reason` (one of REJECT_REASONS) is its metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def padded_text(raw: bytes, what: str, pattern: re.Pattern[str]) -> str:
    """The text of a NUL-padded field (at least one NUL, nothing after the padding starts)
    that matches `pattern`; raises Rejected("bad_field") naming `what`."""
    head, nul, tail = raw.partition(b"\0")
    if not nul or tail.strip(b"\0"):
        raise Rejected("bad_field", f"{what}: not a NUL-padded string")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Rejected("bad_field", f"{what}: not ASCII") from None
    if not pattern.fullmatch(text) or (pattern is IFNAME and _NOT_IN_IFNAME & set(text)):
        raise Rejected("bad_field", f"{what}: {text!r} is not valid")
    return text


def ifname(raw: bytes, what: str) -> str:
    """A netdev name field (16 bytes, NUL-padded)."""
    return padded_text(raw, what, IFNAME)
