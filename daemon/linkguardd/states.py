"""NIC states and transition reasons: the numeric values are the shared-memory ABI.

plugin/include/linkguard_shm.h mirrors these numbers (a contract test compares them): never
renumber a member, only append. STATE_TEXT and REASON_TEXT are what operators read (CLI, logs).
"""
from __future__ import annotations

from enum import IntEnum


class NicState(IntEnum):
    """Health of one NIC as the policy decided it."""

    UNKNOWN = 0
    UP = 1
    DEGRADED = 2
    DOWN = 3
    DRAINED = 4
    RECOVERING = 5


class Reason(IntEnum):
    """Why a NIC entered its current state."""

    NONE = 0
    STARTUP = 1
    CARRIER_LOST = 2
    OPER_DOWN = 3
    ADMIN_DOWN = 4
    ABSENT = 5
    IB_PORT_NOT_ACTIVE = 6
    VERBS_PORT_ERR = 7
    VERBS_DEVICE_FATAL = 8
    DOM_WARNING = 9
    DOM_ALARM = 10
    ERROR_RATE = 11
    LINK_RESTORED = 12
    HOLDDOWN_EXPIRED = 13
    OPERATOR_DRAIN = 14
    OPERATOR_UNDRAIN = 15
    CONDITION_CLEARED = 16
    PLUGIN_VERDICT = 17  # events only (NOTE_REASONS): the NIC's state does not change
    PLUGIN_VERDICT_CLEARED = 18


STATE_TEXT: dict[NicState, str] = {
    NicState.UNKNOWN: "no facts yet (daemon starting, or NIC just configured)",
    NicState.UP: "healthy: carries traffic",
    NicState.DEGRADED: "link up but predicted to fail: move traffic off proactively",
    NicState.DOWN: "link unusable: traffic must use the backup NIC",
    NicState.DRAINED: "taken out of service by an operator until undrain",
    NicState.RECOVERING: "link back, in hold-down or flap damping: not yet used for traffic",
}

REASON_TEXT: dict[Reason, str] = {
    Reason.NONE: "no reason recorded",
    Reason.STARTUP: "state found at daemon start or NIC configuration",
    Reason.CARRIER_LOST: "carrier lost (cable, optic, or far-end switch port)",
    Reason.OPER_DOWN: "kernel operstate is not UP",
    Reason.ADMIN_DOWN: "interface administratively down (ip link set down)",
    Reason.ABSENT: "configured NIC does not exist on this host (driver, rename, or typo)",
    Reason.IB_PORT_NOT_ACTIVE: "RDMA port state is not ACTIVE",
    Reason.VERBS_PORT_ERR: "verbs async event PORT_ERR",
    Reason.VERBS_DEVICE_FATAL: "verbs async event DEVICE_FATAL: the RDMA device must be reset",
    Reason.DOM_WARNING: "optical module reading past its warning threshold",
    Reason.DOM_ALARM: "optical module reading past its alarm threshold",
    Reason.ERROR_RATE: "link error counters rising faster than the configured rate",
    Reason.LINK_RESTORED: "link back; waiting out the hold-down",
    Reason.HOLDDOWN_EXPIRED: "hold-down passed with the link stable",
    Reason.OPERATOR_DRAIN: "drained by an operator",
    Reason.OPERATOR_UNDRAIN: "undrained by an operator; waiting out the hold-down",
    Reason.CONDITION_CLEARED: "degrading condition cleared; waiting out the hold-down",
    Reason.PLUGIN_VERDICT: "a job's NCCL plugin reports the NIC gray (stalled, lossy or slow); "
                           "the state is not changed by it",
    Reason.PLUGIN_VERDICT_CLEARED: "no job reports the NIC gray any more (healthy again, or "
                                   "the reports expired)",
}

# Reasons of events that record something about a NIC without changing its state (old state ==
# new state, same epoch): they are in the history and the shm ring, not in transition counts.
NOTE_REASONS = frozenset({Reason.PLUGIN_VERDICT, Reason.PLUGIN_VERDICT_CLEARED})

# States in which a NIC still carries its own traffic (DEGRADED does, until the plugin moves it).
CARRYING_STATES = frozenset({NicState.UP, NicState.DEGRADED})
