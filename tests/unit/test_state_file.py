"""State across restarts: the state file's format and atomic writes, the sequence reservation,
a corrupt file, and the real engine restoring a drain before its first publication."""
from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from fake_daemon import short_socket_dir

from linkguardd.engine import Engine
from linkguardd.settings import Settings
from linkguardd.shm.reader import ShmReader
from linkguardd.state_file import (
    SEQ_RESERVE,
    STATE_FILE,
    SavedDrain,
    SavedState,
    StateFileError,
    StateNotSaved,
    StateStore,
    load,
    save,
)
from linkguardd.states import NicState, Reason


def written(directory: Path) -> dict:
    return json.loads((directory / STATE_FILE).read_text())


def test_save_then_load_round_trips_and_leaves_no_temporary(tmp_path: Path) -> None:
    state = SavedState(61, {"rail1": SavedDrain("swap optic", 1764578000.5)})
    save(tmp_path / STATE_FILE, state)
    assert load(tmp_path / STATE_FILE) == state
    assert os.listdir(tmp_path) == [STATE_FILE]


def test_an_absent_file_is_a_fresh_host(tmp_path: Path) -> None:
    assert load(tmp_path / STATE_FILE) == SavedState(1, {})


@pytest.mark.parametrize("text, fragment", [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"format": 2, "next_seq": 1, "drains": {}}', "format 2, this linkguardd reads 1"),
    ('{"format": 1, "next_seq": 0, "drains": {}}', "next_seq must be a positive integer"),
    ('{"format": 1, "next_seq": true, "drains": {}}', "next_seq must be a positive integer"),
    ('{"format": 1, "next_seq": 3, "drains": []}', "drains must be an object"),
    ('{"format": 1, "next_seq": 3, "drains": {"rail0": {"reason": 5, "since_unix": 1}}}',
     "drain of 'rail0'"),
    ('{"format": 1, "next_seq": 3, "drains": {"rail0": {"reason": "x"}}}', "drain of 'rail0'"),
])
def test_a_bad_file_says_what_is_wrong(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(StateFileError, match=fragment):
        load(tmp_path / STATE_FILE)


def test_numbers_are_reserved_in_blocks_and_a_clean_stop_writes_the_exact_next(
        tmp_path: Path) -> None:
    store = StateStore(str(tmp_path))
    assert store.open().next_seq == 1
    assert written(tmp_path)["next_seq"] == 1 + SEQ_RESERVE  # before any event is issued
    for seq in range(1, SEQ_RESERVE):
        store.issued(seq)
    assert written(tmp_path)["next_seq"] == 1 + SEQ_RESERVE  # no write per event
    store.issued(SEQ_RESERVE)  # the last reserved number: the next block is written
    assert written(tmp_path)["next_seq"] == 1 + 2 * SEQ_RESERVE
    store.close()
    assert written(tmp_path)["next_seq"] == SEQ_RESERVE + 1


def test_after_a_crash_no_number_is_used_twice(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path))
    store.open()
    for seq in range(1, 40):
        store.issued(seq)  # then the process dies: no close()
    again = StateStore(str(tmp_path))
    assert again.open().next_seq > 39
    assert again.last_seq >= 39


def test_a_corrupt_file_is_set_aside_and_logged_and_the_store_still_works(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    store = StateStore(str(tmp_path))
    assert store.open() == SavedState()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert f"{tmp_path / STATE_FILE} is unusable (not JSON" in record.getMessage()
    assert "starting without saved drains" in record.getMessage()
    aside = [p for p in os.listdir(tmp_path) if p.startswith(f"{STATE_FILE}.corrupt-")]
    assert len(aside) == 1 and (tmp_path / aside[0]).read_text() == "{not json"
    store.set_drains({"rail0": "x"})
    assert written(tmp_path)["drains"]["rail0"]["reason"] == "x"


def test_a_drain_that_cannot_be_written_raises_state_not_saved(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = StateStore(str(blocker / "state"))  # a directory below a file: never creatable
    store.open()
    with pytest.raises(StateNotSaved, match="cannot write"):
        store.set_drains({"rail0": "x"})


def test_no_state_dir_keeps_everything_in_memory(tmp_path: Path) -> None:
    store = StateStore("")
    store.open()
    store.issued(5)
    store.set_drains({"rail0": "x"})
    store.close()
    assert store.last_seq == 5


# --- the engine ----------------------------------------------------------------------------------
def engine_for(directory: str) -> Engine:
    settings = Settings(interfaces=("rail0", "rail1"), shm_path=os.path.join(directory, "shm"),
                        sysfs_root=directory, state_dir=os.path.join(directory, "state"))
    return Engine(settings, ["rail0", "rail1"], {"rail0": "rail1", "rail1": "rail0"}, [])


def test_a_drain_survives_an_engine_restart_and_sequences_continue(
        caplog: pytest.LogCaptureFixture) -> None:
    directory = short_socket_dir()
    caplog.set_level(logging.INFO, logger="linkguardd")

    async def first_run() -> int:
        engine = engine_for(directory)
        await engine.start()
        engine.drain("rail0", "swap optic")
        head = engine.head_seq()
        await engine.stop()
        return head

    async def second_run() -> tuple[int, list[int], int]:
        engine = engine_for(directory)
        await engine.start()
        try:
            with ShmReader(os.path.join(directory, "shm")) as reader:
                _, nics = reader.snapshot()
                events, _, _ = reader.events_since(0)
            rail0 = next(n for n in nics if n.name == "rail0")
            assert (rail0.state, rail0.reason) == (NicState.DRAINED, Reason.OPERATOR_DRAIN)
            assert engine.nic("rail0").drain_reason == "swap optic"
            return engine.head_seq(), [e.seq for e in events], events[0].new_state
        finally:
            await engine.stop()

    head = asyncio.run(first_run())
    assert head >= 2  # the start-up transitions and the drain
    new_head, seqs, first_state = asyncio.run(second_run())
    assert seqs[0] == head + 1 and new_head == seqs[-1]  # numbering went on, no reuse
    assert first_state == NicState.DRAINED  # the first thing the new run published
    assert "rail0 stays DRAINED across the restart" in caplog.text
    assert "swap optic" in caplog.text


def test_an_undrain_is_saved_too() -> None:
    directory = short_socket_dir()

    async def run() -> None:
        engine = engine_for(directory)
        await engine.start()
        engine.drain("rail1", "x")
        engine.undrain("rail1")
        await engine.stop()

    asyncio.run(run())
    assert written(Path(directory) / "state")["drains"] == {}
