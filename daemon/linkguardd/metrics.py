"""Prometheus metrics: per-NIC health, optics and counters read from a DaemonView at scrape time,
plus the transition counters and the detection-latency histogram that the metrics exporter
(exporters/metrics.py) feeds.

Names follow Prometheus conventions (nic-monitoring.md §4): prefix `linkguard_`, base units
(celsius, volts, amperes, watts, seconds), counters end in `_total`. Series about one netdev carry
node_exporter's label for it, `device`, so they join with node_network_* series
(`on(instance, device)`). Each metric has one unit, so the module thresholds are one gauge per
quantity with a `level` label, named like the reading they bound
(linkguard_transceiver_rx_power_threshold_watts{level="low_warning"}). The registry is this
object's own: nothing is registered globally, so tests and a reloaded daemon never see stale
series.

Two kinds of families: those read from the view must be collected on the event-loop thread
(`loop_families`, no locking); the build info and the heartbeat age are safe from any thread
(`thread_families`), so the HTTP server (metrics_server.py) can report a stuck loop.
"""
from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.exposition import choose_encoder

from linkguardd.census.wire import FAILURE_REASONS
from linkguardd.datagram import REJECT_REASONS
from linkguardd.monitors.phy import PHY_COUNTERS
from linkguardd.monitors.rdma_counters import ERROR_COUNTERS as RDMA_ERROR_COUNTERS
from linkguardd.shm.layout import LG_SHM_COMPAT_VERSION, LG_SHM_VERSION
from linkguardd.states import NOTE_REASONS, NicState, Reason
from linkguardd.verdicts.wire import VERDICTS
from linkguardd.view import DaemonView, NicView

# 50 µs .. 1 s: carrier-loss detection is expected well under 1 ms in the lab (issue 3 goal
# p99 <= 1 ms); the kernel's link-watch batching on real NICs can add up to about a second.
DETECTION_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                     100e-3, 250e-3, 500e-3, 1.0)
STATES = tuple(s.name.lower() for s in NicState)
ENTERED_STATES = tuple(s.name.lower() for s in NicState if s is not NicState.UNKNOWN)
# NONE is never a cause; notes (a job's verdict) are events without a transition
REASONS = tuple(r.name.lower() for r in Reason if r is not Reason.NONE and r not in NOTE_REASONS)
DOM_STATUSES = ("ok", "no_module", "undecodable")
LEVELS = ("high_alarm", "low_alarm", "high_warning", "low_warning")
# The per-kind error counters of struct rtnl_link_stats64 (linux/if_link.h): rx_errors and
# tx_errors are their totals (exported apart, below), so summing this family counts each error
# once. rx_missed_errors is counted in rx_dropped, not rx_errors: still an error of its own kind.
NETDEV_ERROR_COUNTERS = (
    "rx_length_errors", "rx_over_errors", "rx_crc_errors", "rx_frame_errors", "rx_fifo_errors",
    "rx_missed_errors", "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors",
    "tx_heartbeat_errors", "tx_window_errors")
ERROR_COUNTERS = frozenset(NETDEV_ERROR_COUNTERS + RDMA_ERROR_COUNTERS + PHY_COUNTERS)
TOTALS = {"rx_errors": "receive", "tx_errors": "transmit"}
# dom.common quantity -> (metric stem, unit)
QUANTITIES = {
    "temperature": ("temperature", "celsius"),
    "supply_voltage": ("supply_voltage", "volts"),
    "tx_bias": ("tx_bias_current", "amperes"),
    "tx_power": ("tx_power", "watts"),
    "rx_power": ("rx_power", "watts"),
}


class _Histogram:
    def __init__(self) -> None:
        self.buckets = [0] * len(DETECTION_BUCKETS)  # not cumulative; +Inf = count
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        index = bisect.bisect_left(DETECTION_BUCKETS, value)  # le: <= bound
        if index < len(DETECTION_BUCKETS):
            self.buckets[index] += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(DETECTION_BUCKETS, self.buckets):
            running += count
            out.append((repr(bound), running))
        return out + [("+Inf", self.count)]


class Metrics:
    """The daemon's metrics: counts fed by observe_transition(), the rest read from `view`.

    Counters and the histogram are plain numbers rendered at scrape time rather than
    prometheus_client Counter/Histogram objects: those add `_created` series whose suppression
    is a process-global switch, and a scrape should not depend on global state.
    """

    def __init__(self, view: DaemonView | None = None, version: str | None = None) -> None:
        self.view = view
        self.version = version or _package_version()
        self.transitions: dict[tuple[str, str], int] = {}  # (device, state entered) -> count
        self.reasons: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.detection: dict[str, _Histogram] = {}  # monitor -> fact-to-published latency

    def observe_transition(self, device: str, state: int, reason: int, monitor: str = "",
                           detection_seconds: float | None = None) -> None:
        """Count one transition; a detection time of None or 0 (not measured) is not observed."""
        key = (device, _name(NicState, state))
        self.transitions[key] = self.transitions.get(key, 0) + 1
        label = _name(Reason, reason)
        self.reasons[label] = self.reasons.get(label, 0) + 1
        if detection_seconds and monitor:
            self.detection.setdefault(monitor, _Histogram()).observe(detection_seconds)

    # --- rendering ----------------------------------------------------------------------------
    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of a whole scrape, built in the calling thread."""
        encoder, content_type = choose_encoder(accept or "")
        body = encode(self.thread_families(), encoder) + encode(self.loop_families(), encoder)
        return body + eof(content_type), content_type

    async def render_loop_part(self, encoder: Callable[[Any], bytes]) -> bytes:
        """The loop families, encoded one family at a time with the event loop let in between:
        a scrape of 8 NICs takes ~4 ms of CPU, which must not delay a link event that much."""
        chunks = []
        for family in self.loop_families():
            chunks.append(encode([family], encoder))
            await asyncio.sleep(0)
        return b"".join(chunks)

    def thread_families(self) -> Iterator[Metric]:
        build = InfoMetricFamily(
            "linkguard_build", "linkguardd version and the shared-memory ABI it writes.")
        build.add_metric([], {"version": self.version, "shm_version": str(LG_SHM_VERSION),
                              "shm_compat_version": str(LG_SHM_COMPAT_VERSION)})
        yield build
        if self.view is not None:
            heartbeat = GaugeMetricFamily(
                "linkguard_heartbeat_age_seconds",
                "Seconds since the event loop last wrote the shared-memory heartbeat, computed "
                "when scraped (NCCL plugins treat a stale one as no daemon).")
            heartbeat.add_metric([], self.view.heartbeat_age_s())
            yield heartbeat

    def loop_families(self) -> Iterator[Metric]:
        nics = self.view.nics() if self.view is not None else []
        monitors = dict(self.view.monitor_health()) if self.view is not None else {}
        yield from self._transition_families([n.name for n in nics], sorted(monitors))
        if self.view is not None:
            yield from _monitor_families(monitors)
            yield from _plugin_verdict_families(self.view, nics)
            yield from _plugin_census_families(self.view, nics)
            f = _NicFamilies()
            for nic in nics:
                f.add(nic)
            yield from f.all()

    def _transition_families(self, devices: list[str], monitors: list[str]) -> Iterator[Metric]:
        transitions = CounterMetricFamily(
            "linkguard_transitions", "NIC state transitions decided by the daemon, by NIC and "
            "the state entered.", labels=["device", "state"])
        known = devices or sorted({d for d, _ in self.transitions})
        for device in known:  # every (NIC, state) from the first scrape: increase() works
            for state in ENTERED_STATES:
                transitions.add_metric([device, state], self.transitions.get((device, state), 0))
        yield transitions
        reasons = CounterMetricFamily(
            "linkguard_transition_reasons", "NIC state transitions by reason, all NICs.",
            labels=["reason"])
        for reason, count in self.reasons.items():
            reasons.add_metric([reason], count)
        yield reasons
        latency = HistogramMetricFamily(
            "linkguard_detection_latency_seconds",
            "From a monitor observing the fact behind a transition (a netlink notification, a "
            "sysfs or module read) to the new state in shared memory, by monitor. A NIC's first "
            "state, the hold-down timer's and operators' transitions are not observed.",
            labels=["monitor"])
        for monitor in sorted(set(monitors) | set(self.detection)):
            hist = self.detection.get(monitor, _Histogram())
            latency.add_metric([monitor], hist.cumulative(), sum_value=hist.sum)
        yield latency


def encode(families: Iterable[Metric], encoder: Callable[[Any], bytes]) -> bytes:
    """The families in the encoder's format, without OpenMetrics' closing # EOF."""
    out = encoder(_Families(list(families)))
    return out.removesuffix(_OPENMETRICS_EOF)


def eof(content_type: str) -> bytes:
    return _OPENMETRICS_EOF if content_type.startswith("application/openmetrics-text") else b""


_OPENMETRICS_EOF = b"# EOF\n"


class _Families:
    """A registry-shaped wrapper, so an encoder writes the families given."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _name(enum: Any, value: int) -> str:
    try:
        return str(enum(value).name.lower())
    except ValueError:
        return f"{enum.__name__.lower()}_{int(value)}"


def _monitor_families(health: dict[str, Any]) -> Iterator[Metric]:
    success = GaugeMetricFamily(
        "linkguard_monitor_success", "1 if the monitor's last scan or read worked; absent "
        "hardware counts as success.", labels=["monitor"])
    errors = CounterMetricFamily(
        "linkguard_monitor_errors", "Failed scans or reads of the monitor since the daemon "
        "started (monitor_success shows only the last one).", labels=["monitor"])
    duration = GaugeMetricFamily(
        "linkguard_monitor_duration_seconds", "Duration of the monitor's last scan or read.",
        labels=["monitor"])
    for name, h in sorted(health.items()):
        success.add_metric([name], 1.0 if h.success else 0.0)
        errors.add_metric([name], h.errors)
        duration.add_metric([name], h.last_duration_s)
    yield success
    yield errors
    yield duration


def _plugin_verdict_families(view: DaemonView, nics: list[NicView]) -> Iterator[Metric]:
    accepted, rejected = view.plugin_verdict_counts()
    verdicts = CounterMetricFamily(
        "linkguard_plugin_verdicts", "Verdicts on a NIC reported by jobs' NCCL plugins, by NIC "
        "and verdict (stalled, lossy, slow, healthy); they never change the NIC's state.",
        labels=["device", "verdict"])
    for nic in nics:  # every pair from the first scrape, so increase() sees the first report
        for verdict in VERDICTS:
            verdicts.add_metric([nic.name, verdict], accepted.get((nic.name, verdict), 0))
    yield verdicts
    rejects = CounterMetricFamily(
        "linkguard_plugin_verdict_rejects", "Datagrams on the verdict socket that were not "
        "taken, by reason (garbage, an unknown NIC, a sender over its rate).", labels=["reason"])
    for reason in REJECT_REASONS:
        rejects.add_metric([reason], rejected.get(reason, 0))
    yield rejects
    gray = GaugeMetricFamily(
        "linkguard_nic_plugin_gray_reporters", "Processes whose unexpired report calls the NIC "
        "stalled, lossy or slow (0: not gray).", labels=["device"])
    for nic in nics:
        gray.add_metric([nic.name], len(nic.plugin_verdicts))
    yield gray


ROLES = ("primary", "backup", "away", "standing")  # census/store.py NicTraffic


def _plugin_census_families(view: DaemonView, nics: list[NicView]) -> Iterator[Metric]:
    """Jobs' connections (census/store.py): every monitored NIC from the first scrape, no pid
    or job label (those go to `linkguard-cli jobs`), so the series stay as few as the NICs."""
    processes, rejected = view.census_counts()
    connections = GaugeMetricFamily(
        "linkguard_plugin_connections", "Connections of jobs' NCCL plugins by NIC and role: "
        "primary/backup = their data runs on this NIC on their primary/backup path; away = "
        "their primary is this NIC and their data is on the backup; standing = standby paths "
        "up on this NIC.", labels=["device", "role"])
    failovers = CounterMetricFamily(
        "linkguard_plugin_failovers", "Times jobs' connections moved their data off a path on "
        "this NIC (reported by their plugins).", labels=["device"])
    reintegrations = CounterMetricFamily(
        "linkguard_plugin_reintegrations", "Times jobs' connections moved their data back to "
        "their primary path on this NIC.", labels=["device"])
    failures = CounterMetricFamily(
        "linkguard_plugin_connection_failures", "Jobs' connections that failed, by the NIC of "
        "their primary path and reason (no_path: no healthy path left; peer: the peer closed "
        "or vanished; timeout: the dead timeout; other).", labels=["device", "reason"])
    for nic in nics:
        t = nic.traffic
        for role in ROLES:
            connections.add_metric([nic.name, role], getattr(t, role))
        failovers.add_metric([nic.name], t.failovers)
        reintegrations.add_metric([nic.name], t.reintegrations)
        for reason in FAILURE_REASONS:
            failures.add_metric([nic.name, reason], t.failures.get(reason, 0))
    yield connections
    count = GaugeMetricFamily(
        "linkguard_plugin_processes", "Processes whose NCCL plugin reports its connections "
        "(forgotten plugin_census_ttl_s after their last report, or when they exit).")
    count.add_metric([], processes)
    yield count
    yield failovers
    yield reintegrations
    yield failures
    rejects = CounterMetricFamily(
        "linkguard_plugin_census_rejected", "Census datagrams on the verdict socket that were "
        "not taken, by reason (garbage, a sender over its rate).", labels=["reason"])
    for reason in REJECT_REASONS:
        rejects.add_metric([reason], rejected.get(reason, 0))
    yield rejects


def _split_flag(flag: str) -> tuple[str, str]:
    """"rx_los[2]" -> ("rx_los", "2"); a module-wide flag has lane ""."""
    name, sep, lane = flag.partition("[")
    return (name, lane.rstrip("]")) if sep else (flag, "")


class _NicFamilies:
    def __init__(self) -> None:
        g, c = GaugeMetricFamily, CounterMetricFamily
        dev = ["device"]
        self.info = InfoMetricFamily(
            "linkguard_nic", "A monitored NIC, its backup NIC, its backup set (nearest first, "
            "joined by +) and RDMA device.", labels=dev)
        self.state = StateSetMetricFamily(
            "linkguard_nic_state", "Health state of the NIC as the daemon decided it.",
            labels=dev)
        self.carrier = g("linkguard_nic_carrier", "1 if the NIC has carrier.", labels=dev)
        self.carrier_changes = c("linkguard_nic_carrier_changes",
                                 "Carrier changes counted by the kernel.", labels=dev)
        self.errors = c(
            "linkguard_nic_errors", "Link errors by kind: netlink link statistics (rx_crc_errors"
            ", ...; not their totals rx_errors, tx_errors), RDMA port and transport counters "
            "(symbol_error, packet_seq_err, ...), FEC blocks and PCS symbol errors "
            "(fec_uncorrectable_blocks, ...).", labels=["device", "counter"])
        self.totals = {key: c(f"linkguard_nic_{word}_errors",
                              f"All {word} errors of the netdev ({key}, which includes its "
                              "kinds in linkguard_nic_errors_total).", labels=dev)
                       for key, word in TOTALS.items()}
        self.last_transition = g(
            "linkguard_nic_last_transition_timestamp_seconds",
            "When the NIC entered its current state (Unix time).", labels=dev)
        self.flap_penalty = g("linkguard_nic_flap_penalty",
                              "Current flap-damping penalty (decays with a half-life).",
                              labels=dev)
        self.module = InfoMetricFamily(
            "linkguard_transceiver", "The optical module plugged into the NIC.", labels=dev)
        self.module_status = StateSetMetricFamily(
            "linkguard_transceiver_status", "Whether the module's diagnostics could be read.",
            labels=dev)
        self.flags = c(
            "linkguard_transceiver_flags",
            "Module reads that returned a latched flag (alarm, warning, LOS, fault), by flag and "
            "lane (\"\" for the module). The daemon's reads clear the latch.",
            labels=["device", "flag", "lane"])
        self.readings: dict[str, GaugeMetricFamily] = {}
        self.thresholds: dict[str, GaugeMetricFamily] = {}
        for quantity, (stem, unit) in QUANTITIES.items():
            lanes = quantity.startswith(("tx_", "rx_"))
            self.readings[quantity] = g(
                f"linkguard_transceiver_{stem}_{unit}",
                f"Module {stem.replace('_', ' ')} reading" + (", per lane" if lanes else "")
                + ".", labels=["device", "lane"] if lanes else dev)
            self.thresholds[quantity] = g(
                f"linkguard_transceiver_{stem}_threshold_{unit}",
                f"The module's own {stem.replace('_', ' ')} alarm and warning limits.",
                labels=["device", "level"])

    def add(self, nic: NicView) -> None:
        n = nic.name
        self.info.add_metric([n], {"backup": nic.backup, "backup_set": "+".join(nic.backup_set),
                                   "rdma_device": nic.rdma_device})
        self.state.add_metric([n], {s: nic.state == i for i, s in enumerate(STATES)})
        self.carrier.add_metric([n], 1.0 if nic.carrier else 0.0)
        counters = nic.counters
        if "carrier_changes" in counters:
            self.carrier_changes.add_metric([n], counters["carrier_changes"])
        for name, value in sorted(counters.items()):
            if name in ERROR_COUNTERS and value >= 0:
                self.errors.add_metric([n, name], value)
            elif name in TOTALS and value >= 0:
                self.totals[name].add_metric([n], value)
        self.last_transition.add_metric([n], nic.since_unix)
        self.flap_penalty.add_metric([n], nic.flap_penalty)
        self.module_status.add_metric([n], {s: nic.dom_status == s for s in DOM_STATUSES})
        for flag, count in sorted(nic.dom_flags_seen.items()):
            self.flags.add_metric([n, *_split_flag(flag)], count)
        if nic.dom is not None:
            self._add_module(n, nic.dom)

    def _add_module(self, n: str, diag: Any) -> None:
        self.module.add_metric([n], {
            "identifier": diag.identifier_name, "spec": diag.spec, "vendor": diag.vendor,
            "part_number": diag.part_number, "serial": diag.serial_number})
        for quantity, value in diag.readings().items():
            if value is None:
                continue
            if isinstance(value, tuple):
                for lane, v in enumerate(value, 1):
                    self.readings[quantity].add_metric([n, str(lane)], v)
            else:
                self.readings[quantity].add_metric([n], value)
        for quantity, limits in sorted(diag.thresholds.items()):
            values = [limits.get(level) for level in LEVELS]
            known = [v for v in values if v is not None]
            if quantity not in self.thresholds or not known or max(known) == min(known):
                continue  # an all-zero set: the module provides no limits
            for level, v in zip(LEVELS, values):
                if v is not None:
                    self.thresholds[quantity].add_metric([n, level], v)

    def all(self) -> Iterator[Metric]:
        yield from (self.info, self.state, self.carrier, self.carrier_changes, self.errors,
                    *self.totals.values(), self.last_transition, self.flap_penalty,
                    self.module, self.module_status, self.flags)
        yield from self.readings.values()
        yield from self.thresholds.values()


def _package_version() -> str:
    try:
        return metadata.version("linkguard")
    except metadata.PackageNotFoundError:
        return "unknown"
