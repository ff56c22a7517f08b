"""Prometheus /metrics: per-NIC health, optics and counters read from a DaemonView at scrape time,
plus the engine's transition counter and detection-latency histogram.

Names follow Prometheus conventions (nic-monitoring.md §4): prefix `linkguard_`, base units
(celsius, volts, amperes, watts, seconds), counters end in `_total`. Each metric has one unit, so
the module thresholds are one gauge per quantity with a `level` label, named like the reading
they bound (linkguard_transceiver_rx_power_threshold_watts{level="low_warning"}), which lets
PromQL compare a lane's reading with its limit. The registry is this object's own: nothing is
registered globally, so tests and a reloaded daemon never see stale series.

Served by a small asyncio HTTP server on the daemon's event loop (MetricsServer): the collector
then reads the view on the same thread that changes it, with no locking.
"""
from __future__ import annotations

import asyncio
import bisect
import gzip
import logging
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.exposition import choose_encoder

from linkguardd.states import NicState, Reason
from linkguardd.view import DaemonView, NicView

log = logging.getLogger(__name__)

# 50 µs .. 1 s: carrier-loss detection is expected well under 1 ms in the lab (issue 3 goal
# p99 <= 1 ms); the kernel's link-watch batching on real NICs can add up to about a second.
DETECTION_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                     100e-3, 250e-3, 500e-3, 1.0)
STATES = tuple(s.name.lower() for s in NicState)
DOM_STATUSES = ("ok", "no_module", "undecodable")
LEVELS = ("high_alarm", "low_alarm", "high_warning", "low_warning")
# counter keys in NicView.counters that are not error counters
NON_ERROR_COUNTERS = frozenset({"carrier_changes", "carrier_up_count", "carrier_down_count"})
# dom.common quantity -> (metric stem, unit)
QUANTITIES = {
    "temperature": ("temperature", "celsius"),
    "supply_voltage": ("supply_voltage", "volts"),
    "tx_bias": ("tx_bias_current", "amperes"),
    "tx_power": ("tx_power", "watts"),
    "rx_power": ("rx_power", "watts"),
}


class Metrics:
    """The daemon's metrics. Create it, hand `on_transition` to the engine, attach the view.

    The transition counter and latency histogram are plain numbers rendered at scrape time
    rather than prometheus_client Counter/Histogram objects: those add `_created` series whose
    suppression is a process-global switch, and a scrape should not depend on global state.
    """

    def __init__(self, view: DaemonView | None = None, version: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # every reason present from the first scrape, so rate() and increase() work at once
        # (NONE is "no reason recorded", never the reason of a transition)
        self.transitions: dict[str, int] = {
            r.name.lower(): 0 for r in Reason if r is not Reason.NONE
        }
        self.detection_buckets = [0] * len(DETECTION_BUCKETS)  # not cumulative; +Inf = count
        self.detection_count = 0
        self.detection_sum = 0.0
        self._collector = DaemonCollector(self, view, version or _package_version())
        self.registry.register(self._collector)

    def attach(self, view: DaemonView) -> None:
        """Read `view` at scrape time (the engine is built after the metrics it reports into)."""
        self._collector.view = view

    def observe_transition(self, reason: int, detection_seconds: float | None = None) -> None:
        """Count one transition; a detection time of None or 0 (not measured) is not observed."""
        try:
            label = Reason(reason).name.lower()
        except ValueError:
            label = f"reason_{int(reason)}"
        self.transitions[label] = self.transitions.get(label, 0) + 1
        if detection_seconds:
            self.detection_count += 1
            self.detection_sum += detection_seconds
            index = bisect.bisect_left(DETECTION_BUCKETS, detection_seconds)  # le: <= bound
            if index < len(DETECTION_BUCKETS):
                self.detection_buckets[index] += 1

    def on_transition(self, transition: Any, detected_ns: int) -> None:
        """Engine(on_transition=...) callback: (policy.Transition, detection ns or 0)."""
        self.observe_transition(int(transition.reason), detected_ns / 1e9 if detected_ns else None)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape; OpenMetrics when the scraper asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    async def render_async(self, accept: str | None = None) -> tuple[bytes, str]:
        """render(), encoded one family at a time with the event loop let in between: a whole
        scrape of 8 NICs takes ~4 ms of CPU, which must not delay a link event that much."""
        encoder, content_type = choose_encoder(accept or "")
        chunks = []
        for family in self.registry.collect():
            chunk = encoder(_OneFamily(family))
            chunks.append(chunk.removesuffix(_OPENMETRICS_EOF))  # once, at the very end
            await asyncio.sleep(0)
        if content_type.startswith("application/openmetrics-text"):
            chunks.append(_OPENMETRICS_EOF)
        return b"".join(chunks), content_type

    def engine_families(self) -> Iterator[Metric]:
        transitions = CounterMetricFamily(
            "linkguard_transitions", "NIC state transitions decided by the daemon, by reason.",
            labels=["reason"])
        for reason, count in self.transitions.items():
            transitions.add_metric([reason], count)
        yield transitions
        cumulative, running = [], 0
        for bound, count in zip(DETECTION_BUCKETS, self.detection_buckets):
            running += count
            cumulative.append((repr(bound), running))
        cumulative.append(("+Inf", self.detection_count))
        yield HistogramMetricFamily(
            "linkguard_detection_latency_seconds",
            "Time from a monitor observing a fact to the resulting state being published.",
            buckets=cumulative, sum_value=self.detection_sum)


_OPENMETRICS_EOF = b"# EOF\n"


class _OneFamily:
    """A registry-shaped wrapper, so an encoder writes a single family."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterable[Metric]:
        return [self.family]


class DaemonCollector:
    """Per-NIC and daemon gauges, built from the view at each scrape."""

    def __init__(self, metrics: Metrics, view: DaemonView | None, version: str) -> None:
        self.metrics = metrics
        self.view = view
        self.version = version

    def describe(self) -> Iterable[Metric]:
        return []  # names depend on what the view holds; nothing to pre-declare

    def collect(self) -> Iterator[Metric]:
        build = InfoMetricFamily("linkguard_build", "linkguardd version.")
        build.add_metric([], {"version": self.version})
        yield build
        yield from self.metrics.engine_families()
        if self.view is None:
            return
        yield from _daemon_families(self.view)
        yield from _nic_families(self.view.nics())


def _daemon_families(view: DaemonView) -> Iterator[Metric]:
    heartbeat = GaugeMetricFamily(
        "linkguard_heartbeat_age_seconds",
        "Seconds since the shared-memory heartbeat was written (NCCL plugins give up on a "
        "stale one).")
    heartbeat.add_metric([], view.heartbeat_age_s())
    yield heartbeat
    success = GaugeMetricFamily(
        "linkguard_monitor_success", "1 if the monitor's last scan or read worked; absent "
        "hardware counts as success.", labels=["monitor"])
    duration = GaugeMetricFamily(
        "linkguard_monitor_duration_seconds", "Duration of the monitor's last scan or read.",
        labels=["monitor"])
    for name, health in sorted(view.monitor_health().items()):
        success.add_metric([name], 1.0 if health.success else 0.0)
        duration.add_metric([name], health.last_duration_s)
    yield success
    yield duration


def _nic_families(nics: list[NicView]) -> Iterator[Metric]:
    f = _NicFamilies()
    for nic in nics:
        f.add(nic)
    yield from f.all()


class _NicFamilies:
    def __init__(self) -> None:
        g, c = GaugeMetricFamily, CounterMetricFamily
        self.info = InfoMetricFamily(
            "linkguard_nic", "A monitored NIC, its backup NIC and RDMA device.",
            labels=["nic"])
        self.state = StateSetMetricFamily(
            "linkguard_nic_state", "Health state of the NIC as the daemon decided it.",
            labels=["nic"])
        self.carrier = g("linkguard_nic_carrier", "1 if the NIC has carrier.", labels=["nic"])
        self.carrier_changes = c("linkguard_nic_carrier_changes",
                                 "Carrier changes counted by the kernel.", labels=["nic"])
        self.errors = c("linkguard_nic_errors", "Link error counters (netlink link statistics, "
                        "RDMA port counters), by counter name.", labels=["nic", "counter"])
        self.last_transition = g(
            "linkguard_nic_last_transition_timestamp_seconds",
            "When the NIC entered its current state (Unix time).", labels=["nic"])
        self.flap_penalty = g("linkguard_nic_flap_penalty",
                              "Current flap-damping penalty (decays with a half-life).",
                              labels=["nic"])
        self.module = InfoMetricFamily(
            "linkguard_transceiver", "The optical module plugged into the NIC.",
            labels=["nic"])
        self.module_status = StateSetMetricFamily(
            "linkguard_transceiver_status", "Whether the module's diagnostics could be read.",
            labels=["nic"])
        self.readings: dict[str, GaugeMetricFamily] = {}
        self.thresholds: dict[str, GaugeMetricFamily] = {}
        for quantity, (stem, unit) in QUANTITIES.items():
            lanes = quantity.startswith(("tx_", "rx_"))
            self.readings[quantity] = g(
                f"linkguard_transceiver_{stem}_{unit}",
                f"Module {stem.replace('_', ' ')} reading" + (", per lane" if lanes else "")
                + ".", labels=["nic", "lane"] if lanes else ["nic"])
            self.thresholds[quantity] = g(
                f"linkguard_transceiver_{stem}_threshold_{unit}",
                f"The module's own {stem.replace('_', ' ')} alarm and warning limits.",
                labels=["nic", "level"])

    def add(self, nic: NicView) -> None:
        n = nic.name
        self.info.add_metric([n], {"backup": nic.backup, "rdma_device": nic.rdma_device})
        self.state.add_metric([n], {s: nic.state == i for i, s in enumerate(STATES)})
        self.carrier.add_metric([n], 1.0 if nic.carrier else 0.0)
        if "carrier_changes" in nic.counters:
            self.carrier_changes.add_metric([n], nic.counters["carrier_changes"])
        for name, value in sorted(nic.counters.items()):
            if name not in NON_ERROR_COUNTERS and value >= 0:
                self.errors.add_metric([n, name], value)
        self.last_transition.add_metric([n], nic.since_unix)
        self.flap_penalty.add_metric([n], nic.flap_penalty)
        self.module_status.add_metric([n], {s: nic.dom_status == s for s in DOM_STATUSES})
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
                    self.last_transition, self.flap_penalty, self.module, self.module_status)
        yield from self.readings.values()
        yield from self.thresholds.values()


def _package_version() -> str:
    try:
        return metadata.version("linkguard")
    except metadata.PackageNotFoundError:
        return "unknown"


# ---- HTTP ------------------------------------------------------------------------------------
_READ_TIMEOUT_S = 10.0  # a scraper sends its request at once; a silent client is dropped
_LANDING = (b"<html><head><title>linkguardd</title></head><body><h1>linkguardd</h1>"
            b'<p><a href="/metrics">Metrics</a></p></body></html>\n')


class MetricsError(RuntimeError):
    """The /metrics endpoint could not start."""


def parse_address(address: str) -> tuple[str | None, int]:
    """"host:port", "[v6]:port" or ":port" (all interfaces) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or None, int(port)


class MetricsServer:
    """`await start()` / `await stop()`; serves GET /metrics (and a landing page at /)."""

    def __init__(self, metrics: Metrics, address: str) -> None:
        self.metrics = metrics
        self.host, self.port = parse_address(address)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen; MetricsError says which address failed (e.g. the port is taken)."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            raise MetricsError(
                f"cannot serve /metrics on {self.host or '*'}:{self.port}: {exc.strerror or exc}"
                " (set metrics_address, or empty to disable)") from exc
        self.port = self._server.sockets[0].getsockname()[1]  # the real one when 0 was asked
        log.info("metrics: serving http://%s:%d/metrics", self.host or "*", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            status, headers, body = await self._respond(head.decode("latin-1"))
            lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()),
                     f"Content-Length: {len(body)}", "Connection: close", "", ""]
            writer.write("\r\n".join(lines).encode("latin-1"))
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # the client went away or never sent a request: nothing to answer
        finally:
            writer.close()

    async def _respond(self, head: str) -> tuple[str, dict[str, str], bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split(" ")
        headers = {}
        for line in header_lines:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", {"Allow": "GET, HEAD"}, b"only GET and HEAD\n"
        path = parts[1].split("?", 1)[0]
        if path == "/":
            return "200 OK", {"Content-Type": "text/html; charset=utf-8"}, _LANDING
        if path != "/metrics":
            return "404 Not Found", {"Content-Type": "text/plain"}, b"try /metrics\n"
        try:
            body, content_type = await self.metrics.render_async(headers.get("accept"))
        except Exception as exc:  # a bug in a collector must not kill the server: say it
            log.exception("metrics: scrape failed")
            return "500 Internal Server Error", {"Content-Type": "text/plain"}, \
                f"scrape failed: {exc}\n".encode()
        out = {"Content-Type": content_type}
        if "gzip" in headers.get("accept-encoding", ""):
            body = gzip.compress(body, compresslevel=1)  # Prometheus asks for gzip
            out["Content-Encoding"] = "gzip"
        return "200 OK", out, body
