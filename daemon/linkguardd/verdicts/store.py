"""What jobs' plugins said about each NIC: the latest verdict of every reporting process, until
it expires or the process says the NIC is healthy again. Pure: no I/O, the clock is passed in.

Reporters are (pid, uid) pairs: a daemon in another pid namespace than the job (a DaemonSet
without hostPID) is told pid 0 for every process of the job (SCM_CREDENTIALS), so its processes
count as one reporter per user there.

A NIC is *gray* while at least one process's unexpired verdict calls it stalled, lossy or slow.
The store returns a Note when a NIC turns gray and when it stops being gray; the engine records
those as events (Reason.PLUGIN_VERDICT / PLUGIN_VERDICT_CLEARED). It never changes a NIC's
state: one job's view must not take a NIC away from the others.

Any local user can report, so neither the notes nor the reporters may grow with what one user
sends: a NIC gets at most one note per NOTE_INTERVAL_S (the changes in between are held and
come as one note with their count, when the interval ends), and one uid holds at most
MAX_REPORTERS_PER_UID of a NIC's reporters (a new one evicts that uid's stalest first; past
MAX_REPORTERS the stalest of the uid with the most goes), so no user can push out another's.

A flood of reports costs each one a constant: a NIC's reports are kept stalest first with a
count per uid, so neither the next expiry nor making room for a reporter reads them all.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property

from linkguardd.facts import PluginVerdictFact
from linkguardd.states import Reason

NS_PER_S = 1_000_000_000
# Processes remembered per NIC: a host runs one process per GPU (8, at most a few dozen with
# MPS); beyond this the stalest report goes, so memory stays bounded whatever local users send.
MAX_REPORTERS = 256
MAX_REPORTERS_PER_UID = 64  # one user's processes of a host: a GPU each, a few with MPS
# Gray/clear notes are events in the history (1024) and the control file's ring: one per NIC
# a minute keeps a flapping report, or a user who flips it on purpose, from pushing the real
# transitions out (hours of history at 8 NICs), and a minute's delay of a clear costs nothing.
NOTE_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Report:
    """One process's latest gray verdict on one NIC."""

    fact: PluginVerdictFact  # the latest datagram (its at_ns: when it arrived)
    first_ns: int  # when this process first called the NIC gray (since it last cleared)
    count: int  # reports since first_ns

    @property
    def last_ns(self) -> int:
        return self.fact.at_ns

    @cached_property
    def detail(self) -> str:
        """describe(fact), worded once: every status shows every report (256 a NIC at most)."""
        return describe(self.fact)


@dataclass(frozen=True)
class Note:
    ifname: str
    reason: Reason
    detail: str


def describe(f: PluginVerdictFact) -> str:
    """'stalled for 812 ms (pid 4242 uid 1000, conn 0000c0ffee, primary path to 198.18.1.2:1)'"""
    numbers = [f"for {f.for_ms} ms" if f.for_ms else "",
               f"{f.rate_bps * 8 / 1e9:.3g} of {f.expected_bps * 8 / 1e9:.3g} Gbit/s"
               if f.rate_bps and f.expected_bps else
               f"{f.rate_bps * 8 / 1e9:.3g} Gbit/s" if f.rate_bps else "",
               f"{f.loss_ppm / 1e4:.3g} % lost" if f.loss_ppm else ""]
    who = [f"pid {f.pid} uid {f.uid}", f"conn {f.conn:016x}" if f.conn else "",
           ("backup" if f.path else "primary") + " path" + (f" to {f.peer}" if f.peer else "")]
    return " ".join([f.verdict, *filter(None, numbers)]) + f" ({', '.join(filter(None, who))})"


class _Reporters:
    """One NIC's reports by (pid, uid), stalest first, and how many each uid holds."""

    def __init__(self) -> None:
        self.by_who: dict[tuple[int, int], Report] = {}
        self.per_uid: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.by_who)

    def get(self, who: tuple[int, int]) -> Report | None:
        return self.by_who.get(who)

    def put(self, who: tuple[int, int], report: Report) -> None:
        if self.by_who.pop(who, None) is None:
            self.per_uid[who[1]] = self.per_uid.get(who[1], 0) + 1
        newest = next(reversed(self.by_who.values()), None)
        self.by_who[who] = report
        if newest is not None and report.last_ns < newest.last_ns:  # older than the newest
            self.by_who = dict(sorted(self.by_who.items(), key=lambda kv: kv[1].last_ns))

    def pop(self, who: tuple[int, int]) -> Report | None:
        report = self.by_who.pop(who, None)
        if report is not None:
            left = self.per_uid.pop(who[1]) - 1
            if left:
                self.per_uid[who[1]] = left
        return report

    def stalest(self) -> Report | None:
        return next(iter(self.by_who.values()), None)

    def stalest_of(self, uids: Iterable[int]) -> tuple[int, int]:
        """The (pid, uid) of the stalest report of any of `uids` (one of them holds one)."""
        wanted = set(uids)
        return next(who for who in self.by_who if who[1] in wanted)


class VerdictStore:
    def __init__(self, ttl_s: float, ifnames: Iterable[str] = ()) -> None:
        self.ttl_ns = int(ttl_s * NS_PER_S)
        self._reports: dict[str, _Reporters] = {n: _Reporters() for n in ifnames}
        self.accepted: dict[tuple[str, str], int] = {}  # (NIC, verdict) -> reports, for /metrics
        self._noted_ns: dict[str, int] = {}  # NIC -> when its latest note went out
        self._held: dict[str, tuple[Note, int]] = {}  # NIC -> latest held note, changes held

    def configure(self, ttl_s: float, ifnames: Iterable[str]) -> None:
        """Reload: a new time to live; NICs no longer monitored are forgotten (no note)."""
        self.ttl_ns = int(ttl_s * NS_PER_S)
        wanted = list(ifnames)
        self._reports = {n: self._reports.get(n) or _Reporters() for n in wanted}
        self._held = {n: h for n, h in self._held.items() if n in self._reports}

    def reports(self, ifname: str) -> list[Report]:
        """The NIC's unexpired gray verdicts, newest first."""
        nic = self._reports.get(ifname)
        return sorted(nic.by_who.values(), key=lambda r: -r.last_ns) if nic else []

    def expires_ns(self, report: Report) -> int:
        return report.last_ns + self.ttl_ns

    def gray(self, ifname: str) -> bool:
        return bool(self._reports.get(ifname))

    def report(self, fact: PluginVerdictFact) -> list[Note]:
        """Take one verdict (of a monitored NIC) into account."""
        nic = self._reports.get(fact.ifname)
        if nic is None:
            return []
        key = (fact.ifname, fact.verdict)
        self.accepted[key] = self.accepted.get(key, 0) + 1
        was_gray = bool(nic)
        if fact.verdict == "healthy":
            if nic.pop((fact.pid, fact.uid)) is not None and was_gray and not nic:
                return self._note(Note(fact.ifname, Reason.PLUGIN_VERDICT_CLEARED,
                                       describe(fact)), fact.at_ns)
            return []
        old = nic.get((fact.pid, fact.uid))
        if old is None:
            _make_room(nic, fact.uid)
        nic.put((fact.pid, fact.uid), Report(fact, fact.at_ns, 1) if old is None
                else replace(old, fact=fact, count=old.count + 1))
        if was_gray:
            return []
        return self._note(Note(fact.ifname, Reason.PLUGIN_VERDICT, describe(fact)), fact.at_ns)

    def _note(self, note: Note, now_ns: int) -> list[Note]:
        """`note` now, or held until the NIC's interval ends (at most one note per interval)."""
        last = self._noted_ns.get(note.ifname)
        if note.ifname not in self._held and (
                last is None or now_ns - last >= NOTE_INTERVAL_S * NS_PER_S):
            self._noted_ns[note.ifname] = now_ns
            return [note]
        held = self._held.get(note.ifname)
        self._held[note.ifname] = (note, (held[1] if held else 0) + 1)
        return []

    def _release_held(self, now_ns: int) -> list[Note]:
        due = [n for n in self._held if now_ns >= self._held_due_ns(n)]
        out = []
        for ifname in due:
            note, changes = self._held.pop(ifname)
            self._noted_ns[ifname] = now_ns
            out.append(replace(note, detail=f"{note.detail}; {changes} gray/clear change"
                               f"{'s' if changes > 1 else ''} in {NOTE_INTERVAL_S:g} s, "
                               "coalesced into this one"))
        return out

    def _held_due_ns(self, ifname: str) -> int:
        return self._noted_ns.get(ifname, 0) + int(NOTE_INTERVAL_S * NS_PER_S)

    def expire(self, now_ns: int) -> list[Note]:
        notes = self._release_held(now_ns)
        for ifname, nic in self._reports.items():
            last = None  # the newest of the expired reports: the stalest go first
            while (stalest := nic.stalest()) is not None and self.expires_ns(stalest) <= now_ns:
                last = nic.pop((stalest.fact.pid, stalest.fact.uid))
            if last is None:
                continue
            if not nic:
                notes += self._note(Note(ifname, Reason.PLUGIN_VERDICT_CLEARED,
                                         f"no report for {self.ttl_ns / NS_PER_S:g} s; the "
                                         "last: " + describe(last.fact)), now_ns)
        return notes

    def next_expiry_ns(self) -> int | None:
        """When expire() has something to do: a report's expiry or a held note's release."""
        stalest = (nic.stalest() for nic in self._reports.values())
        return min([*(self.expires_ns(r) for r in stalest if r is not None),
                    *(self._held_due_ns(n) for n in self._held)], default=None)


def _make_room(nic: _Reporters, uid: int) -> None:
    """Before `uid` adds a reporter: its own stalest goes when it holds its share; when the NIC
    is full, the stalest report of the uids holding the most (never another user's first)."""
    if nic.per_uid.get(uid, 0) >= MAX_REPORTERS_PER_UID:
        nic.pop(nic.stalest_of((uid,)))
    elif len(nic) >= MAX_REPORTERS:
        most = max(nic.per_uid.values())
        nic.pop(nic.stalest_of(u for u, n in nic.per_uid.items() if n == most))
