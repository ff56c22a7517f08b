"""The daemon's core put together: monitors -> engine (the policy) -> exporters, and the view
that the API and /metrics read (engine_view.py).

Each part is handed what it uses, in this order: the exporters are made first and handed to
the engine, the view is made over the engine and the two exporters it reads, and the metrics
exporter is then handed the view its scrapes report (the one loop: /metrics reads the engine
that feeds it).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from linkguardd.engine import BackupSets, Engine
from linkguardd.engine_view import EngineView
from linkguardd.exporters import Exporter, Exporters
from linkguardd.monitors.base import Monitor
from linkguardd.settings import Settings


@dataclass(frozen=True)
class Core:
    engine: Engine  # start() and stop() it; reload() on SIGHUP
    view: EngineView  # what the operator surfaces read
    exporters: Exporters


def build_core(settings: Settings, ifnames: Sequence[str], backups: BackupSets,
               monitors: Iterable[Monitor], clock: Callable[[], int] = time.monotonic_ns,
               extra: Sequence[Exporter] = ()) -> Core:
    """`extra` exporters (a test's) receive every update after the daemon's own."""
    exporters = Exporters()
    engine = Engine(settings, ifnames, backups, monitors, [*exporters.in_order(), *extra],
                    clock=clock)
    view = EngineView(engine, exporters.history, exporters.shm)
    exporters.metrics.read_from(view)
    return Core(engine, view, exporters)
