"""The engine's timer follows the policy's deadlines that no transition announces: an error rate
over its limit while the NIC is already DEGRADED for another reason moves the end of its clean
window, and the NIC must come back when that window ends even if no fact arrives then."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from linkguardd.core import build_core
from linkguardd.facts import CountersFact, DomFact, LinkFact
from linkguardd.settings import Settings
from linkguardd.states import NicState, Reason

WAIT_S = 10.0


def test_a_clean_window_ends_without_a_fact(tmp_path: Path) -> None:
    settings = Settings(interfaces=("rail0",), shm_path=str(tmp_path / "shm"), state_dir="",
                        sysfs_root=str(tmp_path), metrics_address="", hold_down_ms=50,
                        error_rate_min_interval_ms=0, error_rate_clean_window_ms=300)

    async def main() -> list[tuple[NicState, Reason]]:
        core = build_core(settings, ["rail0"], {}, [])
        engine, view = core.engine, core.view
        await engine.start()
        seen: list[tuple[NicState, Reason]] = []

        def note() -> None:
            nic = view.nic("rail0")
            if not seen or seen[-1] != (nic.state, nic.reason):
                seen.append((NicState(nic.state), Reason(nic.reason)))

        try:
            now = time.monotonic_ns
            engine.on_fact(LinkFact("rail0", now(), admin_up=True, carrier=True, operstate="UP"))
            engine.on_fact(DomFact("rail0", now(), "ok", warnings=("rx_power_low[1]",)))
            note()
            engine.on_fact(CountersFact("rail0", now(), {"symbol_error": 0}, "rdma"))
            engine.on_fact(CountersFact("rail0", now() + 1_000_000, {"symbol_error": 100}, "rdma"))
            engine.on_fact(DomFact("rail0", now(), "ok"))  # the optic is fine again
            note()  # still DEGRADED: the counter's window has not ended
            deadline = time.monotonic() + WAIT_S
            while view.nic("rail0").state != NicState.UP and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # no fact from here on: only the engine's timer
                note()
            return seen
        finally:
            await engine.stop()

    assert asyncio.run(main()) == [(NicState.DEGRADED, Reason.DOM_WARNING),
                                   (NicState.RECOVERING, Reason.CONDITION_CLEARED),
                                   (NicState.UP, Reason.HOLDDOWN_EXPIRED)]
