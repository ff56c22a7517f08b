"""torch.distributed for fake_torch: a world of 2 emulated in one process (see __init__)."""

from __future__ import annotations

import os
import sys
from typing import Any

_state = {"rank": 0, "world": 2, "calls": 0}


def init_process_group(backend: str, init_method: str = "", rank: int = 0,
                       world_size: int = 2, **kwargs: Any) -> None:
    if world_size != 2:
        raise RuntimeError("fake_torch emulates a world of 2 only")
    _state.update(rank=rank, world=world_size, calls=0)


def all_reduce(x: Any) -> None:
    """x += the peer's contribution: its rank factor times our data's pattern; in loop mode
    the last element is the stop vote, to which the peer adds 0 (or 1, when told to)."""
    _state["calls"] += 1
    mine = _state["rank"] + 1
    peer = (1 - _state["rank"]) + 1
    loop = sys.argv[sys.argv.index("--mode") + 1] == "loop" if "--mode" in sys.argv else False
    vote = x.v[-1]
    x.v[:] = [v * (mine + peer) / mine for v in x.v]
    if loop:
        peer_stops = _state["calls"] == int(os.environ.get("FAKE_TORCH_PEER_STOP_CALL", "0"))
        x.v[-1] = vote + (1.0 if peer_stops else 0.0)
    if _state["calls"] == int(os.environ.get("FAKE_TORCH_CORRUPT_CALL", "0")):
        x.v[0] += 1.0


def destroy_process_group() -> None:
    _state["calls"] = 0
