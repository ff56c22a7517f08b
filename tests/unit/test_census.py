"""The connection census of jobs' plugins (issue 29), daemon side: the decoder of the datagram
(plugin/src/daemon/census.h is the one definition) and the pure store that keeps each
process's latest census (TTL, BYE, pid gone, per-uid caps, counter deltas across restarts).
The socket, the engine and the operator surfaces: test_census_surfaces.py; fuzzing:
test_hostile_input.py."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkguardd.census import wire
from linkguardd.census.store import (
    MAX_PROCESSES,
    MAX_PROCESSES_PER_UID,
    SILENT_S,
    SWEEP_INTERVAL_S,
    CensusStore,
)
from linkguardd.datagram import REJECT_REASONS, Rejected
from linkguardd.facts import NicCensus, PluginCensusFact

S = 1_000_000_000
RAIL0 = NicCensus("rail0", primary=60, backup=1, away=3, standing=4, failovers=5,
                  reintegrations=6, failed_no_path=7, failed_peer=8, failed_timeout=9,
                  failed_other=65535)
GOOD = wire.encode((RAIL0, NicCensus("rail1", backup=2)), job="4242", seq=7,
                   flags=wire.F_CHANGE, instance=0xFEEDC0DE12345678)


def edit(offset: int, raw: bytes, data: bytes = GOOD) -> bytes:
    return data[:offset] + raw + data[offset + len(raw):]


# ---- the datagram ------------------------------------------------------------------------------
def test_a_valid_census_decodes_field_by_field() -> None:
    assert len(GOOD) == wire.SIZE == 856
    got = wire.decode(GOOD, 4242, 1000, 99)
    assert got == PluginCensusFact(at_ns=99, pid=4242, uid=1000, instance=0xFEEDC0DE12345678,
                                   seq=7, job="4242", change=True, bye=False,
                                   nics=(RAIL0, NicCensus("rail1", backup=2)))
    # the layout of census.h, byte by byte: entry 0's primary at 88 + 16, failed_other at 134
    assert GOOD[:4] == b"LGCS" and GOOD[6] == 2 and GOOD[104] == 60 and GOOD[134:136] == b"\xff\xff"
    bye = wire.decode(wire.encode(flags=wire.F_BYE | wire.F_CHANGE), 0, 0, 0)
    assert bye.bye and bye.change and bye.nics == () and bye.job == ""


LONG_JOB = "j" * 63


@pytest.mark.parametrize("data, reason, words", [
    (GOOD[:-1], "bad_size", "855 bytes, a census has 856"),
    (GOOD + b"\0", "bad_size", "857 bytes"),
    (edit(0, b"LGCX"), "bad_magic", "magic"),
    (edit(4, b"\x02\x00"), "bad_version", "version 2"),
    (edit(6, b"\x11\x00"), "bad_field", "nnics: 17 is more than 16"),
    (edit(12, b"\x04"), "bad_field", "flags: unknown bits 0x4"),
    (edit(12, b"\x00\x00\x00\x80"), "bad_field", "unknown bits 0x80000000"),
    (edit(6, b"\x01"), "bad_field", "entry 1: not zero, but nnics is 1"),
    (edit(88 + 2 * 48 + 47, b"\x01"), "bad_field", "entry 2: not zero"),
    (edit(88 + 48, b"rail0\0"), "bad_field", "entry 1 nic: rail0 is in the report twice"),
    (edit(88, b"\0" * 16), "bad_field", "entry 0 nic"),
    (edit(88, b"rail0/x\0"), "bad_field", "entry 0 nic: 'rail0/x' is not valid"),
    (edit(88, b"ra:l0\0"), "bad_field", "entry 0 nic"),
    (edit(88, b"r" * 16), "bad_field", "entry 0 nic: not a NUL-padded string"),
    (edit(88, b"ra\0l0"), "bad_field", "NUL-padded"),
    (edit(88, b"r\xe4il\0"), "bad_field", "ASCII"),
    (edit(24, b"4242 ;x\0"), "bad_field", "job: '4242 ;x' is not valid"),
    (edit(24, b"j" * 64), "bad_field", "job: not a NUL-padded string"),
    (edit(24, b"42\x1b[2J\0"), "bad_field", "job"),
])
def test_each_bad_field_is_rejected_by_name(data: bytes, reason: str, words: str) -> None:
    with pytest.raises(Rejected, match=words) as exc:
        wire.decode(data, 1, 2, 3)
    assert exc.value.reason == reason and reason in REJECT_REASONS


def test_the_longest_job_and_every_nic_slot_are_taken() -> None:
    nics = tuple(NicCensus(f"rail{i}", primary=i) for i in range(wire.MAX_NICS))
    got = wire.decode(wire.encode(nics, job=LONG_JOB), 1, 2, 3)
    assert got.job == LONG_JOB and [n.primary for n in got.nics] == list(range(16))


# ---- the store ---------------------------------------------------------------------------------
def report(pid: int = 100, at_s: float = 0, *nics: NicCensus, uid: int = 1000, seq: int = 0,
           instance: int = 1, job: str = "", bye: bool = False) -> PluginCensusFact:
    report.seq += 1  # type: ignore[attr-defined]
    return PluginCensusFact(int(at_s * S), pid, uid, instance, seq or report.seq,  # type: ignore[attr-defined]
                            job, bye=bye, nics=nics)


report.seq = 0  # type: ignore[attr-defined]


def store(alive: set[int] | None = None, ttl_s: float = 5) -> CensusStore:
    return CensusStore(ttl_s, ["rail0", "rail1"],
                       alive=(lambda pid: pid in alive) if alive is not None else lambda pid: True)


def test_connections_per_nic_are_summed_over_processes() -> None:
    s = store()
    s.report(report(1, 0, NicCensus("rail0", primary=64, standing=64)))
    s.report(report(2, 0, NicCensus("rail0", away=60), NicCensus("rail1", primary=70, backup=60),
                    NicCensus("eth9", primary=5)))  # not monitored: in no view
    r0, r1 = s.nic_traffic("rail0", 0), s.nic_traffic("rail1", 0)
    assert (r0.processes, r0.primary, r0.backup, r0.away, r0.standing) == (2, 64, 0, 60, 64)
    assert (r1.processes, r1.primary, r1.backup, r1.on_nic) == (1, 70, 60, 130)
    assert s.nic_traffic("eth9", 0).processes == 0
    s.report(report(2, 1, NicCensus("rail1", primary=130)))  # the latest report replaces
    assert s.nic_traffic("rail0", S).away == 0 and s.nic_traffic("rail1", S).primary == 130


def test_a_process_is_forgotten_after_the_ttl_on_bye_and_when_its_pid_is_gone() -> None:
    alive = {1, 2, 3}
    s = store(alive)
    for pid in (1, 2, 3):
        s.report(report(pid, pid, NicCensus("rail0", primary=1)))
    s.report(report(0, 3, NicCensus("rail0", primary=1), instance=77))  # pid 0: TTL only
    assert s.nic_traffic("rail0", int(3 * S)).primary == 4
    s.report(report(2, 4, bye=True))
    alive.discard(3)
    assert [p.pid for p in s.processes(int(4 * S))] == [0, 1]  # 2 said bye, 3 is gone
    assert [p.pid for p in s.processes(int(6 * S))] == [0]  # 1: 5 s after its report at 1 s
    silent = s.nic_traffic("rail0", int(6 * S))
    assert silent.primary == 1 and silent.silent == 1 and SILENT_S < 3
    assert s.processes(int(8 * S)) == []


def test_reads_within_the_sweep_interval_share_one_liveness_check() -> None:
    checks: list[int] = []

    def alive(pid: int) -> bool:
        checks.append(pid)
        return True

    s = CensusStore(5, ["rail0"], alive=alive)
    s.report(report(9, 0, NicCensus("rail0", primary=1)))
    for i in range(5):
        s.nic_traffic("rail0", int(i * SWEEP_INTERVAL_S * S / 10))
    assert checks == [9]
    s.nic_traffic("rail0", int(SWEEP_INTERVAL_S * S))
    assert checks == [9, 9]


def test_an_older_report_than_the_one_taken_is_dropped() -> None:
    s = store()
    s.report(report(1, 1, NicCensus("rail0", primary=5), seq=10))
    s.report(report(1, 1, NicCensus("rail0", primary=9), seq=9))
    assert s.nic_traffic("rail0", S).primary == 5 and s.stale_reports == 1


def test_counters_become_deltas_wrap_and_a_restart_counts_from_zero() -> None:
    s = store()
    s.report(report(1, 0, NicCensus("rail0", failovers=3, failed_peer=1), job="77"))
    s.report(report(1, 1, NicCensus("rail0", failovers=5, reintegrations=2, failed_peer=1),
                    job="77"))
    assert s.failovers == {"rail0": 5} and s.reintegrations == {"rail0": 2}
    assert s.failures == {("rail0", "peer"): 1}
    s.report(report(1, 2, NicCensus("rail1", failovers=1), job="77"))  # rail0 not in this one
    s.report(report(1, 3, NicCensus("rail0", failovers=6, failed_peer=1), job="77"))  # no double count
    assert s.failovers == {"rail0": 6, "rail1": 1}
    # Lower within one instance: wrapped (a u16 failure counter past 65535), never a restart.
    s.report(report(1, 4, NicCensus("rail0", failovers=6, failed_peer=65535), job="77"))
    s.report(report(1, 4.5, NicCensus("rail0", failovers=6, failed_peer=2), job="77"))
    assert s.failures == {("rail0", "peer"): 65535 + 3}
    s.report(report(1, 5, NicCensus("rail0", failovers=4), job="77", instance=2, seq=1))
    assert s.failovers["rail0"] == 10  # a new instance under the same pid: from zero
    (job,) = s.jobs(int(5 * S))
    assert (job.job, job.failovers, job.failures) == ("77", 4, 0)  # the new process's own
    s.report(report(1, 6, bye=True, instance=2))
    assert s.failovers["rail0"] == 10 and s.jobs(int(6 * S)) == []  # totals outlive it


def test_jobs_group_processes_and_name_those_without_a_job_id() -> None:
    s = store()
    s.report(report(1, 0, NicCensus("rail0", primary=64, failovers=1), job="4242"))
    s.report(report(2, 1, NicCensus("rail0", away=64), NicCensus("rail1", backup=64),
                    job="4242", uid=1001))
    s.report(report(3, 2, NicCensus("rail1", primary=2)))
    s.report(report(0, 2, NicCensus("rail1", primary=1), instance=0xAB, uid=7))
    jobs = {j.job: j for j in s.jobs(int(3 * S))}
    assert list(jobs) == ["4242", "pid 3", "uid 7 process 00000000000000ab"]
    j = jobs["4242"]
    assert (j.uids, j.pids, j.connections, j.on_backup, j.failovers) == (
        (1000, 1001), (1, 2), 128, 64, 1)
    assert [(n.ifname, n.primary, n.backup, n.away) for n in j.nics] == [
        ("rail0", 64, 0, 64), ("rail1", 0, 64, 0)]
    assert j.silent_s == 2.0


def test_one_uid_cannot_evict_another_users_processes() -> None:
    s = store(ttl_s=10**6)
    s.report(report(1, 0, NicCensus("rail0", primary=1), uid=1000))
    for pid in range(MAX_PROCESSES_PER_UID + 50):  # one user past its share
        s.report(report(10_000 + pid, 1 + pid / 1e4, NicCensus("rail0", backup=1), uid=666))
    mine = [p for p in s.processes(2 * S) if p.uid == 666]
    assert len(mine) == MAX_PROCESSES_PER_UID and min(p.pid for p in mine) == 10_050  # stalest
    assert s.nic_traffic("rail0", 2 * S).primary == 1 and s.evicted == 50
    # many users fill the store: the one with the most gives up its stalest, never uid 1000
    for uid in range(2000, 2000 + MAX_PROCESSES // MAX_PROCESSES_PER_UID + 2):
        for pid in range(MAX_PROCESSES_PER_UID):
            s.report(report(pid + 1, 3, NicCensus("rail1", primary=1), uid=uid))
    assert len(s.processes(4 * S)) == MAX_PROCESSES
    assert [p.pid for p in s.processes(4 * S) if p.uid == 1000] == [1]


def test_a_reload_drops_nics_no_longer_monitored() -> None:
    s = store()
    s.report(report(1, 0, NicCensus("rail0", primary=1), NicCensus("rail1", primary=2)))
    s.configure(9, ["rail1"])
    assert s.nic_traffic("rail0", 0).processes == 0 and s.nic_traffic("rail1", 0).primary == 2
    assert s.ttl_ns == 9 * S


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 2), st.integers(0, 2),
                          st.lists(st.tuples(st.sampled_from(["rail0", "rail1", "eth9"]),
                                             st.integers(0, 3), st.integers(0, 3)),
                                   max_size=3, unique_by=lambda t: t[0]),
                          st.booleans(), st.integers(0, 3)), max_size=40))
def test_the_kept_sums_are_what_a_walk_over_the_processes_counts(
        steps: list[tuple[int, int, int, list[tuple[str, int, int]], bool, int]]) -> None:
    """The store keeps each NIC's sums as reports come and go (reads walk nothing): after any
    reports, restarts, byes, reloads and expiries they equal a count over the processes."""
    s = CensusStore(5, ["rail0", "rail1"], alive=lambda pid: pid != 3)
    now = 0
    for pid, uid, instance, lines, bye, later_s in steps:
        now += later_s * S
        if later_s == 3 and pid == 0:
            s.configure(5, ["rail0"] if uid == 1 else ["rail0", "rail1"])
        s.report(report(pid, now / S, *(NicCensus(n, primary=p, backup=b) for n, p, b in lines),
                        uid=uid, instance=instance, bye=bye))
        for nic in ("rail0", "rail1"):
            got = s.nic_traffic(nic, now)
            lines_on = [p.nics[nic] for p in s.processes(now)
                        if nic in p.nics and (p.nics[nic].primary or p.nics[nic].backup)]
            assert (got.processes, got.primary, got.backup) == (
                len(lines_on), sum(n.primary for n in lines_on), sum(n.backup for n in lines_on))
