"""bench.scale's arithmetic without a lab (no root): per-connection gaps in windows from gap
files, what a process costs read from a /proc tree, the per-connection baseline, the table and
the verdict on each of issue 11's goals, and bad matrix arguments."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import proc_usage, scale, scale_report
from bench.scale_gaps import Window, comm_conns, per_connection, window_maxima

MS = 1_000_000


# --- gaps per connection -----------------------------------------------------------------------

def test_window_maxima_take_each_connections_longest_overlapping_gap(tmp_path: Path) -> None:
    client, server = tmp_path / "c", tmp_path / "s"
    # comm start_ns end_ns open
    client.write_text(f"0 {90 * MS} {120 * MS} 0\n1 {100 * MS} {101 * MS} 0\n"
                      f"0 {300 * MS} {310 * MS} 0\n")
    server.write_text(f"5 {95 * MS} {160 * MS} 0\n\n")
    fault = Window(100 * MS, 200 * MS)
    control = Window(0, 100 * MS, ends_by_ns=100 * MS)
    srcs = [(0, client, {0: 0, 1: 1}), (0, server, comm_conns({"comms": [{"comm": 5,
                                                                          "conn": 1}]}))]
    got_fault, got_control = window_maxima(srcs, [fault, control])
    # conn 0: its 30 ms gap reaches into the fault window; conn 1: the receiver's 65 ms one.
    assert got_fault == {(0, 0): pytest.approx(30.0), (0, 1): pytest.approx(65.0)}
    # The control stretch counts no gap that ended after the fault, even if it began before.
    assert got_control == {}
    assert per_connection(got_fault, [(0, 0), (0, 1), (1, 0)], 2.0) == [
        pytest.approx(30.0), pytest.approx(65.0), 2.0]


# --- /proc ---------------------------------------------------------------------------------------

def fake_proc(root: Path, pid: int, tasks: dict[int, tuple[str, str | None, str]]) -> Path:
    """/proc/PID with fd/, status and task/TID/{comm,schedstat,stat}."""
    p = root / str(pid)
    (p / "fd").mkdir(parents=True)
    for i in range(7):
        (p / "fd" / str(i)).write_text("")
    (p / "status").write_text(f"Name:\tlg_nccl_driver\nThreads:\t{len(tasks)}\n"
                              "VmRSS:\t   12345 kB\n")
    for tid, (comm, schedstat, stat) in tasks.items():
        t = p / "task" / str(tid)
        t.mkdir(parents=True)
        (t / "comm").write_text(comm + "\n")
        if schedstat is not None:
            (t / "schedstat").write_text(schedstat)
        (t / "stat").write_text(stat)
    return root


def stat_line(tid: int, comm: str, utime: int, stime: int) -> str:
    rest = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime)]
    return f"{tid} ({comm}) " + " ".join(rest + ["0"] * 30) + "\n"


def test_footprint_and_plugin_thread_cpu_from_a_proc_tree(tmp_path: Path) -> None:
    hz = proc_usage.TICKS_PER_S
    root = fake_proc(tmp_path, 42, {
        42: ("lg_nccl_driver", "9000000000 0 0\n", stat_line(42, "lg_nccl_driver", 900, 0)),
        43: ("lg-monitor", "250000000 0 0\n", stat_line(43, "lg-monitor", 1, 1)),
        # No schedstat: utime + stime ticks; a comm with ") (" must not confuse the parser.
        44: ("lg-progress-0", None, stat_line(44, "lg-progress-0) (x", 3 * hz, 2 * hz)),
    })
    fp = proc_usage.footprint(42, root)
    assert (fp.fds, fp.threads, fp.rss_kib) == (7, 3, 12345)
    assert proc_usage.thread_cpu_s(42, proc=root) == pytest.approx(5.25)
    assert proc_usage.thread_cpu_s(42, prefix="lg_nccl", proc=root) == pytest.approx(9.0)


def test_cpu_shares_of_a_busy_named_thread_of_this_process() -> None:
    stop = threading.Event()

    def spin() -> None:
        me = threading.get_native_id()
        Path(f"/proc/self/task/{me}/comm").write_text("lg-testspin")  # prctl(PR_SET_NAME)
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        # A window the spinner got no tick of (a loaded machine) says nothing: measure again,
        # until it shows (bounded), rather than expect a share of the CPUs.
        deadline = time.monotonic() + 60
        shares = scale.cpu_shares({"me": [os.getpid()]}, 0.3)
        while shares["me"] == 0 and time.monotonic() < deadline:
            shares = scale.cpu_shares({"me": [os.getpid()]}, 0.3)
        idle = scale.cpu_shares({"me": [os.getpid()]}, 0.3, prefix="no-such-thread")
    finally:
        stop.set()
        t.join()
    assert 0 < shares["me"] <= 1.05  # one spinning thread: never more than a core
    assert idle == {"me": 0.0}


def test_thread_states_name_every_thread_of_a_process() -> None:
    stop, waiting = threading.Event(), threading.Event()

    def wait() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("lg-waiter")
        waiting.set()
        stop.wait()

    t = threading.Thread(target=wait)
    t.start()
    try:
        waiting.wait(10)
        states = proc_usage.thread_states(os.getpid())
    finally:
        stop.set()
        t.join()
    by_tid = {s["tid"]: s for s in states}
    assert str(os.getpid()) in by_tid and str(t.native_id) in by_tid
    waiter = by_tid[str(t.native_id)]
    assert waiter["comm"] == "lg-waiter" and waiter["state"] in ("R", "S")
    assert set(waiter) == {"tid", "comm", "state", "wchan", "syscall"}


# --- the table and the goals --------------------------------------------------------------------

def cell(procs: int, conns: int, *, fds: tuple[int, int], p99: float, control: float,
         standby: float | None, idle: float, lossless: bool = True) -> dict[str, Any]:
    n = procs * conns
    trial = {"switched": n, "rebuilt": n, "back": n}
    fp = {h: [{"fds": f, "threads": 4, "rss_kib": 1000 + 50 * conns}] * procs
          for h, f in zip("ab", fds, strict=True)}
    return {"procs": procs, "conns": conns, "pace_us": n / 20000 * 1e6, "lossless": lossless,
            "trials": [trial],
            "footprint": fp, "cpu_idle": {"a": idle, "b": idle / 2},
            "cpu_traffic": {"a": 0.5, "b": 0.5}, "standby_s": standby, "back_s": standby,
            "switch_s": 0.1, "fault_gap_ms": {"n": n, "p50": p99 / 2, "p99": p99, "max": p99},
            "control_gap_ms": {"n": n, "p50": control / 2, "p99": control, "max": control}}


def test_per_connection_cost_is_measured_against_a_one_connection_process() -> None:
    cells = [cell(2, 1, fds=(10, 12), p99=5, control=5, standby=1, idle=0.0),
             cell(2, 256, fds=(10 + 255 * 6, 12 + 255 * 8), p99=80, control=40, standby=1,
                  idle=0.1)]
    assert scale_report.per_conn(cells[1], cells, "fds", "a") == pytest.approx(6.0)
    assert scale_report.per_conn(cells[1], cells, "fds", "b") == pytest.approx(8.0)
    assert scale_report.per_conn(cells[1], cells, "rss_kib", "a") == pytest.approx(50.0)
    assert scale_report.per_conn(cells[0], cells, "fds", "a") is None
    # 10 % of a core for 512 connections: 1.95 % per 100.
    assert scale_report.cpu_per_100(cells[1], "cpu_idle", "a") == pytest.approx(10 / 5.12)
    table = scale_report.table(cells).splitlines()
    assert len(table) == 9 and table[4] == ""
    assert table[3].startswith("| 2 x 256 | 512 | 20000 | yes | 512 / 512 / 512 (of 512) | "
                               "40 / 80 / 80 | 20 / 40 / 40 | 40 |")
    assert table[8] == "| 2 x 256 | 6.0, 8.0 | 4 | 50, 50 | 1.95, 0.98 | 50.0, 50.0 |"
    assert table[7].startswith("| 2 x 1 | -, - | 4 | -, - | 0.00, 0.00 |")


def test_goals_say_met_missed_or_not_measured() -> None:
    good = [cell(2, 1, fds=(10, 10), p99=5, control=5, standby=1, idle=0),
            cell(2, 256, fds=(10 + 255 * 4, 10 + 255 * 4), p99=80, control=40, standby=2.5,
                 idle=0.05)]
    lines = scale_report.goals(good)
    assert lines[0].startswith("2 x 256: met")
    assert lines[1] == "8 x 32: not measured in this run"
    assert lines[2].endswith("met in every cell")
    assert lines[3].startswith("<= 4 fds per connection: met")
    assert lines[4].startswith("plugin threads < 2 % of a core per 100 idle connections: met")
    bad = [good[0], cell(2, 256, fds=(10 + 255 * 6, 10), p99=200, control=40, standby=None,
                         idle=0.5, lossless=False),
           cell(8, 32, fds=(10, 10), p99=100, control=90, standby=4.0, idle=0.01)]
    lines = scale_report.goals(bad)
    assert lines[0].startswith("2 x 256: MISSED: lossless no, gap p99 160 ms")
    assert lines[1].startswith("8 x 32: met")
    assert "MISSED in 2 x 256 (not all back), 8 x 32 (4.0 s)" in lines[2]
    assert lines[3].startswith("<= 4 fds per connection: MISSED (worst 6.0, at 2 x 256)")
    assert "MISSED (worst 9.77 %, at 2 x 256)" in lines[4]


@pytest.mark.parametrize("text", ["", "a,b", "0", "16,-1"])
def test_a_bad_matrix_list_is_refused_with_its_name(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--conns"):
        scale.parse_list(text, "--conns")


def test_a_matrix_beyond_the_driver_is_refused() -> None:
    a = argparse.Namespace(quick=False, procs=[8], conns=[512])
    with pytest.raises(SystemExit, match="at most 512 connections per process and 2048"):
        scale.cells_of(a)
    assert [(c.procs, c.conns) for c in scale.cells_of(argparse.Namespace(
        quick=True, procs=[8], conns=[512]))] == list(scale.QUICK)


def test_the_default_matrix_holds_both_goal_cells() -> None:
    cells = scale.cells_of(argparse.Namespace(quick=False, procs=None, conns=None))
    pairs = [(c.procs, c.conns) for c in cells]
    assert len(pairs) == 13 and pairs == sorted(pairs)
    assert (2, 256) in pairs and (8, 32) in pairs and (8, 256) in pairs
    # A matrix asked for is run as asked.
    assert [(c.procs, c.conns) for c in scale.cells_of(argparse.Namespace(
        quick=False, procs=[2], conns=None))] == [(2, 1), (2, 16), (2, 64), (2, 256)]
