"""What jobs' plugins report about their connections: the latest census of every reporting
process, and what the operator surfaces read of it. Pure: no I/O; the clock is passed in and the
check whether a pid still lives is injected.

A process is keyed by what the kernel says (SCM_CREDENTIALS): (uid, pid), or (uid, 0, instance)
when the kernel gives pid 0 (a daemon in another pid namespace than the job), so a process can
speak only for itself. It is forgotten CENSUS_TTL (settings.plugin_census_ttl_s) after its last
report, at once on its BYE report, and at the next read once its pid is gone (pid 0: by the TTL
only).

Any local user can report, so memory stays bounded whatever users send: one uid holds at most
MAX_PROCESSES_PER_UID processes (a new one evicts that uid's stalest), all uids together at most
MAX_PROCESSES, past which the stalest of the uid with the most goes: no user can evict another's.

Counters in a report are cumulative since the process started; the store adds their deltas to
totals that only grow (for /metrics). A counter that goes down, or a new instance under the same
key, is a restart: its counters are counted from zero again. Within one instance a counter
only grows, so one that reads lower has wrapped (the failure counters are u16).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter

from linkguardd.census.wire import FAILURE_REASONS, MODULI
from linkguardd.facts import NicCensus, PluginCensusFact

NS_PER_S = 1_000_000_000
# A host runs one process per GPU (8, a few dozen with MPS); docs/operators.md, "Who is on the backup".
MAX_PROCESSES_PER_UID = 256
MAX_PROCESSES = 4096
# The plugin sends a heartbeat once a second (LG_CENSUS_INTERVAL_MS) while it has a connection:
# silent for 2.5 of them, at least two reports are missing and its numbers may be old.
SILENT_S = 2.5
# A status of 8 NICs and a scrape read the census about ten times; one sweep may check up to
# MAX_PROCESSES pids and one tally walks them all, so reads within this interval share them
# (unless a report came in between).
SWEEP_INTERVAL_S = 0.1
_ROLES = ("primary", "backup", "away", "standing")
_COUNTERS = tuple(f.name for f in fields(NicCensus))[len(_ROLES) + 1:]
_roles = attrgetter(*_ROLES)  # NicCensus -> its role counts (astuple() is 20 times slower)
_counters = attrgetter(*_COUNTERS)
_MODULI = MODULI[len(_ROLES):]  # the counters' (wire.py)
Key = tuple[int, int, int]  # (uid, pid, instance when pid is 0 else 0)


def pid_alive(pid: int) -> bool:
    """Whether `pid` names a live process (in the daemon's pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


@dataclass
class Process:
    """One reporting process: its latest census and what its counters added since first heard."""

    uid: int
    pid: int
    instance: int
    job: str
    seq: int
    first_ns: int
    last_ns: int
    nics: dict[str, NicCensus]  # the latest report's lines (monitored NICs)
    cumulative: dict[str, NicCensus]  # the latest counters of every NIC it ever reported
    failovers: int = 0  # deltas since the daemon first heard of it, all NICs
    failures: int = 0

    @property
    def name(self) -> str:
        """The job it belongs to, or itself when it found no job id."""
        return self.job or (f"pid {self.pid}" if self.pid else
                            f"uid {self.uid} process {self.instance:016x}")


@dataclass(frozen=True)
class NicTraffic:
    """Connections of every reporting process on one NIC, and their counters' totals."""

    processes: int = 0  # processes with a connection or a standby path on the NIC
    primary: int = 0
    backup: int = 0
    away: int = 0  # whose primary is this NIC and whose data is on the backup
    standing: int = 0
    silent: int = 0  # of `processes`, those silent for SILENT_S: their numbers may be old
    failovers: int = 0  # since the daemon started, every process (a counter)
    reintegrations: int = 0
    failures: Mapping[str, int] = field(default_factory=dict)  # FAILURE_REASONS -> count

    @property
    def on_nic(self) -> int:
        """Connections whose data runs on this NIC: what a drain moves."""
        return self.primary + self.backup


@dataclass(frozen=True)
class JobTraffic:
    """The processes of one job (or one process without a job id) and their connections."""

    job: str  # the job id, or "pid N"
    uids: tuple[int, ...]
    pids: tuple[int, ...]  # 0 for processes in another pid namespace
    nics: tuple[NicCensus, ...]  # summed per NIC, counters: since the daemon heard of them
    failovers: int
    failures: int
    silent_s: float  # since the job's latest report

    @property
    def connections(self) -> int:
        return sum(n.primary + n.backup for n in self.nics)

    @property
    def on_backup(self) -> int:
        return sum(n.backup for n in self.nics)


class CensusStore:
    def __init__(self, ttl_s: float, ifnames: Iterable[str] = (),
                 alive: Callable[[int], bool] = pid_alive) -> None:
        self.ttl_ns = int(ttl_s * NS_PER_S)
        self.ifnames = list(ifnames)
        self.alive = alive
        self._processes: dict[Key, Process] = {}
        self.failovers: dict[str, int] = {}  # NIC -> total, for /metrics
        self.reintegrations: dict[str, int] = {}
        self.failures: dict[tuple[str, str], int] = {}  # (NIC, reason) -> total
        self.stale_reports = 0  # reports older than one already taken (seq), dropped
        self.evicted = 0  # processes pushed out by the caps
        self.rejected: dict[str, int] = {}  # reason -> census datagrams not taken, for /metrics
        self._swept_ns: int | None = None
        # NIC -> the role counts of every process, and how many processes: kept as reports
        # come and go, so a read costs no walk over up to MAX_PROCESSES processes
        self._sums: dict[str, list[int]] = {}
        self._changes = 0  # reports and removals, so the silent count knows it is out of date
        self._silent: tuple[int, int | None, dict[str, int]] | None = None

    def configure(self, ttl_s: float, ifnames: Iterable[str]) -> None:
        """Reload: a new time to live; NICs no longer monitored drop out of every view."""
        self.ttl_ns = int(ttl_s * NS_PER_S)
        self.ifnames = list(ifnames)
        self._changes += 1
        for proc in self._processes.values():
            self._hold(proc, -1)
            proc.nics = {n: c for n, c in proc.nics.items() if n in self.ifnames}
            self._hold(proc, 1)

    # ---- reports ---------------------------------------------------------------------------
    def report(self, fact: PluginCensusFact) -> None:
        """Take one census (its NICs: monitored ones) into account."""
        key = (fact.uid, fact.pid, 0 if fact.pid else fact.instance)
        self._changes += 1
        proc = self._processes.get(key)
        if proc is not None and proc.instance == fact.instance and fact.seq <= proc.seq:
            self.stale_reports += 1  # an older report than the one taken: it says nothing new
            return
        if proc is not None:
            self._hold(proc, -1)
        if proc is None or proc.instance != fact.instance:  # new, or restarted under the key
            if proc is None:
                self._make_room(fact.uid)
            proc = Process(fact.uid, fact.pid, fact.instance, fact.job, fact.seq, fact.at_ns,
                           fact.at_ns, {}, {})
            self._processes[key] = proc
        proc.job, proc.seq, proc.last_ns = fact.job, fact.seq, fact.at_ns
        proc.nics = {n.ifname: n for n in fact.nics if n.ifname in self.ifnames}
        for nic in proc.nics.values():
            self._count(proc, nic)
        if fact.bye:
            del self._processes[key]
        else:
            self._hold(proc, 1)

    def _hold(self, proc: Process, sign: int) -> None:
        """Adds (1) or takes away (-1) the process's lines in the per-NIC sums."""
        for name, nic in proc.nics.items():
            line = _roles(nic)
            if any(line):
                sums = self._sums.setdefault(name, [0] * (len(_ROLES) + 1))
                for i, count in enumerate(line):
                    sums[i] += sign * count
                sums[-1] += sign  # the processes on the NIC

    def _count(self, proc: Process, nic: NicCensus) -> None:
        old = proc.cumulative.get(nic.ifname)
        before = _counters(old) if old else (0,) * len(_COUNTERS)
        now = _counters(nic)
        # A restart is a new instance (a new Process, from zero): lower here means wrapped.
        delta = dict(zip(_COUNTERS, ((n - b) % m for n, b, m in zip(now, before, _MODULI))))
        proc.cumulative[nic.ifname] = nic
        name = nic.ifname
        self.failovers[name] = self.failovers.get(name, 0) + delta["failovers"]
        self.reintegrations[name] = self.reintegrations.get(name, 0) + delta["reintegrations"]
        for reason in FAILURE_REASONS:
            got = delta[f"failed_{reason}"]
            if got:
                self.failures[name, reason] = self.failures.get((name, reason), 0) + got
                proc.failures += got
        proc.failovers += delta["failovers"]

    def _make_room(self, uid: int) -> None:
        """Before `uid` adds a process: its own stalest goes when it holds its share; when the
        store is full, the stalest of the uid holding the most (never another user's first)."""
        per_uid: dict[int, int] = {}
        for who in self._processes:
            per_uid[who[0]] = per_uid.get(who[0], 0) + 1
        if per_uid.get(uid, 0) >= MAX_PROCESSES_PER_UID:
            victim = uid
        elif len(self._processes) >= MAX_PROCESSES:
            victim = max(per_uid, key=lambda u: per_uid[u])
        else:
            return
        self._hold(self._processes.pop(min((k for k in self._processes if k[0] == victim),
                                           key=lambda k: self._processes[k].last_ns)), -1)
        self.evicted += 1

    def expire(self, now_ns: int) -> None:
        """Forget processes silent for the TTL, and those whose pid is gone."""
        self._swept_ns = now_ns
        gone = [k for k, p in self._processes.items()
                if p.last_ns + self.ttl_ns <= now_ns or (p.pid and not self.alive(p.pid))]
        for key in gone:
            self._hold(self._processes.pop(key), -1)
        self._changes += bool(gone)

    def _swept(self, now_ns: int) -> None:
        if self._swept_ns is None or not 0 <= now_ns - self._swept_ns < SWEEP_INTERVAL_S * 1e9:
            self.expire(now_ns)

    # ---- reads -----------------------------------------------------------------------------
    def processes(self, now_ns: int) -> list[Process]:
        """The unexpired processes, newest report first."""
        self._swept(now_ns)
        return sorted(self._processes.values(), key=lambda p: -p.last_ns)

    def process_count(self, now_ns: int) -> int:
        self._swept(now_ns)
        return len(self._processes)

    def nic_traffic(self, ifname: str, now_ns: int) -> NicTraffic:
        self._swept(now_ns)
        if self._silent is None or self._silent[:2] != (self._changes, self._swept_ns):
            self._silent = (self._changes, self._swept_ns, self._count_silent(now_ns))
        *roles, processes = self._sums.get(ifname) or [0] * (len(_ROLES) + 1)
        return self._nic_totals(ifname, dict(zip(_ROLES, roles)), processes,
                                self._silent[2].get(ifname, 0))

    def _count_silent(self, now_ns: int) -> dict[str, int]:
        """NIC -> processes on it without a report for SILENT_S (few, unless under a flood)."""
        silent: dict[str, int] = {}
        limit = now_ns - SILENT_S * NS_PER_S
        for proc in self._processes.values():
            if proc.last_ns <= limit:
                for name, nic in proc.nics.items():
                    if any(_roles(nic)):
                        silent[name] = silent.get(name, 0) + 1
        return silent

    def _nic_totals(self, ifname: str, roles: dict[str, int], processes: int,
                    silent: int) -> NicTraffic:
        return NicTraffic(
            processes=processes, silent=silent, **roles,
            failovers=self.failovers.get(ifname, 0),
            reintegrations=self.reintegrations.get(ifname, 0),
            failures={r: self.failures.get((ifname, r), 0) for r in FAILURE_REASONS})

    def reject(self, reason: str, count: int = 1) -> None:
        """Count datagrams the monitor did not take (datagram.REJECT_REASONS)."""
        self.rejected[reason] = self.rejected.get(reason, 0) + count

    def dump(self, now_ns: int) -> dict[str, object]:
        return {"jobs": [asdict(j) for j in self.jobs(now_ns)],
                "stale_reports": self.stale_reports, "evicted": self.evicted,
                "rejected": dict(self.rejected)}

    def jobs(self, now_ns: int) -> list[JobTraffic]:
        """Every reporting job (processes without a job id each on their own), by name."""
        by_job: dict[str, list[Process]] = {}
        for proc in self.processes(now_ns):
            by_job.setdefault(proc.name, []).append(proc)
        return [_job(name, procs, now_ns) for name, procs in sorted(by_job.items())]


def _job(name: str, procs: list[Process], now_ns: int) -> JobTraffic:
    sums: dict[str, list[int]] = {}
    for proc in procs:
        for nic in proc.nics.values():
            line = sums.setdefault(nic.ifname, [0] * len(_ROLES))
            sums[nic.ifname] = [a + b for a, b in zip(line, _roles(nic))]
    return JobTraffic(
        job=name, uids=tuple(sorted({p.uid for p in procs})),
        pids=tuple(sorted(p.pid for p in procs)),
        nics=tuple(NicCensus(n, *sums[n]) for n in sorted(sums)),
        failovers=sum(p.failovers for p in procs), failures=sum(p.failures for p in procs),
        silent_s=(now_ns - max(p.last_ns for p in procs)) / NS_PER_S)
