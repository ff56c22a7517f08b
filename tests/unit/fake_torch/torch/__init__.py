"""A stand-in for the few torch calls tests/gpu/nccl_rank.py makes, for machines without a GPU.

Put tests/unit/fake_torch on sys.path (or PYTHONPATH) and `import torch` finds this. Tensors
are Python lists with elementwise arithmetic; torch.distributed (distributed.py) emulates a
world of 2 inside one process: all_reduce adds what the peer rank would contribute to the
checked pattern (its data scaled by its rank factor, its stop vote 0). Faults to inject, read
from the environment: FAKE_TORCH_CORRUPT_CALL=N flips one element of the Nth all_reduce's
result, FAKE_TORCH_PEER_STOP_CALL=N makes the peer vote stop in the Nth. Every process also
writes <--out>.env.json: its NCCL/LINKGUARD environment and network interfaces, so tests can
see what a rank was started with and in which namespace.
"""

from __future__ import annotations

import json
import operator
import os
import socket
import sys
from types import SimpleNamespace
from typing import Any

__version__ = "0.0-fake"
int64, float32 = "int64", "float32"
version = SimpleNamespace(cuda="0.0-fake")


class Tensor:
    def __init__(self, values: Any) -> None:
        self.v = list(values)

    def _op(self, other: Any, fn: Any) -> Tensor:
        ov = other.v if isinstance(other, Tensor) else [other] * len(self.v)
        return Tensor(fn(a, b) for a, b in zip(self.v, ov, strict=True))

    def __add__(self, o: Any) -> Tensor:
        return self._op(o, operator.add)

    def __mul__(self, o: Any) -> Tensor:
        return self._op(o, operator.mul)

    def __mod__(self, o: Any) -> Tensor:
        return self._op(o, operator.mod)

    def __ne__(self, o: object) -> Tensor:  # type: ignore[override]
        return self._op(o, operator.ne)

    def to(self, dtype: str) -> Tensor:
        return Tensor(float(x) for x in self.v)

    def sum(self) -> Tensor:
        return Tensor([sum(self.v)])

    def item(self) -> Any:
        return self.v[0]

    def __getitem__(self, key: Any) -> Tensor:
        got = self.v[key]
        return Tensor(got if isinstance(key, slice) else [got])

    def __setitem__(self, key: Any, value: Any) -> None:
        self.v[key] = value.v if isinstance(value, Tensor) else value

    def copy_(self, other: Tensor) -> None:
        self.v[:] = other.v

    def __len__(self) -> int:
        return len(self.v)


def device(kind: str, index: int = 0) -> tuple[str, int]:
    return (kind, index)


def arange(n: int, device: Any = None, dtype: Any = None) -> Tensor:
    return Tensor(range(n))


def empty(n: int, device: Any = None, dtype: Any = None) -> Tensor:
    return Tensor([0.0] * n)


def ones(n: int, device: Any = None, dtype: Any = None) -> Tensor:
    return Tensor([1.0] * n)


cuda = SimpleNamespace(
    nccl=SimpleNamespace(version=lambda: (0, 0, 0)),
    get_device_name=lambda i=0: "fake GPU",
    set_device=lambda i: None,
    synchronize=lambda d=None: None,
    is_available=lambda: True,
)


def _record() -> None:
    if "--out" not in sys.argv:
        return
    out = sys.argv[sys.argv.index("--out") + 1]
    env = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "LINKGUARD"))}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    with open(out + ".env.json", "w") as f:
        json.dump({"env": env, "ifnames": sorted(n for _, n in socket.if_nameindex())}, f)


_record()
