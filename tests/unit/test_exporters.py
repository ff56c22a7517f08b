"""The exporter table and the one way a change reaches its consumers; the monitor table."""
from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import pkgutil
import time
from dataclasses import fields
from pathlib import Path

import pytest

import linkguardd.exporters as exporters_pkg
import linkguardd.monitors as monitors_pkg
from linkguardd.core import build_core
from linkguardd.engine import Engine
from linkguardd.engine_view import EngineView
from linkguardd.exporters import Exporters, Update
from linkguardd.exporters.base import EngineState
from linkguardd.exporters.history import HistoryExporter
from linkguardd.exporters.shm import ShmExporter, next_beat
from linkguardd.facts import LinkFact
from linkguardd.monitors import MONITORS
from linkguardd.settings import Settings
from linkguardd.shm.layout import NicEntry
from linkguardd.shm.reader import ShmReader
from linkguardd.states import NicState
from linkguardd.view import WATCH_QUEUE_EVENTS, EventView, FellBehind, NicView


def defined_classes(package: object, *methods: str) -> dict[str, list[type]]:
    """module name -> classes defined in it that have all of `methods`."""
    out: dict[str, list[type]] = {}
    for info in pkgutil.iter_modules(package.__path__):  # type: ignore[attr-defined]
        if info.name == "base":
            continue  # the interfaces themselves
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found = [c for _, c in inspect.getmembers(module, inspect.isclass)
                 if c.__module__ == module.__name__ and all(hasattr(c, m) for m in methods)]
        if found:
            out[info.name] = found
    return out


def test_every_exporter_module_is_in_the_table() -> None:
    found = defined_classes(exporters_pkg, "start", "export", "stop")
    table = {f.name: type(getattr(Exporters(), f.name)) for f in fields(Exporters)}
    assert set(found) == set(table), "a module defines an exporter the table does not name"
    for module, classes in found.items():
        assert table[module] in classes and table[module].name == module


def test_every_monitor_module_is_in_the_table() -> None:
    found = defined_classes(monitors_pkg, "start", "stop", "name")
    assert set(found) == {name for name, _ in MONITORS}
    assert all(c.name == module for module, classes in found.items() for c in classes)


def test_the_publication_comes_first() -> None:
    exporters = Exporters()
    assert isinstance(exporters.in_order()[0], ShmExporter)
    assert [e.name for e in exporters.in_order()] == [f.name for f in fields(Exporters)]


class Recorder:
    """An exporter a test adds without touching the engine."""

    name = "recorder"

    def __init__(self, log: list[tuple[str, Update]], tag: str) -> None:
        self.log, self.tag = log, tag

    async def start(self, state: EngineState) -> None:
        self.state = state

    async def stop(self) -> None:
        pass

    def export(self, update: Update) -> None:
        self.log.append((self.tag, update))


def settings_in(directory: Path) -> Settings:
    return Settings(interfaces=("rail0", "rail1"), shm_path=str(directory / "shm"),
                    state_dir="",
                    sysfs_root=str(directory), metrics_address="")


def test_one_update_reaches_every_exporter_once_in_table_order(tmp_path: Path) -> None:
    seen: list[tuple[str, Update]] = []
    recorder = Recorder(seen, "last")

    async def main() -> None:
        engine = build_core(settings_in(tmp_path), ["rail0", "rail1"], {}, [],
                            extra=[recorder]).engine
        await engine.start()
        assert recorder.state is engine  # the engine hands over its state when it starts one
        try:
            seen.clear()
            engine.on_fact(LinkFact("rail0", time.monotonic_ns(), admin_up=True, carrier=True,
                                    operstate="UP"), "netlink")
        finally:
            await engine.stop()

    asyncio.run(main())
    assert len(seen) == 1
    update = seen[0][1]
    assert [(tr.ifname, tr.new) for tr in update.transitions] == [("rail0", NicState.RECOVERING)]
    assert update.monitor == "netlink" and update.published_ns is not None


def test_every_consumer_reports_the_same_published_transition(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """shm, history, log and metrics see one change with one seq and one detection time,
    measured from the monitor's fact to the shm publication."""
    async def main() -> tuple[list[object], float, object]:
        core = build_core(settings_in(tmp_path), ["rail0", "rail1"], {}, [])
        engine = core.engine
        await engine.start()
        try:
            head = engine.next_seq
            fact_ns = time.monotonic_ns()
            with caplog.at_level(logging.INFO, logger="linkguardd.transition"):
                engine.on_fact(LinkFact("rail0", fact_ns, admin_up=True, carrier=True,
                                        operstate="UP"), "netlink")
            with ShmReader(engine.settings.shm_path) as reader:
                ring, _, _ = reader.events_since(head - 1)
            history, metrics = core.exporters.history, core.exporters.metrics
            return [e for e in history.since(head - 1)], \
                metrics.metrics.detection["netlink"].sum, ring
        finally:
            await engine.stop()

    events, latency_s, ring = asyncio.run(main())
    assert [(e.nic, e.new_state) for e in events] == [("rail0", NicState.RECOVERING)]
    event = events[0]
    assert [(e.seq, e.name) for e in ring] == [(event.seq, "rail0")]  # type: ignore[attr-defined]
    assert event.detection_ns > 0 and latency_s == event.detection_ns / 1e9
    logged = [r.fields for r in caplog.records  # type: ignore[attr-defined]
              if r.getMessage() == "transition" and r.fields["seq"] == event.seq]
    assert [(f["nic"], f["to"], f["detect_us"]) for f in logged] == [
        ("rail0", "RECOVERING", round(event.detection_ns / 1000, 1))]


def test_the_engine_names_no_consumer() -> None:
    """Adding a consumer is a module in exporters/ and a field in Exporters: the engine is
    handed its exporters and goes through them by their interface only; the view reads the
    history and the heartbeat from the exporters it is handed."""
    assert "for exporter in self.exporters" in inspect.getsource(Engine._publish)
    engine_source = inspect.getsource(Engine)
    for f in fields(Exporters):
        kind = type(getattr(Exporters(), f.name)).__name__
        assert kind not in engine_source and f'"{f.name}"' not in engine_source
    assert "self.engine.exporters" not in inspect.getsource(EngineView)


def test_the_view_reads_the_exporters_it_was_handed(tmp_path: Path) -> None:
    """The view's history and heartbeat are the ones it was given, not the engine's first
    exporter of a class: a second history exporter handed to the engine is not read."""
    other = HistoryExporter()
    core = build_core(settings_in(tmp_path), ["rail0"], {}, [], extra=[other])

    async def main() -> tuple[int, int, float]:
        await core.engine.start()
        try:
            other.events.clear()  # only the view's own history keeps the start-up events
            return len(core.view.events_since(0)), len(other.events), \
                core.view.heartbeat_age_s()
        finally:
            await core.engine.stop()

    seen, others, age = asyncio.run(main())
    assert core.view.history is core.exporters.history
    assert seen >= 1 and others == 0
    assert 0 <= age < 1.0  # the shm exporter's heartbeat, written at its start


def test_the_shm_file_is_created_and_removed_by_its_exporter(tmp_path: Path) -> None:
    async def main() -> bool:
        engine = build_core(settings_in(tmp_path), ["rail0"], {}, []).engine
        await engine.start()
        exists = os.path.exists(engine.settings.shm_path)
        await engine.stop()
        return exists

    assert asyncio.run(main()) and not (tmp_path / "shm").exists()


def test_a_watchers_queue_is_bounded_and_cut_off_when_it_is_not_read() -> None:
    """Issue 30, finding 3: an unread watcher holds at most WATCH_QUEUE_EVENTS events; past
    that its queue is emptied at once and its next read says where to resume."""
    history = HistoryExporter()
    events = [EventView(seq, "rail0", 1, 2, 0, "", seq, 0.0, 0)
              for seq in range(1, 3 * WATCH_QUEUE_EVENTS)]

    async def main() -> tuple[int, int, int]:
        reader, stuck = history.subscribe(), history.subscribe()
        history.export(Update((), 1, False, 0.0, _events=tuple(events[:2])))
        await reader.get()  # one event read, then both stop reading
        history.export(Update((), 3, False, 0.0, _events=tuple(events[2:])))
        with pytest.raises(FellBehind) as info:
            await reader.get()
        return info.value.last_seq, reader.qsize(), stuck.qsize()

    last, left, stuck_left = asyncio.run(main())
    assert (last, left, stuck_left) == (1, 0, 1)  # only the cut-off mark is left
    assert len(history.events) == WATCH_QUEUE_EVENTS


def test_backup_sets_reach_shm_and_the_view(tmp_path: Path) -> None:
    """Each NIC's set, nearest first, as table indices in shm (backup_index its first member)
    and by name in the view; a pair given as one name is a set of one."""
    settings = Settings(interfaces=("rail0", "rail1", "rail2"), shm_path=str(tmp_path / "shm"),
                        state_dir="", sysfs_root=str(tmp_path), metrics_address="")

    async def main() -> tuple[list[NicEntry], list[NicView], dict[str, object]]:
        core = build_core(settings, ["rail0", "rail1", "rail2"],
                          {"rail0": ("rail2", "rail1"), "rail1": "rail0"}, [])
        await core.engine.start()
        try:
            with ShmReader(settings.shm_path) as reader:
                return reader.snapshot()[1], core.view.nics(), core.view.dump()
        finally:
            await core.engine.stop()

    entries, views, dump = asyncio.run(main())
    assert [(e.backup_index, e.backup_set) for e in entries] == [(2, (2, 1)), (0, (0,)),
                                                                 (-1, ())]
    assert [(v.backup, v.backup_set) for v in views] == [
        ("rail2", ("rail2", "rail1")), ("rail0", ("rail0",)), ("", ())]
    assert dump["backups"] == {"rail0": "rail2", "rail1": "rail0"}
    assert dump["backup_sets"] == {"rail0": ["rail2", "rail1"], "rail1": ["rail0"]}


def test_the_heartbeat_keeps_its_grid_when_a_beat_comes_late() -> None:
    # on time: the next point of the grid, one period on
    assert next_beat(10.0, 10.0, 0.05) == pytest.approx(10.05)
    # woken 30 ms late: the next beat is still at 10.10, not 30 ms later than that
    assert next_beat(10.05, 10.08, 0.05) == pytest.approx(10.10)
    # a loop stuck for 1 s: the missed beats are skipped, not written in a burst
    assert next_beat(10.0, 11.01, 0.05) == pytest.approx(11.05)
    # woken early (a clock granularity): the grid point still ahead is kept
    assert next_beat(10.0, 9.99, 0.05) == pytest.approx(10.05)
