"""The daemon's log: one logfmt (or JSON) line per record on stderr, written off the event loop.

Every record goes through a QueueHandler into a bounded queue; a QueueListener thread formats and
writes it, so a slow journal or terminal never delays a link event (a full queue drops lines and
says how many). Structured fields ride in `extra=kv(...)` and become key=value pairs after msg.

Under systemd (JOURNAL_STREAM names our stderr) each line starts with the syslog priority,
`<4>` for a warning: journald's SyslogLevelPrefix= (on by default) turns it into PRIORITY=, so
`journalctl -p warning` finds warnings. Chosen over the native journal protocol because it
rides on the stream systemd already connected: no second socket that can fail, block or
reorder against the stream, and the same line on a terminal and in the journal. What it gives
up, per-field journal matches (NIC=rail0), logfmt parsers recover from the line.
"""
from __future__ import annotations

import copy
import json
import logging
import logging.handlers
import os
import queue
import sys
import time
from typing import Any, TextIO

QUEUE_LINES = 10_000  # records waiting for the writer thread; beyond that they are dropped
STOP_WAIT_S = 5  # at exit, for a stuck stream to take the last lines (systemd waits 15 s)
# syslog(3) priorities by Python level (journald's PRIORITY=)
PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
            logging.CRITICAL: 2}
RESERVED = ("ts", "level", "logger", "msg", "exc")


def kv(**fields: Any) -> dict[str, Any]:
    """`log.info("started", extra=kv(nics="rail0,rail1"))`: structured fields of one record."""
    return {"fields": fields}


def logfmt_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text == "" or any(c in text for c in ' "=\\') or not text.isprintable():
        return json.dumps(text, ensure_ascii=False)
    return text


def under_journal(stream: TextIO, environ: Any = os.environ) -> bool:
    """True when `stream` is the journal stream systemd gave us (JOURNAL_STREAM=dev:ino)."""
    dev, sep, ino = environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return bool(sep) and dev.isdigit() and ino.isdigit() and (
        (st.st_dev, st.st_ino) == (int(dev), int(ino)))


class LineFormatter(logging.Formatter):
    """logfmt or JSON; under the journal with a <priority> prefix and without the timestamp
    (the journal keeps its own)."""

    def __init__(self, fmt: str = "logfmt", journal: bool = False) -> None:
        super().__init__()
        self.json = fmt == "json"
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        pairs: dict[str, object] = {}
        if not self.journal:
            pairs["ts"] = _timestamp(record.created)
        pairs["level"] = record.levelname.lower()
        pairs["logger"] = record.name
        pairs["msg"] = record.getMessage()
        for key, value in getattr(record, "fields", {}).items():
            pairs[key if key not in RESERVED else f"field_{key}"] = value
        exc = record.exc_text or (self.formatException(record.exc_info) if record.exc_info
                                  else "")
        if exc:
            pairs["exc"] = exc
        if self.json:
            line = json.dumps(pairs, separators=(",", ":"), ensure_ascii=False, default=str)
        else:
            line = " ".join(f"{k}={logfmt_value(v)}" for k, v in pairs.items())
        if self.journal:
            line = f"<{PRIORITY.get(record.levelno, 6)}>{line}"
        return line


def _timestamp(created: float) -> str:
    """RFC 3339 UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + \
        f".{int(created % 1 * 1000):03d}Z"


class _QueueHandler(logging.handlers.QueueHandler):
    """Never blocks: a full queue drops the record and counts it."""

    dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # Resolve the message and the traceback now (the objects may change later), but leave
        # the formatting to the writer thread.
        record = copy.copy(record)
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


class _Writer(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, stream: TextIO, source: _QueueHandler) -> None:
        super().__init__(stream)
        self.source = source

    def emit(self, record: logging.LogRecord) -> None:
        if self.source.dropped:
            lost, self.source.dropped = self.source.dropped, 0
            note = logging.LogRecord("linkguardd.logs", logging.WARNING, __file__, 0,
                                     "log lines dropped: the writer fell behind", None, None)
            note.fields = {"dropped": lost}
            super().emit(note)
        super().emit(record)


class DaemonLog:
    """setup() once at start, reconfigure() on reload, stop() before exit (flushes)."""

    def __init__(self, stream: TextIO | None = None, queue_lines: int = QUEUE_LINES) -> None:
        self.stream = stream or sys.stderr
        self.journal = under_journal(self.stream)
        self.handler = _QueueHandler(queue.Queue(queue_lines))
        self.writer = _Writer(self.stream, self.handler)
        self.listener = logging.handlers.QueueListener(self.handler.queue, self.writer)

    def setup(self, level: str, fmt: str) -> None:
        root = logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
        root.addHandler(self.handler)
        self.reconfigure(level, fmt)
        self.listener.start()

    def reconfigure(self, level: str, fmt: str) -> None:
        logging.getLogger().setLevel(level.upper())
        self.writer.setFormatter(LineFormatter(fmt, self.journal))

    def stop(self) -> None:
        """Write what is queued, then stop the thread."""
        for _ in range(STOP_WAIT_S * 100):  # room for the listener's stop marker
            if not self.handler.queue.full():  # type: ignore[attr-defined]
                break
            time.sleep(0.01)
        self.listener.stop()
        logging.getLogger().removeHandler(self.handler)
        self.stream.flush()
