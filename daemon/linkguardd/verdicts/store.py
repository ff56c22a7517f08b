"""What jobs' plugins said about each NIC: the latest verdict of every reporting process, until
it expires or the process says the NIC is healthy again. Pure: no I/O, the clock is passed in.

Reporters are (pid, uid) pairs: a daemon in another pid namespace than the job (a DaemonSet
without hostPID) is told pid 0 for every process of the job (SCM_CREDENTIALS), so its processes
count as one reporter per user there.

A NIC is *gray* while at least one process's unexpired verdict calls it stalled, lossy or slow.
The store returns a Note when a NIC turns gray and when it stops being gray; the engine records
those as events (Reason.PLUGIN_VERDICT / PLUGIN_VERDICT_CLEARED). It never changes a NIC's
state: one job's view must not take a NIC away from the others.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from linkguardd.facts import PluginVerdictFact
from linkguardd.states import Reason

NS_PER_S = 1_000_000_000
# Processes remembered per NIC: a host runs one process per GPU (8, at most a few dozen with
# MPS); beyond this the stalest report goes, so memory stays bounded whatever local users send.
MAX_REPORTERS = 256


@dataclass(frozen=True)
class Report:
    """One process's latest gray verdict on one NIC."""

    fact: PluginVerdictFact  # the latest datagram (its at_ns: when it arrived)
    first_ns: int  # when this process first called the NIC gray (since it last cleared)
    count: int  # reports since first_ns

    @property
    def last_ns(self) -> int:
        return self.fact.at_ns


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


class VerdictStore:
    def __init__(self, ttl_s: float, ifnames: Iterable[str] = ()) -> None:
        self.ttl_ns = int(ttl_s * NS_PER_S)
        self._reports: dict[str, dict[tuple[int, int], Report]] = {n: {} for n in ifnames}
        self.accepted: dict[tuple[str, str], int] = {}  # (NIC, verdict) -> reports, for /metrics

    def configure(self, ttl_s: float, ifnames: Iterable[str]) -> None:
        """Reload: a new time to live; NICs no longer monitored are forgotten (no note)."""
        self.ttl_ns = int(ttl_s * NS_PER_S)
        wanted = list(ifnames)
        self._reports = {n: self._reports.get(n, {}) for n in wanted}

    def reports(self, ifname: str) -> list[Report]:
        """The NIC's unexpired gray verdicts, newest first."""
        return sorted(self._reports.get(ifname, {}).values(), key=lambda r: -r.last_ns)

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
            if nic.pop((fact.pid, fact.uid), None) is not None and was_gray and not nic:
                return [Note(fact.ifname, Reason.PLUGIN_VERDICT_CLEARED, describe(fact))]
            return []
        old = nic.get((fact.pid, fact.uid))
        nic[fact.pid, fact.uid] = (Report(fact, fact.at_ns, 1) if old is None
                         else replace(old, fact=fact, count=old.count + 1))
        if len(nic) > MAX_REPORTERS:
            del nic[min(nic, key=lambda who: nic[who].last_ns)]
        return [] if was_gray else [Note(fact.ifname, Reason.PLUGIN_VERDICT, describe(fact))]

    def expire(self, now_ns: int) -> list[Note]:
        notes = []
        for ifname, nic in self._reports.items():
            gone = [who for who, r in nic.items() if self.expires_ns(r) <= now_ns]
            if not gone:
                continue
            last = max((nic.pop(who) for who in gone), key=lambda r: r.last_ns)
            if not nic:
                notes.append(Note(ifname, Reason.PLUGIN_VERDICT_CLEARED,
                                  f"no report for {self.ttl_ns / NS_PER_S:g} s; the last: "
                                  + describe(last.fact)))
        return notes

    def next_expiry_ns(self) -> int | None:
        return min((self.expires_ns(r) for nic in self._reports.values() for r in nic.values()),
                   default=None)
