"""Exporter "metrics": counts every transition for /metrics and serves the endpoint.

The rest of a scrape is read from the daemon's view (engine_view.py), handed over with
`read_from()` once it exists (core.py): the view reads the engine this exporter is handed to.

Failover must never depend on the metrics port: a bind failure is logged and the daemon goes on.
"""
from __future__ import annotations

import logging

from linkguardd.exporters.base import EngineState, Update
from linkguardd.metrics import Metrics
from linkguardd.metrics_server import MetricsError, MetricsServer
from linkguardd.states import NOTE_REASONS, NicState
from linkguardd.view import DaemonView

log = logging.getLogger(__name__)


class MetricsExporter:
    name = "metrics"

    def __init__(self, version: str | None = None) -> None:
        self.metrics = Metrics(None, version)  # counts only until read_from()
        self.server: MetricsServer | None = None

    def read_from(self, view: DaemonView) -> None:
        """Scrapes report the NICs, monitors, verdicts and census `view` shows."""
        self.metrics.view = view

    async def start(self, state: EngineState) -> None:
        address = state.settings.metrics_address
        if not address:
            return
        server = MetricsServer(self.metrics, address)
        try:
            await server.start()
        except MetricsError as exc:
            log.error("metrics disabled: %s", exc)
            return
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    def export(self, update: Update) -> None:
        seconds = update.detection_ns / 1e9
        for ev in update.events():
            if ev.reason in NOTE_REASONS:  # no state change: counted by plugin_verdicts_total
                continue
            # a NIC's first state is found, not detected: it stays out of the latency
            found = ev.old_state == NicState.UNKNOWN
            self.metrics.observe_transition(ev.nic, ev.new_state, ev.reason, update.monitor,
                                            None if found else seconds)
