"""The loop every polling monitor shares (phy, rdma_counters, rdma's sysfs scan, dom).

A monitor reads its source once in start() (its initial facts), then hands its poll to a Polling,
which calls it every `interval_s` from a task until stop(). A poll that raises is logged and
counted in the monitor's health, and the loop goes on: one bad read must not end the watch. A
poll longer than the interval delays the next one, with no burst to catch up.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from linkguardd.monitors.base import MonitorHealth

log = logging.getLogger(__name__)


class Polling:
    def __init__(self, name: str, poll: Callable[[], Awaitable[None]], interval_s: float,
                 health: MonitorHealth) -> None:
        self.name = name
        self.interval_s = interval_s
        self._poll = poll
        self._health = health
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Polls every interval from now on (the monitor's own start() polled once already)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-poll")

    async def stop(self) -> None:
        """Returns once no poll runs any more (a read in its thread finishes there, bounded by
        its own timeout; its result is dropped)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            try:
                await self._poll()
            except Exception as exc:  # keep polling; say what broke
                log.exception("%s: poll failed", self.name)
                self._health.fail(f"{self.name} poll: {exc!r}")
            next_at = max(next_at + self.interval_s, time.monotonic())
