"""The exporters the daemon feeds, as an explicit table (one field each; a test checks that every
module in this package that defines an exporter appears here). Adding a consumer of the
daemon's decisions is one module here and one field below; the engine does not change.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from linkguardd.exporters.base import EngineState, Exporter, Update
from linkguardd.exporters.history import HistoryExporter
from linkguardd.exporters.log import LogExporter
from linkguardd.exporters.metrics import MetricsExporter
from linkguardd.exporters.shm import ShmExporter


@dataclass(frozen=True)
class Exporters:
    """The daemon's exporters, made before the engine and handed to it (`in_order()`, core.py). The
    fields are the table: each is named after its module, and the engine starts them in this
    order, stops them in reverse, and every update reaches them in this order. "shm" is first:
    it is the publication, and the others report the change as published. The view
    (engine_view.py) reads the history and the heartbeat from the fields by name."""

    shm: ShmExporter = field(default_factory=ShmExporter)
    history: HistoryExporter = field(default_factory=HistoryExporter)
    log: LogExporter = field(default_factory=LogExporter)
    metrics: MetricsExporter = field(default_factory=MetricsExporter)

    def in_order(self) -> list[Exporter]:
        return [getattr(self, f.name) for f in fields(self)]


__all__ = ["EngineState", "Exporter", "Exporters", "Update"]
