"""Facts: what the monitors observed, as the kernel reported it, with no judgement.

Monitors emit facts; the pure policy (policy.py) alone turns them into NIC states. A *condition*
is the current value of something that persists (a carrier, a port state, a DOM reading): a newer
condition replaces the older one. An *event* happened once (a verbs async event, an operator
request) and is acted on when it arrives. Every fact carries `at_ns`, the CLOCK_MONOTONIC time at
which the monitor observed it, so detection latency can be measured end to end.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LinkFact:
    """Condition: a netdev's link as rtnetlink reports it (RTM_NEWLINK / RTM_DELLINK / dump)."""

    ifname: str
    at_ns: int
    present: bool = True  # False after RTM_DELLINK, or when a configured NIC is absent
    ifindex: int = 0
    admin_up: bool = False  # IFF_UP
    carrier: bool = False  # IFLA_CARRIER (IFF_LOWER_UP)
    operstate: str = "UNKNOWN"  # IFLA_OPERSTATE as pyroute2 names it: UP, DOWN, LOWERLAYERDOWN...
    carrier_changes: int | None = None  # IFLA_CARRIER_CHANGES
    carrier_up_count: int | None = None  # IFLA_CARRIER_UP_COUNT
    carrier_down_count: int | None = None  # IFLA_CARRIER_DOWN_COUNT
    speed_mbps: int | None = None  # /sys/class/net/<if>/speed, None when unknown (-1 on veth)


@dataclass(frozen=True)
class LinkRenamedFact:
    """Event: ifindex `ifindex` changed its name from `old` to `new` while running."""

    old: str
    new: str
    ifindex: int
    at_ns: int


@dataclass(frozen=True)
class CountersFact:
    """Condition: a sample of monotonically increasing error counters of one NIC.

    `counters` maps a counter name (rx_crc_errors, rx_frame_errors, rx_missed_errors, rx_errors,
    tx_errors for netdevs; symbol_error, link_downed, ... for IB ports) to its raw value.
    """

    ifname: str
    at_ns: int
    counters: Mapping[str, int] = field(default_factory=dict)
    source: str = "netlink"  # "netlink" (IFLA_STATS64) or "rdma" (sysfs port counters)


@dataclass(frozen=True)
class IbPortFact:
    """Condition: an RDMA port from /sys/class/infiniband/<dev>/ports/<port>/ (kernel strings)."""

    rdma_dev: str
    port: int
    at_ns: int
    netdev: str | None  # the netdev this port belongs to, None if unmapped
    state: str  # "ACTIVE", "DOWN", "INIT", "ARMED", "NOP", "ACTIVE_DEFER"
    phys_state: str  # "LinkUp", "Polling", "Disabled", ...
    rate: str = ""  # e.g. "400 Gb/sec (4X NDR)"
    link_layer: str = ""  # "InfiniBand" or "Ethernet"
    present: bool = True


@dataclass(frozen=True)
class VerbsEventFact:
    """Event: a verbs asynchronous event (IBV_EVENT_PORT_ERR, PORT_ACTIVE, DEVICE_FATAL...)."""

    rdma_dev: str
    event: str  # "PORT_ERR", "PORT_ACTIVE", "DEVICE_FATAL"
    at_ns: int
    port: int | None = None  # pyverbs does not expose the port number of an event
    netdev: str | None = None


@dataclass(frozen=True)
class DomFact:
    """Condition: the optical module's diagnostics of one NIC.

    `status` is "ok", "no_module" (nothing plugged, or a NIC without a cage such as a veth) or
    "undecodable" (bytes that no decoder accepts; `detail` says why). `warnings` and `alarms`
    name the readings past the module's own thresholds or flagged by it, e.g. "rx_power_low[2]",
    "temperature_high". `diagnostics` is the decoded object (dom.common.ModuleDiagnostics).
    """

    ifname: str
    at_ns: int
    status: str
    warnings: tuple[str, ...] = ()
    alarms: tuple[str, ...] = ()
    detail: str = ""
    diagnostics: object | None = None
    # How many reads since the monitor started returned each latched flag ("rx_los[2]": 3):
    # the module clears a flag when it is read, so this count exists nowhere else.
    flags_seen: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class OperatorFact:
    """Event: an operator asked to drain or undrain a NIC (gRPC API / linkguard-cli)."""

    ifname: str
    action: str  # "drain" or "undrain"
    at_ns: int
    reason: str = ""


@dataclass(frozen=True)
class PluginVerdictFact:
    """Event: a job's NCCL plugin judged a path on this NIC (verdicts/wire.py decodes it).

    `verdict` is "stalled", "lossy", "slow" or "healthy" (again). `pid` and `uid` are the
    sender's, from the kernel (SCM_CREDENTIALS). Numbers the plugin did not measure are 0.
    """

    ifname: str
    at_ns: int
    verdict: str
    pid: int
    uid: int
    path: int = 0  # 0 primary, 1 backup
    for_ms: int = 0  # how long the condition lasted when judged
    loss_ppm: int = 0  # lost or retransmitted, parts per million
    rate_bps: int = 0  # goodput measured, bytes/s
    expected_bps: int = 0  # the path's healthy baseline or the NIC's speed, bytes/s
    conn: int = 0  # the plugin's connection id
    peer: str = ""  # "a.b.c.d:port" of the remote end


@dataclass(frozen=True)
class PluginVerdictRejectedFact:
    """Event: a datagram on the verdict socket that is no valid verdict; `reason` is one of
    datagram.REJECT_REASONS. Counted, never acted on."""

    reason: str
    pid: int  # -1 when the kernel gave no credentials
    uid: int
    at_ns: int
    count: int = 1  # datagrams it stands for: a batch's shed ones come as one (the last's sender)


@dataclass(frozen=True)
class NicCensus:
    """One NIC's line of a process's census (census/wire.py): connections by role now, and
    counters cumulative since the process started (the daemon computes their deltas)."""

    ifname: str
    primary: int = 0  # connections whose data runs on this NIC on their primary path
    backup: int = 0  # ... on their backup path
    away: int = 0  # connections whose primary is this NIC and whose data runs on the backup
    standing: int = 0  # standby paths on this NIC that are up
    failovers: int = 0
    reintegrations: int = 0
    failed_no_path: int = 0
    failed_peer: int = 0
    failed_timeout: int = 0
    failed_other: int = 0


@dataclass(frozen=True)
class PluginCensusFact:
    """Condition: a job's NCCL plugin process reports its connections (census/wire.py).

    `pid` and `uid` are the kernel's (SCM_CREDENTIALS; pid 0 when the job is in another pid
    namespace, then `instance` tells its processes apart). Only monitored NICs are in `nics`.
    """

    at_ns: int
    pid: int
    uid: int
    instance: int  # drawn once per process
    seq: int  # reports the process sent so far
    job: str = ""  # SLURM_JOB_ID or the pod name; "" when the process found none
    change: bool = False  # sent because something changed (else a heartbeat)
    bye: bool = False  # the process's last report
    nics: tuple[NicCensus, ...] = ()


@dataclass(frozen=True)
class PluginCensusRejectedFact:
    """Event: a datagram with the census magic that is no valid census; `reason` is one of
    datagram.REJECT_REASONS. Counted, never acted on."""

    reason: str
    pid: int  # -1 when the kernel gave no credentials
    uid: int
    at_ns: int
    count: int = 1  # datagrams it stands for: a batch's shed ones come as one (the last's sender)


Fact = (
    LinkFact | LinkRenamedFact | CountersFact | IbPortFact | VerbsEventFact | DomFact | OperatorFact
    | PluginVerdictFact | PluginVerdictRejectedFact | PluginCensusFact | PluginCensusRejectedFact
)
