"""What a running process costs, read from /proc (proc(5)): open descriptors, threads, resident
memory, and the CPU time of its threads whose names start with a prefix (the plugin names its
own threads "lg-monitor" and "lg-progress-N": plugin/src/proto/monitor.c, progress.c)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PLUGIN_THREADS = "lg-"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass
class Footprint:
    fds: int
    threads: int
    rss_kib: int


def footprint(pid: int, proc: Path = PROC) -> Footprint:
    """Descriptors in /proc/PID/fd; Threads and VmRSS from /proc/PID/status."""
    status = {}
    for line in (proc / str(pid) / "status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.split()
    return Footprint(len(os.listdir(proc / str(pid) / "fd")), int(status["Threads"][0]),
                     int(status["VmRSS"][0]))


def thread_cpu_s(pid: int, prefix: str = PLUGIN_THREADS, proc: Path = PROC) -> float:
    """CPU seconds so far of the threads of `pid` named `prefix`*: the run time in ns that
    /proc/PID/task/TID/schedstat starts with (sched-stats.rst), else utime + stime of
    /proc/PID/task/TID/stat (fields 14 and 15, in clock ticks: 10 ms steps)."""
    total = 0.0
    for task in (proc / str(pid) / "task").iterdir():
        try:
            if not (task / "comm").read_text().startswith(prefix):
                continue
            try:
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
                continue
            except FileNotFoundError:
                pass
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 onwards
        total += (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    return total


def cpu_shares(groups: dict[str, list[int]], seconds: float,
               prefix: str = PLUGIN_THREADS, proc: Path = PROC) -> dict[str, float]:
    """For each group of PIDs, its `prefix`* threads together as a fraction of one core over
    the next `seconds` (sleeps that long)."""
    def now() -> dict[str, float]:
        return {g: sum(thread_cpu_s(p, prefix, proc) for p in pids) for g, pids in groups.items()}

    before, t0 = now(), time.monotonic()
    time.sleep(seconds)
    after, dt = now(), time.monotonic() - t0
    return {g: (after[g] - before[g]) / dt for g in groups}


def thread_states(pid: int, proc: Path = PROC) -> list[dict[str, str]]:
    """Where each thread of `pid` is: name, state (stat field 3), the kernel function it
    sleeps in (wchan) and the system call it is in (syscall: its number first, "running" or
    -1 when in none), for a process that does not exit when told."""
    out = []
    for task in sorted((proc / str(pid) / "task").iterdir(), key=lambda t: int(t.name)):
        def read(name: str, task: Path = task) -> str:
            try:
                return (task / name).read_text().strip()
            except OSError:
                return "?"
        stat = read("stat")
        state = stat[stat.rindex(")") + 2:].split()[0] if ")" in stat else "?"
        out.append({"tid": task.name, "comm": read("comm"), "state": state,
                    "wchan": read("wchan"), "syscall": read("syscall").split(" ")[0]})
    return out
