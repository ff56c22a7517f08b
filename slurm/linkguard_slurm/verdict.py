"""Whether a node's NICs let it run NCCL jobs: a pure function of linkguardd's answer and time.

A NIC pair is a NIC and its backup (the plugin's device: traffic moves between the two); a NIC
with no backup is a pair of one. A pair with no healthy member leaves its device without a
path, so the node must leave service. Optionally, a NIC out of service for too long drains the
node too: it runs without protection until someone repairs it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from linkguard.v1 import linkguard_pb2 as pb
from linkguard_slurm.settings import Settings

REASON_PREFIX = "linkguard:"  # how the health check recognises the drains that are its own


def state_name(value: int) -> str:
    try:
        return pb.NicState.Name(value).removeprefix("NIC_STATE_")  # type: ignore[arg-type]
    except ValueError:
        return f"STATE_{value}"


@dataclass(frozen=True)
class Verdict:
    known: bool  # False: linkguardd cannot tell yet (no NICs, or a NIC without a state)
    problems: tuple[str, ...] = ()
    summary: str = ""

    @property
    def healthy(self) -> bool:
        return self.known and not self.problems

    @property
    def reason(self) -> str:
        """The Slurm drain reason: the prefix, then every problem."""
        return f"{REASON_PREFIX} {'; '.join(self.problems)}"


def pairs(nics: Sequence[pb.Nic]) -> list[tuple[str, ...]]:
    """Each NIC with its backup, in table order, once: rail0<->rail1 is one pair."""
    names = {n.name for n in nics}
    seen: set[frozenset[str]] = set()
    out = []
    for nic in nics:
        members = (nic.name,) + ((nic.backup,) if nic.backup in names - {nic.name} else ())
        if frozenset(members) not in seen:
            seen.add(frozenset(members))
            out.append(members)
    return out


def off_service_since(nic: pb.Nic, events: Sequence[pb.Event]) -> float:
    """Wall-clock time the NIC last left UP: back through its consecutive non-UP states in the
    event history (oldest first). Without history: when its current state began (a later time,
    so a bound is never crossed early)."""
    since = nic.since_unix
    for event in reversed([e for e in events if e.nic == nic.name]):
        if event.new_state == pb.NIC_STATE_UP:
            break
        since = min(since, event.time_unix)
        if event.old_state in (pb.NIC_STATE_UP, pb.NIC_STATE_UNKNOWN):
            break
    return since


def judge(nics: Sequence[pb.Nic], settings: Settings, now_unix: float,
          off_since: Mapping[str, float] | None = None) -> Verdict:
    """`off_since`: name -> off_service_since(); missing names use since_unix."""
    if not nics:
        return Verdict(False, summary="linkguardd monitors no NIC")
    undecided = [n.name for n in nics if n.state == pb.NIC_STATE_UNKNOWN]
    if undecided:
        return Verdict(False, summary=f"no state yet for {', '.join(undecided)}")
    healthy_states = {pb.NIC_STATE_UP}
    if settings.degraded_is_healthy:
        healthy_states.add(pb.NIC_STATE_DEGRADED)
    by_name = {n.name: n for n in nics}
    problems = []
    failed: set[str] = set()
    groups = pairs(nics)
    for members in groups:
        if not any(by_name[m].state in healthy_states for m in members):
            states = ", ".join(f"{m} {state_name(by_name[m].state)}" for m in members)
            what = f"pair {'+'.join(members)}" if len(members) > 1 else f"{members[0]} (no backup)"
            problems.append(f"{what} has no healthy NIC ({states})")
            failed.update(members)
    bound = settings.max_off_service_s
    if bound > 0:
        for nic in nics:
            since = (off_since or {}).get(nic.name, nic.since_unix)
            if nic.state != pb.NIC_STATE_UP and nic.name not in failed and now_unix - since > bound:
                problems.append(f"{nic.name} out of service for over {bound:g} s "
                                f"({state_name(nic.state)})")
    summary = f"{len(groups)} NIC pair(s): {', '.join('+'.join(m) for m in groups)}"
    return Verdict(True, tuple(problems), summary)
