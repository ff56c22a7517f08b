"""The exporters the daemon feeds, as an explicit table (one line each; a test checks that every
module in this package that defines an exporter appears here). Adding a consumer of the
daemon's decisions is one module here and one line below; the engine does not change.
"""
from __future__ import annotations

from linkguardd.exporters.base import EngineState, Exporter, ExporterFactory, Update
from linkguardd.exporters.history import HistoryExporter
from linkguardd.exporters.log import LogExporter
from linkguardd.exporters.metrics import MetricsExporter
from linkguardd.exporters.shm import ShmExporter

# Started in this order, stopped in reverse; every update reaches them in this order. "shm"
# is first: it is the publication, and the others report the change as published.
EXPORTERS: tuple[tuple[str, ExporterFactory], ...] = (
    ("shm", ShmExporter),
    ("history", HistoryExporter),
    ("log", LogExporter),
    ("metrics", MetricsExporter),
)


def build_exporters(state: EngineState) -> list[Exporter]:
    return [factory(state) for _, factory in EXPORTERS]


__all__ = ["EXPORTERS", "EngineState", "Exporter", "Update", "build_exporters"]
