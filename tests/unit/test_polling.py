"""The loop the polling monitors share (monitors/polling.py): it polls until stopped, a poll
that raises is counted in the monitor's health and the loop goes on, and stop() returns only
once no poll runs any more. Waits are on conditions (a count), bounded; nothing is timed."""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from linkguardd.monitors.base import MonitorHealth
from linkguardd.monitors.polling import Polling

DEADLINE_S = 30.0


async def until(pred: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not pred():
        assert loop.time() < end, what
        await asyncio.sleep(0.001)


def test_a_poll_that_raises_is_counted_and_the_loop_goes_on() -> None:
    health = MonitorHealth()
    calls: list[int] = []

    async def poll() -> None:
        calls.append(len(calls))
        if len(calls) == 2:
            raise OSError(5, "EIO from the driver")

    async def main() -> None:
        polling = Polling("phy", poll, 0.001, health)
        polling.start()
        await until(lambda: len(calls) >= 4, "polls after the failed one")
        await polling.stop()

    asyncio.run(main())
    assert health.errors == 1 and not health.success
    assert health.last_error == "phy poll: OSError(5, 'EIO from the driver')"


def test_stop_returns_once_no_poll_runs_even_one_in_progress() -> None:
    health = MonitorHealth()
    state = {"started": 0, "finished": 0}

    async def main() -> None:
        release = asyncio.Event()

        async def poll() -> None:
            state["started"] += 1
            await release.wait()  # a slow read: still in progress when stop() comes
            state["finished"] += 1

        polling = Polling("dom", poll, 0.001, health)
        polling.start()
        await until(lambda: state["started"] == 1, "the first poll to start")
        await polling.stop()  # cancels the poll in progress and waits for it
        started = state["started"]
        release.set()
        for _ in range(100):
            await asyncio.sleep(0)
        assert state["started"] == started  # nothing polls after stop()
        await polling.stop()  # twice is harmless

    asyncio.run(main())
    assert state["finished"] == 0 and health.errors == 0  # a cancel is no failure
