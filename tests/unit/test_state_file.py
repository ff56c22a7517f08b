"""State across restarts: the state file's format and atomic writes, the sequence reservation,
a corrupt file, and the real engine restoring a drain before its first publication."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from pathlib import Path

import pytest
from fake_daemon import short_socket_dir

from linkguardd.core import Core, build_core
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
    state_dir_problem,
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
def core_for(directory: str) -> Core:
    settings = Settings(interfaces=("rail0", "rail1"), shm_path=os.path.join(directory, "shm"),
                        sysfs_root=directory, state_dir=os.path.join(directory, "state"))
    return build_core(settings, ["rail0", "rail1"], {"rail0": "rail1", "rail1": "rail0"}, [])


def test_a_drain_survives_an_engine_restart_and_sequences_continue(
        caplog: pytest.LogCaptureFixture) -> None:
    directory = short_socket_dir()
    caplog.set_level(logging.INFO, logger="linkguardd")

    async def first_run() -> int:
        core = core_for(directory)
        await core.engine.start()
        core.view.drain("rail0", "swap optic")
        head = core.view.head_seq()
        await core.engine.stop()
        return head

    async def second_run() -> tuple[int, list[int], int]:
        core = core_for(directory)
        await core.engine.start()
        try:
            with ShmReader(os.path.join(directory, "shm")) as reader:
                _, nics = reader.snapshot()
                events, _, _ = reader.events_since(0)
            rail0 = next(n for n in nics if n.name == "rail0")
            assert (rail0.state, rail0.reason) == (NicState.DRAINED, Reason.OPERATOR_DRAIN)
            assert core.view.nic("rail0").drain_reason == "swap optic"
            return core.view.head_seq(), [e.seq for e in events], events[0].new_state
        finally:
            await core.engine.stop()

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
        core = core_for(directory)
        await core.engine.start()
        core.view.drain("rail1", "x")
        core.view.undrain("rail1")
        await core.engine.stop()

    asyncio.run(run())
    assert written(Path(directory) / "state")["drains"] == {}


# --- hygiene (issue 30, finding 6) ------------------------------------------------------------
def test_a_planted_symlink_is_never_written_through(tmp_path: Path) -> None:
    """The old temporary name was predictable and open("w") followed links: root overwrote
    whatever a planted link pointed at."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    for name in (f".{STATE_FILE}.{os.getpid()}.tmp", STATE_FILE):  # the old name, the file
        os.symlink(victim, state_dir / name)
    save(state_dir / STATE_FILE, SavedState(7))
    assert victim.read_text() == "precious\n"
    assert not (state_dir / STATE_FILE).is_symlink() and load(state_dir / STATE_FILE).next_seq == 7


def test_a_symlink_or_a_fifo_in_place_of_the_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO at state.json once hung start-up in open() (SIGTERM ignored)."""
    (tmp_path / "target").write_text('{"format": 1, "next_seq": 5, "drains": {}}')
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(StateFileError, match="symbolic link"):
        load(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: outcome.append(
        pytest.raises(StateFileError, load, tmp_path / "fifo").value), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # the old code: unblock it before failing
        os.close(os.open(tmp_path / "fifo", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load() blocked on a FIFO")
    assert "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("nic, reason, problem", [
    ("rail0", "swap\x1b]52;c;ZWNobyBwd25lZA==\x07", "printable"),  # an OSC sequence
    ("rail0", "", "needs a reason"),
    ("rail0", "x" * 201, "at most 200"),
    ("rail\x1b[2J", "fine", "not a valid interface name"),
])
def test_saved_drains_are_checked_like_an_operators(tmp_path: Path, nic: str, reason: str,
                                                    problem: str) -> None:
    path = tmp_path / STATE_FILE
    path.write_text(json.dumps({"format": 1, "next_seq": 3,
                                "drains": {nic: {"reason": reason, "since_unix": 1.0}}}))
    with pytest.raises(StateFileError, match=problem):
        load(path)


def test_a_state_dir_others_can_write_is_refused_with_what_to_do(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir(mode=0o755)
    assert state_dir_problem(str(good)) == "" and state_dir_problem(str(tmp_path / "no")) == ""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    problem = state_dir_problem(str(shared))
    assert "writable by its group or others (mode 1777)" in problem and "chmod go-w" in problem
    if os.geteuid() == 0:  # only root can give a directory away
        other = tmp_path / "other"
        other.mkdir(mode=0o755)
        os.chown(other, 65534, 65534)
        assert "owned by uid 65534" in state_dir_problem(str(other))
