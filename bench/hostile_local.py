"""Issue 30's local attacks on a live linkguardd, measured on two builds in the same run.

    python -m bench.hostile_local [--before d167fb8] [--seconds 10] [--rounds 1] [--json out.json]

"before" is the daemon and CLI of a commit (exported with `git archive` into a temporary
directory and run from there with this venv's Python), "after" the working tree. Each build runs
in a throw-away 1-host x 2-rail lab under a soft open-file limit of 1024 (systemd's default), and
takes, one after the other:

  idle       the same samples with no attack, for --seconds: this machine's baseline.
  verdicts   1100 uids (setresuid in 4 sender processes; root) flip rail1 stalled/healthy as fast
             as they can for --seconds. Measured: datagrams sent (the kernel queued them),
             accepted and rejected (read and refused by the daemon), events added,
             whether the startup transitions are still in `events`, daemon CPU, log bytes/s,
             GetStatus p50/p99 on the read-only socket, and the shm heartbeat's gaps (p99, max;
             written every 50 ms) and lateness (p99 of each gap less the period), beside the
             lateness of a reference process that only sleeps 50 ms at a time (what the
             machine gives any sleeper: the part of the heartbeat's that is not the daemon's).
  watchers   200 Watch streams that never read, while one uid (one process) flips rail0
             for --seconds; events added, RSS before, at the end, and after the cancel.
  fds        1100 idle connections to the read-only socket; then GetStatus and Drain on the
             admin socket (each with a 5 s deadline).
With --rounds N the two builds take turns N times (before, after; then after, before; ...), so
a machine whose load drifts weighs on both alike; the JSON has every round under "rounds".
Each daemon runs at the Nice= of its own build's systemd unit (0 where the unit sets none), as
systemd would start it; the JSON names it and the 1-minute load average at the round's start.
Every loop is bounded in count and time; every process started here is ended by its PID.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from bench.detect_latency import BenchDaemon
from bench.proc_usage import TICKS_PER_S, footprint
from linkguard.v1 import linkguard_pb2 as pb
from linkguard.v1 import linkguard_pb2_grpc as pb_grpc
from linkguard_lab.lab import Lab, unique_prefix
from linkguardd.settings import Settings
from linkguardd.shm.reader import ShmReader
from linkguardd.verdicts import wire

REPO = Path(__file__).resolve().parents[1]
UIDS = range(100_000, 101_100)  # 1100 uids no one has (as a subuid range would give)
SENDERS = 4  # sender processes sharing the uids (this machine has few cores)
WATCHERS = 200
CONNECTIONS = 1100
SYSTEMD_NOFILE = "--nofile=1024:"  # systemd's default soft limit (the hard one stays)
DEADLINE_S = 5.0
REFERENCE_LIMIT_S = 120.0  # the reference sleeper's bound, past any phase
MAX_ROUNDS = 10  # each round takes about a minute per build at --seconds 10
HEARTBEAT_MS = Settings().heartbeat_interval_ms  # the daemon runs with its default period
_DATAGRAM = struct.Struct("<4sHBB16sIIQQQ48s")  # plugin/src/daemon/verdict.h, verdicts/wire.py


def datagram(kind: int, nic: str) -> bytes:
    return _DATAGRAM.pack(wire.MAGIC, 1, kind, 0, nic.encode(), 700, 0, 0, 0, 0, b"")


def sender(path: str, nic: str, uids: list[int], until: float) -> int:
    """A child: as each of `uids` in turn, a stalled then a healthy report on `nic`; returns
    the count."""
    stalled, healthy = datagram(2, nic), datagram(1, nic)
    sent = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
        tx.setblocking(False)
        while time.monotonic() < until:
            for uid in uids:
                os.setresuid(uid, uid, 0)  # the kernel names the real uid (SCM_CREDENTIALS)
                for data in (stalled, healthy):
                    with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                        tx.sendto(data, path)
                        sent += 1
                os.setresuid(0, 0, 0)
    return sent


def flood_verdicts(path: str, nic: str, uids: list[int], seconds: float) -> int:
    """SENDERS child processes for `seconds` (spawned, not forked: grpc threads run here);
    the datagrams they sent."""
    until = time.monotonic() + seconds  # CLOCK_MONOTONIC: the same in every process
    code = ("import sys; from bench.hostile_local import sender; "
            "print(sender(sys.argv[1], sys.argv[3], [int(u) for u in sys.argv[4:]], "
            "float(sys.argv[2])))")
    children = [subprocess.Popen([sys.executable, "-c", code, path, repr(until), nic,
                                  *map(str, uids[i::SENDERS])], cwd=REPO, text=True,
                                 stdout=subprocess.PIPE)
                for i in range(min(SENDERS, len(uids)))]
    total = 0
    for child in children:
        out, _ = child.communicate(timeout=seconds + 60)
        total += int(out.strip() or 0)
    return total


def reference_sleeper(stop_fd: int, period_s: float, limit_s: float) -> None:
    """A child: sleeps `period_s` at a time until `stop_fd` reads EOF (or `limit_s` pass), then
    prints its p99 lateness in ms: what any sleeping process gets of this machine's CPUs."""
    late, until = [], time.monotonic() + limit_s
    while not select.select([stop_fd], [], [], 0)[0] and time.monotonic() < until:
        start = time.monotonic()
        time.sleep(period_s)
        late.append((time.monotonic() - start - period_s) * 1e3)
    print(pct(sorted(late), 99))


class Sampler:
    """While running: GetStatus latency on the read-only socket, and the shm heartbeat's
    gaps, from two threads, and beside them a reference process that sleeps as long as the
    heartbeat's period at a time; stop() returns their numbers."""

    def __init__(self, daemon: BenchDaemon) -> None:
        self.daemon = daemon
        self.latency_s: list[float] = []
        self.beats: list[int] = []
        code = ("import sys; from bench.hostile_local import reference_sleeper; "
                f"reference_sleeper(0, {HEARTBEAT_MS / 1000!r}, {REFERENCE_LIMIT_S!r})")
        self._reference = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, text=True,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True)
                         for f in (self._status, self._heartbeat)]
        for t in self._threads:
            t.start()

    def _status(self) -> None:
        with grpc.insecure_channel(f"unix:{self.daemon.workdir}/linkguard-ro.sock") as ch:
            stub = pb_grpc.LinkguardStub(ch)
            while not self._stop.wait(0.02):
                start = time.perf_counter()
                with contextlib.suppress(grpc.RpcError):
                    stub.GetStatus(pb.GetStatusRequest(), timeout=DEADLINE_S)
                    self.latency_s.append(time.perf_counter() - start)

    def _heartbeat(self) -> None:
        with ShmReader(self.daemon.shm_path) as reader:
            while not self._stop.wait(0.002):
                beat = reader.header().heartbeat_ns
                if not self.beats or beat != self.beats[-1]:
                    self.beats.append(beat)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        reference, _ = self._reference.communicate(timeout=30)  # its stdin closes: it ends
        gaps = sorted((b - a) / 1e6 for a, b in zip(self.beats, self.beats[1:]))
        lat = sorted(x * 1e3 for x in self.latency_s)
        return {"status_p50_ms": pct(lat, 50), "status_p99_ms": pct(lat, 99),
                "heartbeat_gap_p99_ms": pct(gaps, 99), "heartbeat_gap_max_ms": max(gaps or [0]),
                # how much later than its period the heartbeat came (issue 30's "under 20 ms")
                "heartbeat_late_p99_ms": pct([g - HEARTBEAT_MS for g in gaps], 99),
                "reference_late_p99_ms": float(reference.strip() or -1)}


def pct(values: list[float], p: float) -> float:
    return round(values[min(len(values) - 1, int(len(values) * p / 100))], 2) if values else -1


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (proc(5))


def events(daemon: BenchDaemon) -> list[Any]:
    with grpc.insecure_channel(f"unix:{daemon.workdir}/linkguard.sock") as ch:
        return list(pb_grpc.LinkguardStub(ch).ListEvents(pb.ListEventsRequest(),
                                                         timeout=DEADLINE_S).events)


def verdict_counts(lab: Lab) -> tuple[float, float]:
    """(accepted, rejected) verdict datagrams since the daemon started, from its /metrics."""
    out = lab.run("a", ["curl", "-s", "--max-time", "5", "http://127.0.0.1:9846/metrics"]).stdout

    def total(family: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in out.splitlines()
                   if line.startswith(family + "{"))

    return total("linkguard_plugin_verdicts_total"), \
        total("linkguard_plugin_verdict_rejects_total")


def idle(daemon: BenchDaemon, seconds: float) -> dict[str, float]:
    """The same samples with no attack: the baseline of this machine, this run."""
    sampler = Sampler(daemon)
    time.sleep(seconds)  # measuring for a fixed time is the point here
    return sampler.stop()


def verdict_flood(lab: Lab, daemon: BenchDaemon, seconds: float) -> dict[str, Any]:
    before = events(daemon)
    log_before, cpu_before, start = len(daemon.stderr()), cpu_s(daemon.pid), time.monotonic()
    sampler = Sampler(daemon)
    sent = flood_verdicts(str(daemon.workdir / "linkguard-verdict.sock"), "rail1", list(UIDS),
                          seconds)
    wall = time.monotonic() - start
    out = sampler.stop()
    after = events(daemon)
    startup = {e.seq for e in before}
    accepted, rejected = verdict_counts(lab)
    out.update(sent=sent, accepted=accepted, rejected=rejected, events_added=len(after) - len(before)
               if len(after) < 1024 else f">= {after[-1].seq - before[-1].seq}",
               startup_events_kept=startup <= {e.seq for e in after},
               cpu_percent=round(100 * (cpu_s(daemon.pid) - cpu_before) / wall, 1),
               log_bytes_per_s=round((len(daemon.stderr()) - log_before) / wall))
    return out


def abandoned_watchers(daemon: BenchDaemon, seconds: float) -> dict[str, Any]:
    rss = [footprint(daemon.pid).rss_kib]
    channel = grpc.insecure_channel(f"unix:{daemon.workdir}/linkguard-ro.sock")
    stub = pb_grpc.LinkguardStub(channel)
    streams = [stub.Watch(pb.WatchRequest()) for _ in range(WATCHERS)]
    opened = 0
    for stream in streams:
        with contextlib.suppress(grpc.RpcError):
            stream.initial_metadata()
            opened += 1
    head = events(daemon)[-1].seq
    # rail0: rail1 may still be gray from the flood before (its reports expire in minutes)
    sent = flood_verdicts(str(daemon.workdir / "linkguard-verdict.sock"), "rail0", [UIDS[0]],
                          seconds)
    rss.append(footprint(daemon.pid).rss_kib)
    added = events(daemon)[-1].seq - head
    for stream in streams:
        stream.cancel()
    channel.close()
    time.sleep(2.0)  # the daemon's loop unsubscribes them (a measurement pause, not a test wait)
    rss.append(footprint(daemon.pid).rss_kib)
    return {"streams_opened": opened, "one_uid_sent": sent, "events_added": added,
            "rss_mib": [round(r / 1024, 1) for r in rss]}


def fd_flood(daemon: BenchDaemon) -> dict[str, Any]:
    held = []
    for _ in range(CONNECTIONS):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(0.2)
        with contextlib.suppress(OSError):
            sock.connect(str(daemon.workdir / "linkguard-ro.sock"))
        held.append(sock)
    try:
        with grpc.insecure_channel(f"unix:{daemon.workdir}/linkguard.sock") as ch:
            stub = pb_grpc.LinkguardStub(ch)
            out = {}
            for name, call in (("admin_status", lambda: stub.GetStatus(
                    pb.GetStatusRequest(), timeout=DEADLINE_S)),
                               ("admin_drain", lambda: stub.Drain(pb.DrainRequest(
                                   nic="rail0", reason="bench", force=True),
                                   timeout=DEADLINE_S))):
                out[name] = outcome(call)
            out["admin_status_again"] = outcome(lambda: pb_grpc.LinkguardStub(
                grpc.insecure_channel(f"unix:{daemon.workdir}/linkguard.sock")).GetStatus(
                    pb.GetStatusRequest(), timeout=DEADLINE_S))
        out["daemon_fds"] = footprint(daemon.pid).fds
        out["emfile_logged"] = "Too many open files" in daemon.stderr()
    finally:
        for sock in held:
            sock.close()
    return out


def outcome(call: Callable[[], Any]) -> str:
    start = time.perf_counter()
    try:
        call()
    except grpc.RpcError as exc:
        return f"{exc.code().name} after {time.perf_counter() - start:.1f} s"
    return f"ok in {(time.perf_counter() - start) * 1e3:.1f} ms"


def unit_nice(commit: str | None) -> int:
    """The Nice= of `commit`'s systemd unit (None: this tree's), 0 where it sets none: each
    build's daemon runs at the priority its own unit gives it."""
    unit = "systemd/linkguardd.service"
    text = (REPO / unit).read_text() if commit is None else subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:{unit}"], check=True, capture_output=True,
        text=True, timeout=60).stdout
    values = [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("Nice=")]
    return int(values[-1]) if values else 0


@contextlib.contextmanager
def build(commit: str | None) -> Iterator[tuple[tuple[str, ...], dict[str, str]]]:
    """(command, environment) that run linkguardd of `commit` (None: this tree), at its
    unit's Nice."""
    daemon = ("nice", "-n", str(unit_nice(commit)),
              sys.executable, "-c", "from linkguardd.main import main; main()")
    if commit is None:
        yield daemon, {}
        return
    root = Path(tempfile.mkdtemp(prefix="lg-before-"))
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "daemon", "cli"],
                                 check=True, capture_output=True, timeout=60).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True, timeout=60)
        for generated in (REPO / "daemon" / "linkguard" / "v1").glob("*pb2*"):
            shutil.copy(generated, root / "daemon" / "linkguard" / "v1")  # proto unchanged
        yield daemon, {"PYTHONPATH": f"{root / 'daemon'}:{root / 'cli'}"}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_build(commit: str | None, seconds: float) -> dict[str, Any]:
    with build(commit) as (command, env), \
            Lab(unique_prefix("lgh"), hosts=1, rails=2).up() as lab:
        workdir = Path(tempfile.mkdtemp(prefix="lgh-"))
        workdir.chmod(0o755)  # the senders' uids reach the verdict socket, as in /run/linkguard
        daemon = BenchDaemon(lab, "a", ["--interfaces", "rail0,rail1", "--hold-down-ms", "500"],
                             workdir, command=("prlimit", SYSTEMD_NOFILE, "--", *command),
                             env=env)
        try:
            daemon.start()
            time.sleep(1.0)  # past the hold-down: the startup transitions are in the history
            return {"nice": unit_nice(commit), "load_1min": os.getloadavg()[0],
                    "idle": idle(daemon, seconds), "verdicts": verdict_flood(lab, daemon, seconds),
                    "watchers": abandoned_watchers(daemon, seconds),
                    "fds": fd_flood(daemon)}
        finally:
            with contextlib.suppress(RuntimeError):  # SIGTERM by PID, SIGKILL after 10 s
                daemon.stop()
            with contextlib.suppress(FileNotFoundError):
                daemon.shm_path.unlink()
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="d167fb8", help="commit of the 'before' build")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each flood")
    parser.add_argument("--rounds", type=int, default=1, help="times each build runs, in turn")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be 1..{MAX_ROUNDS}")
    if os.geteuid() != 0:
        parser.error("needs root (network namespaces, setresuid)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * CONNECTIONS  # the flood's connections are ours too
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), max(hard, wanted)))
    rounds = []
    for i in range(args.rounds):
        order = [("before", args.before), ("after", None)][::1 if i % 2 == 0 else -1]
        rounds.append({name: run_build(commit, args.seconds) for name, commit in order})
    results = {**rounds[0], "rounds": rounds, "seconds": args.seconds}
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
