"""SIGHUP: what changed, what needs a restart, and a bad file refused with all state kept."""
from __future__ import annotations

import asyncio
import io
import logging
import time
from pathlib import Path

import pytest

from linkguardd.core import Core, build_core
from linkguardd.facts import LinkFact
from linkguardd.logs import DaemonLog
from linkguardd.main import reload
from linkguardd.reload import plan_reload
from linkguardd.settings import SETTINGS, Settings
from linkguardd.states import NicState


def test_the_plan_names_changes_and_keeps_what_needs_a_restart() -> None:
    running = Settings(hold_down_ms=1000, metrics_address="127.0.0.1:9846")
    fresh = Settings(hold_down_ms=3000, metrics_address="0.0.0.0:9846", log_level="debug")
    plan = plan_reload(running, fresh)
    assert plan.changed == ("metrics_address", "hold_down_ms", "log_level")
    assert plan.needs_restart == ("metrics_address",)
    assert plan.applied == ("hold_down_ms", "log_level")
    assert plan.effective == Settings(hold_down_ms=3000, log_level="debug")
    assert plan_reload(running, running).changed == ()


def test_the_settings_a_reload_cannot_apply() -> None:
    """Opened once at start: the shm file, the API sockets and their groups, the state file,
    the metrics port."""
    assert {s.name for s in SETTINGS if s.restart} == {
        "shm_path", "grpc_socket", "grpc_ro_socket", "admin_group", "reader_group", "state_dir",
        "metrics_address"}


LEVELS: list[int] = []  # the root logger's level right after each reload


def make_core(tmp_path: Path) -> Core:
    settings = Settings(interfaces=("rail0", "rail1"), shm_path=str(tmp_path / "shm"),
                        state_dir="",
                        sysfs_root=str(tmp_path), metrics_address="", hold_down_ms=1000,
                        dom_interval_s=3600, stats_interval_s=60)
    return build_core(settings, ["rail0", "rail1"], {}, [])


def params(config: Path) -> dict[str, object]:
    return {"config": str(config)}


@pytest.fixture
def logs() -> DaemonLog:
    log = DaemonLog(io.StringIO())
    yield log
    logging.getLogger().setLevel(logging.WARNING)


def run_reload(tmp_path: Path, config_text: str, logs: DaemonLog,
               caplog: pytest.LogCaptureFixture) -> tuple[bool, Core, dict[str, object],
                                                          dict[str, object]]:
    config = tmp_path / "linkguard.toml"
    config.write_text(config_text)

    async def main() -> tuple[bool, Core, dict[str, object], dict[str, object]]:
        core = make_core(tmp_path)
        engine, view = core.engine, core.view
        await engine.start()
        try:
            engine.on_fact(LinkFact("rail0", time.monotonic_ns(), admin_up=True, carrier=True,
                                    operstate="UP"))
            view.drain("rail1", "swap optic")
            before = {n.name: (n.state, n.epoch, n.since_monotonic_ns) for n in view.nics()}
            with caplog.at_level(logging.INFO):
                ok = await reload(engine, params(config), logs)
                LEVELS.append(logging.getLogger().level)  # caplog restores it afterwards
            after = {n.name: (n.state, n.epoch, n.since_monotonic_ns) for n in view.nics()}
            return ok, core, before, after
        finally:
            await engine.stop()

    return asyncio.run(main())


@pytest.mark.parametrize("bad, why", [
    ("hold_down_ms = ", "not valid TOML"),
    ("hold_down_ms = -5", "hold_down_ms: must be >= 0"),
    ("hold_dwn_ms = 5", "did you mean 'hold_down_ms'"),
    ('interfaces = ["rail0", "rail0"]', "listed more than once"),
])
def test_a_bad_file_is_refused_whole_and_nothing_is_dropped(
        tmp_path: Path, bad: str, why: str, logs: DaemonLog,
        caplog: pytest.LogCaptureFixture) -> None:
    ok, core, before, after = run_reload(tmp_path, f"{bad}\n", logs, caplog)
    assert not ok and core.engine.settings.hold_down_ms == 1000
    assert after == before  # every NIC keeps its state, epoch and time of change
    refused = [r for r in caplog.records if r.getMessage().startswith("reload refused")]
    assert refused and refused[0].levelno == logging.ERROR
    assert why in refused[0].fields["error"]  # type: ignore[attr-defined]
    assert core.view.nic("rail1").state == NicState.DRAINED


def test_a_reload_says_what_it_applied_and_what_waits_for_a_restart(
        tmp_path: Path, logs: DaemonLog, caplog: pytest.LogCaptureFixture) -> None:
    text = ('interfaces = ["rail0", "rail1"]\nhold_down_ms = 4000\n'
            f'sysfs_root = "{tmp_path}"\nshm_path = "{tmp_path}/other-shm"\n'
            'metrics_address = ""\ndom_interval_s = 3600.0\nstats_interval_s = 60.0\n'
            'log_level = "debug"\nstate_dir = ""\n')
    ok, core, before, after = run_reload(tmp_path, text, logs, caplog)
    assert ok and core.engine.settings.hold_down_ms == 4000
    assert after["rail1"] == before["rail1"]  # still drained, same epoch
    assert core.engine.settings.shm_path == str(tmp_path / "shm")  # the running file stays
    warned = [r for r in caplog.records if r.levelno == logging.WARNING
              and r.getMessage().startswith("reload:")]
    assert [r.fields["needs_restart"] for r in warned] == ["shm_path"]  # type: ignore[attr-defined]
    done = [r.fields for r in caplog.records  # type: ignore[attr-defined]
            if r.getMessage() == "reloaded"]
    assert done and done[0]["changed"] == "shm_path,hold_down_ms,log_level"
    assert done[0]["applied"] == "hold_down_ms,log_level" and done[0]["needs_restart"] == "shm_path"
    assert LEVELS[-1] == logging.DEBUG  # the log follows the new level at once
