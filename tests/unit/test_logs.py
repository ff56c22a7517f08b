"""The daemon's log: valid logfmt, journald priorities, writes off the caller's thread."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
from collections.abc import Iterator

import pytest

from linkguardd.exporters.base import Update
from linkguardd.exporters.log import LogExporter
from linkguardd.logs import DaemonLog, LineFormatter, kv, under_journal
from linkguardd.policy import Transition
from linkguardd.states import NicState, Reason

WAIT_S = 30
# logfmt as its parsers read it: key=value pairs separated by one space; a value is bare (no
# space, quote or equals sign) or a quoted string with backslash escapes.
PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_.]*)=("(?:[^"\\]|\\.)*"|[^\s"=]*)(?: |$)')


def parse_strict(line: str) -> dict[str, str]:
    out, pos = {}, 0
    while pos < len(line):
        m = PAIR.match(line, pos)
        assert m, f"not logfmt at {line[pos:]!r} in {line!r}"
        key, value = m.groups()
        out[key] = json.loads(value) if value.startswith('"') else value
        pos = m.end()
    return out


def record(msg: str, *args: object, level: int = logging.INFO, **fields: object
           ) -> logging.LogRecord:
    rec = logging.LogRecord("linkguardd.test", level, __file__, 1, msg, args or None, None)
    rec.fields = fields
    return rec


@pytest.mark.parametrize("message", [
    "started", "reload refused: bad file", 'quote " inside', "a=b", "back\\slash",
    "two\nlines", "", "tab\there", "ünïcödé ok",
])
def test_every_line_is_valid_logfmt_and_round_trips(message: str) -> None:
    line = LineFormatter("logfmt").format(record(message, nic="rail0", detail="carrier 0",
                                                 empty="", reason="x=y"))
    assert "\n" not in line
    parsed = parse_strict(line)
    assert parsed["msg"] == message and parsed["level"] == "info"
    assert (parsed["nic"], parsed["detail"], parsed["empty"], parsed["reason"]) == (
        "rail0", "carrier 0", "", "x=y")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed["ts"])


def test_a_traceback_stays_on_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    parsed = parse_strict(LineFormatter().format(rec))
    assert parsed["msg"] == "failed" and "ValueError: boom" in parsed["exc"]


def test_json_lines() -> None:
    line = LineFormatter("json").format(record("reloaded %s", "now", changed="hold_down_ms"))
    assert json.loads(line) | {"ts": ""} == {"ts": "", "level": "info", "logger": "linkguardd.test",
                                             "msg": "reloaded now", "changed": "hold_down_ms"}


@pytest.fixture
def pipe() -> Iterator[io.TextIOWrapper]:
    r, w = os.pipe()
    stream = os.fdopen(w, "w")
    yield stream
    stream.close()
    os.close(r)


def test_journal_stream_is_recognised_only_when_it_is_ours(pipe: io.TextIOWrapper) -> None:
    st = os.fstat(pipe.fileno())
    assert under_journal(pipe, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    assert not under_journal(pipe, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
    assert not under_journal(pipe, {})
    assert not under_journal(pipe, {"JOURNAL_STREAM": "garbage"})


@pytest.mark.parametrize("level, priority", [
    (logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4), (logging.ERROR, 3),
    (logging.CRITICAL, 2)])
def test_journal_lines_carry_the_syslog_priority(level: int, priority: int) -> None:
    """journald's SyslogLevelPrefix= reads <N> into PRIORITY=, what `journalctl -p` filters."""
    line = LineFormatter("logfmt", journal=True).format(record("x", level=level))
    assert line.startswith(f"<{priority}>level=")
    assert "ts" not in parse_strict(line[len(f"<{priority}>"):])  # the journal stamps it


class BlockingStream(io.StringIO):
    """A stream whose writes wait until released, recording the writing thread."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.writers: set[str] = set()

    def write(self, s: str) -> int:
        self.writers.add(threading.current_thread().name)
        self.release.wait(WAIT_S)
        return super().write(s)


def test_logging_never_waits_for_the_stream() -> None:
    stream = BlockingStream()
    logs = DaemonLog(stream)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    logs.setup("info", "logfmt")
    try:
        for i in range(50):  # all return while the writer is stuck on the first line
            logging.getLogger("linkguardd.test").warning("line %d", i, extra=kv(i=i))
        assert stream.getvalue() == ""
        stream.release.set()
    finally:
        stream.release.set()
        logs.stop()
        root.handlers[:], root.level = saved
    lines = stream.getvalue().splitlines()
    assert [parse_strict(ln)["i"] for ln in lines] == [str(i) for i in range(50)]
    assert threading.current_thread().name not in stream.writers


def test_a_full_queue_drops_lines_and_says_how_many() -> None:
    stream = BlockingStream()
    logs = DaemonLog(stream, queue_lines=5)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    logs.setup("info", "logfmt")
    try:
        for i in range(40):
            logging.getLogger("linkguardd.test").info("line %d", i)
        stream.release.set()
        for _ in range(WAIT_S * 100):  # the writer catches up (bounded)
            if logs.handler.queue.empty():
                break
            threading.Event().wait(0.01)
        logging.getLogger("linkguardd.test").info("after")
    finally:
        stream.release.set()
        logs.stop()
        root.handlers[:], root.level = saved
    parsed = [parse_strict(ln) for ln in stream.getvalue().splitlines()]
    notes = [p for p in parsed if p["msg"].startswith("log lines dropped")]
    kept = [p for p in parsed if p["msg"].startswith("line")]
    assert notes and notes[0]["level"] == "warning"
    assert len(kept) + sum(int(n["dropped"]) for n in notes) == 40
    assert parsed[-1]["msg"] == "after"


def test_a_nic_failure_is_a_warning_and_a_recovery_is_not(
        caplog: pytest.LogCaptureFixture) -> None:
    down = Transition("rail0", NicState.UP, NicState.DOWN, Reason.CARRIER_LOST, 2, 10, "carrier 0")
    up = Transition("rail0", NicState.RECOVERING, NicState.UP, Reason.HOLDDOWN_EXPIRED, 4, 20)
    update = Update([down, up], 5, True, 1_700_000_000.0, "netlink", fact_ns=5)
    update.mark_published(15)
    with caplog.at_level(logging.INFO, logger="linkguardd.transition"):
        LogExporter().export(update)
    assert [(r.levelno, r.fields["seq"], r.fields["to"], r.fields["detect_us"])  # type: ignore[attr-defined]
            for r in caplog.records] == [(logging.WARNING, 5, "DOWN", 0.0),
                                         (logging.INFO, 6, "UP", 0.0)]
