"""Verbs asynchronous events: the source interface, its fake, and the child process behind it.

pyverbs' Context.get_async_event() blocks in ibv_get_async_event() while holding the GIL
(rdma-core pyverbs/device.pyx has no `with nogil`), so it cannot run inside the daemon. This
module is also that child: `python -m linkguardd.monitors.verbs_events --device mlx5_0` prints
one JSON line per event, and ChildVerbsSource reads the lines from its pipe without blocking.
pyverbs is imported only in the child. Line protocol (one object per line, flushed):
  {"type": "ready", "device": "mlx5_0", "ports": 1}
  {"type": "event", "device": "mlx5_0", "event": "PORT_ERR", "code": 10, "port": null}
  {"type": "error", "device": "mlx5_0", "message": "..."}   (then the child exits non-zero)
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

# enum ibv_event_type (rdma-core libibverbs/verbs.h); pyverbs.enums has the same values.
EVENT_NAMES = (
    "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED", "PATH_MIG",
    "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE",
    "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER",
    "GID_CHANGE", "WQ_FATAL",
)
DEVICE_FATAL = EVENT_NAMES.index("DEVICE_FATAL")


class VerbsEvent(NamedTuple):
    device: str
    event: str  # EVENT_NAMES without the IBV_EVENT_ prefix
    port: int | None  # pyverbs' AsyncEvent does not expose the port: None from the child


# A source is called once per RDMA device and yields that device's events until it ends
# (the child exited); the monitor calls it again later if the device is still there.
VerbsSource = Callable[[str], AsyncGenerator[VerbsEvent, None]]


class VerbsLine(NamedTuple):
    kind: str  # "ready", "event", "error"
    device: str
    event: VerbsEvent | None = None
    message: str = ""


def event_name(code: int) -> str:
    return EVENT_NAMES[code] if 0 <= code < len(EVENT_NAMES) else f"UNKNOWN_{code}"


def format_line(kind: str, device: str, **fields: object) -> str:
    return json.dumps({"type": kind, "device": device, **fields}, separators=(",", ":"))


def parse_line(line: bytes | str) -> VerbsLine:
    """Decode one line of the child protocol; ValueError if it is not one."""
    obj = json.loads(line)  # JSONDecodeError is a ValueError
    if not isinstance(obj, dict) or not isinstance(obj.get("device"), str):
        raise ValueError(f"not a verbs event line: {line!r}")  # noqa: TRY004 - one error type
    kind, device = obj.get("type"), obj["device"]
    if kind == "event":
        event, port = obj.get("event"), obj.get("port")
        if not isinstance(event, str) or not (port is None or isinstance(port, int)):
            raise ValueError(f"bad verbs event line: {line!r}")
        return VerbsLine(kind, device, VerbsEvent(device, event, port))
    if kind in ("ready", "error"):
        return VerbsLine(kind, device, message=str(obj.get("message", "")))
    raise ValueError(f"unknown verbs line type {kind!r}")


class FakeVerbsSource:
    """Test double: events are whatever inject() puts in; end() ends a device's stream."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[VerbsEvent | None]] = {}
        self.calls: list[str] = []  # devices the monitor subscribed to, in order

    def _queue(self, device: str) -> asyncio.Queue[VerbsEvent | None]:
        return self._queues.setdefault(device, asyncio.Queue())

    def inject(self, device: str, event: str, port: int | None = None) -> None:
        self._queue(device).put_nowait(VerbsEvent(device, event, port))

    def end(self, device: str) -> None:
        self._queue(device).put_nowait(None)

    async def __call__(self, device: str) -> AsyncGenerator[VerbsEvent, None]:
        self.calls.append(device)
        queue = self._queue(device)
        while (item := await queue.get()) is not None:
            yield item


class ChildVerbsSource:
    """Runs `command --device DEV` (by default this module) and yields its event lines."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        self.command = list(command or [sys.executable, "-m", __name__])
        self.processes: dict[str, asyncio.subprocess.Process] = {}  # the live child per device

    async def __call__(self, device: str) -> AsyncGenerator[VerbsEvent, None]:
        env = dict(os.environ)  # the child must import this package wherever it lives
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            *self.command, "--device", device, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, env=env)
        self.processes[device] = proc
        assert proc.stdout is not None
        try:
            while line := await proc.stdout.readline():
                try:
                    parsed = parse_line(line)
                except ValueError as exc:
                    log.warning("verbs events of %s: %s", device, exc)
                    continue
                if parsed.event is not None:
                    yield parsed.event
                elif parsed.kind == "error":
                    log.warning("verbs events of %s: %s", device, parsed.message)
        finally:
            await _reap(proc)
            if self.processes.get(device) is proc:
                del self.processes[device]


async def _reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()  # SIGTERM's default action: the blocked read does not delay it
        try:
            await asyncio.wait_for(proc.wait(), 2.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):  # prctl(PR_SET_PDEATHSIG), linux/prctl.h
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))


def main(argv: Sequence[str] | None = None) -> int:
    """The child: open the device, print a line per async event. Exits after DEVICE_FATAL
    (the context is dead; the parent starts a new child once the device is back)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True, help="RDMA device, e.g. mlx5_0")
    dev = parser.parse_args(argv).device
    _die_with_parent()

    def say(kind: str, **fields: object) -> None:
        print(format_line(kind, dev, **fields), flush=True)

    try:
        import pyverbs.device as verbs  # lazy and only here: optional, holds the GIL
    except ImportError as exc:
        say("error", message=f"pyverbs not available: {exc}")
        return 2
    try:
        ctx = verbs.Context(name=dev)
        say("ready", ports=ctx.query_device().phys_port_cnt)
        while True:
            ev = ctx.get_async_event()  # blocks, holding the GIL: fine in this process
            code = int(ev.event_type)
            ev.ack()
            say("event", event=event_name(code), code=code, port=None)
            if code == DEVICE_FATAL:
                return 0
    except Exception as exc:  # noqa: BLE001 - PyverbsRDMAError etc.: report, let the parent retry
        say("error", message=f"{type(exc).__name__}: {exc}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
