"""Checks of names and texts that come from outside (API callers, the state file), shared so
that both say the same about the same input."""
from __future__ import annotations

IFNAMSIZ = 16  # linux/if.h; a name has at most IFNAMSIZ-1 characters
MAX_REASON_CHARS = 200


def nic_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Linux interface name (dev_valid_name, net/core/dev.c), or None."""
    if not name:
        return "the NIC name is empty"
    if len(name) >= IFNAMSIZ:
        return f"NIC name {name[:40]!r} is longer than {IFNAMSIZ - 1} characters"
    if name in (".", "..") or any(c in "/:" or c.isspace() or not c.isprintable() for c in name):
        return f"{name!r} is not a valid interface name"
    return None


def drain_reason_problem(reason: str) -> str | None:
    if not reason.strip():
        return "a drain needs a reason (e.g. --reason 'swap optic, ticket 1234')"
    if len(reason) > MAX_REASON_CHARS:
        return f"the reason is {len(reason)} characters long; at most {MAX_REASON_CHARS}"
    if not reason.isprintable():
        return "the reason must be printable text on one line (no control characters)"
    return None
