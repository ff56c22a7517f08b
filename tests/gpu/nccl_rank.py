"""One rank of the real-NCCL check: torch.distributed with the NCCL backend on a GPU.

    python3 nccl_rank.py --mode loop|bench --rank R --world W --master IP:PORT --out FILE ...

Started by nccl_check.py inside a lab host (its own network namespace and NCCL_HOSTID, so two
ranks on one GPU look like two hosts to NCCL); NCCL's environment comes from the caller.

loop   all-reduce (sum) of a float32 tensor whose exact result is known, checked element by
       element every iteration. Rank r contributes (r+1) * p(i, it) with p a pattern of small
       integers that changes every iteration (a stale buffer cannot pass), so the sum is
       W(W+1)/2 * p exactly in float32. The last element is the stop vote: a rank that wants
       to stop (stop file present, time or iteration cap) puts 1 there, and every rank stops
       after the iteration in which the sum is non-zero, so all leave at the same collective.
       A line "lg-rank: iter N" goes to stdout every --progress-every iterations.
bench  all-reduce bus bandwidth per size (busbw = algbw * 2(W-1)/W, nccl-tests' definition),
       timed with the host clock around synchronised loops after a warm-up; each size ends
       with one checked all-reduce of the pattern.
The result (JSON) goes to --out, also on an exception (then the exit status is 1); bench
rewrites it after every size.
Only this file's helpers above main() run without torch (the unit tests import them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

PATTERN_MOD = 1021  # p(i, it) = 1 + (i + it * PATTERN_STRIDE) % PATTERN_MOD: never 0
PATTERN_STRIDE = 7919
FLOAT32_EXACT = 1 << 24  # integers up to this are exact in float32
MIB = 1 << 20
DEFAULT_SIZES = "1M,2M,4M,8M,16M,32M,64M,128M,256M"


def pattern(i: int, it: int) -> int:
    return 1 + (i + it * PATTERN_STRIDE) % PATTERN_MOD


def sum_factor(world: int) -> int:
    """Sum over ranks of (r + 1)."""
    return world * (world + 1) // 2


def check_exact(world: int) -> None:
    """The largest sum must be an exact float32 integer, or the check would be approximate."""
    if PATTERN_MOD * sum_factor(world) >= FLOAT32_EXACT:
        raise ValueError(f"world size {world} too large for an exact float32 check")


def parse_size(text: str) -> int:
    """'1M' -> 1048576; K, M and G are powers of 1024; a plain number is bytes."""
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(f"bad size {text!r}: a positive number with an optional K, M or G")
    return int(digits) * mult


def parse_sizes(text: str) -> list[int]:
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise ValueError("no sizes given")
    if any(s % 4 for s in sizes):
        raise ValueError("every size must be a multiple of 4 bytes (float32 elements)")
    return sizes


def bench_iters(size: int, budget_bytes: int, lo: int = 3, hi: int = 100) -> int:
    """Timed iterations of one size: about budget_bytes in all, within [lo, hi]."""
    return max(lo, min(hi, math.ceil(budget_bytes / size)))


def bus_bandwidth(size: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) of an all-reduce of `size` bytes taking `seconds`."""
    algbw = size / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("loop", "bench"), required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--master", required=True, help="IP:PORT of rank 0's TCP store")
    p.add_argument("--out", required=True, help="result JSON file")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--elements", type=int, default=4 * MIB, help="loop: float32 elements")
    p.add_argument("--stop-file", default="", help="loop: vote to stop once this file exists")
    p.add_argument("--max-s", type=float, default=120.0, help="loop: vote to stop after this")
    p.add_argument("--max-iters", type=int, default=1_000_000)
    p.add_argument("--progress-every", type=int, default=10)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="bench: sizes in bytes (K/M/G)")
    p.add_argument("--budget-mib", type=int, default=1024, help="bench: bytes per size, MiB")
    p.add_argument("--timeout-s", type=int, default=120, help="process group timeout")
    a = p.parse_args(argv)
    errors = []
    if a.world < 2:
        errors.append("--world must be at least 2")
    elif not 0 <= a.rank < a.world:
        errors.append(f"--rank must be in 0..{a.world - 1}")
    if a.elements < 2:
        errors.append("--elements must be at least 2 (data and the stop vote)")
    host, _, port = a.master.rpartition(":")
    if not host or not port.isdigit():
        errors.append(f"--master {a.master!r} is not IP:PORT")
    try:
        a.size_list = parse_sizes(a.sizes)
        check_exact(a.world)
    except ValueError as exc:
        errors.append(str(exc))
    if errors:
        p.error("; ".join(errors))
    return a


# --- with torch ------------------------------------------------------------------------------

def _pattern_tensor(torch: Any, idx: Any, it: int) -> Any:
    return ((idx + it * PATTERN_STRIDE) % PATTERN_MOD + 1).to(torch.float32)


def run_loop(a: argparse.Namespace, torch: Any, dist: Any, out: dict[str, Any]) -> None:
    dev = torch.device("cuda", a.gpu)
    idx = torch.arange(a.elements - 1, device=dev, dtype=torch.int64)
    x = torch.empty(a.elements, device=dev, dtype=torch.float32)
    mine, total = float(a.rank + 1), float(sum_factor(a.world))
    start = time.monotonic()
    it = wrong = 0
    iters: list[list[float]] = []  # [start CLOCK_MONOTONIC s, duration ms] per iteration
    out.update(elements=a.elements, iterations=0, wrong_elements=0, bad_votes=0, iters=iters)
    while True:
        p = _pattern_tensor(torch, idx, it)
        x[:-1] = p * mine
        stop = (a.stop_file and os.path.exists(a.stop_file)) or it + 1 >= a.max_iters \
            or time.monotonic() - start >= a.max_s
        x[-1] = 1.0 if stop else 0.0
        t0 = time.monotonic()
        dist.all_reduce(x)
        bad = int((x[:-1] != p * total).sum().item())  # .item() synchronises
        votes = float(x[-1].item())
        iters.append([round(t0, 6), round((time.monotonic() - t0) * 1e3, 3)])
        it += 1
        wrong += bad
        if votes != int(votes) or not 0 <= votes <= a.world:
            out["bad_votes"] += 1
        out.update(iterations=it, wrong_elements=wrong)
        if it % a.progress_every == 0 or votes:
            print(f"lg-rank: iter {it} wrong {wrong} t {time.monotonic():.6f}", flush=True)
        if votes:
            return


def run_bench(a: argparse.Namespace, torch: Any, dist: Any, out: dict[str, Any]) -> None:
    dev = torch.device("cuda", a.gpu)
    rows: list[dict[str, Any]] = []
    out["rows"] = rows
    for size in a.size_list:
        n = size // 4
        x = torch.ones(n, device=dev, dtype=torch.float32)
        for _ in range(2):  # warm-up: connections, buffers
            dist.all_reduce(x)
        iters = bench_iters(size, a.budget_mib * MIB)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize(dev)
        seconds = (time.perf_counter() - t0) / iters
        p = _pattern_tensor(torch, torch.arange(n, device=dev, dtype=torch.int64), size)
        x.copy_(p * float(a.rank + 1))
        dist.all_reduce(x)
        bad = int((x != p * float(sum_factor(a.world))).sum().item())
        algbw, busbw = bus_bandwidth(size, seconds, a.world)
        rows.append({"bytes": size, "iters": iters, "seconds": seconds, "algbw_gbs": algbw,
                     "busbw_gbs": busbw, "wrong_elements": bad})
        save(a.out, out)  # a rank killed at the harness's time limit still reports these rows
        print(f"lg-rank: bench {size} busbw {busbw:.3f} GB/s wrong {bad}", flush=True)


def save(path: str, out: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, path)  # a reader never sees half a file


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out: dict[str, Any] = {"rank": a.rank, "mode": a.mode, "ok": False, "exception": None}
    try:
        import torch
        import torch.distributed as dist

        nccl = torch.cuda.nccl.version()  # a tuple; an int in old releases
        out.update(torch=torch.__version__, cuda=torch.version.cuda,
                   nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                   gpu=torch.cuda.get_device_name(a.gpu))
        torch.cuda.set_device(a.gpu)
        dist.init_process_group("nccl", init_method=f"tcp://{a.master}", rank=a.rank,
                                world_size=a.world, timeout=timedelta(seconds=a.timeout_s),
                                device_id=torch.device("cuda", a.gpu))
        (run_loop if a.mode == "loop" else run_bench)(a, torch, dist, out)
        dist.destroy_process_group()
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the harness reads the exception from the result
        out["exception"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()
    save(a.out, out)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
