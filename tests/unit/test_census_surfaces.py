"""The connection census (issue 29) from the socket to the operator: census datagrams sent from
a real unix socket to the verdict monitor (told apart from verdicts by magic, with their own
rate limits), the engine's NIC view, jobs and dump, and /metrics. The gRPC API and the CLI
against a real daemon: test_census_cli.py."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from pathlib import Path

from test_plugin_verdicts import GOOD as VERDICT
from test_plugin_verdicts import (
    Clock,
    kernel_hands_over,
    linked_core,
    run_monitor,
)

from linkguardd.census import wire
from linkguardd.census.store import JobTraffic, NicTraffic
from linkguardd.facts import (
    NicCensus,
    PluginCensusFact,
    PluginCensusRejectedFact,
    PluginVerdictFact,
    PluginVerdictRejectedFact,
)
from linkguardd.monitors import plugin_verdicts
from linkguardd.monitors.plugin_verdicts import PluginVerdictMonitor

S = 1_000_000_000
PLUGIN = Path(__file__).resolve().parents[2] / "plugin"
CENSUS = wire.encode((NicCensus("rail0", away=64, failovers=64),
                      NicCensus("rail1", primary=3, backup=64), NicCensus("eth9", primary=1)),
                     job="4242", seq=5, flags=wire.F_CHANGE)


def test_census_and_verdicts_share_the_socket_told_apart_by_magic(sock_path: str) -> None:
    too_long = CENSUS + b"\0"
    facts, _ = run_monitor(sock_path, [CENSUS, VERDICT, too_long, CENSUS[:-1],
                                       wire.MAGIC + b"\0" * 100])
    census, verdict, *rejected = facts
    assert isinstance(census, PluginCensusFact) and isinstance(verdict, PluginVerdictFact)
    assert census.pid == os.getpid() and census.uid == os.getuid() and census.job == "4242"
    # eth9 is not monitored: its line is left out, the rest is taken
    assert [n.ifname for n in census.nics] == ["rail0", "rail1"] and census.change
    assert [(type(f).__name__, f.reason) for f in rejected] == [  # type: ignore[attr-defined]
        ("PluginCensusRejectedFact", "bad_size")] * 3  # a census read whole, one byte more


def test_the_c_encoder_round_trips_through_the_daemon_decoder(sock_path: str) -> None:
    """plugin/src/daemon/census.h's encoder (through plugin/tools/lg_census_send) against this
    decoder: every field, a NIC with every number set, one with a few, a job id."""
    subprocess.run(["make", "-s", "-C", str(PLUGIN), "build/lg_census_send"], check=True)
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    rx.bind(sock_path)
    rx.settimeout(10)
    with rx:
        tool = subprocess.run([str(PLUGIN / "build" / "lg_census_send"), "--socket", sock_path,
                               "--seq", "7", "--flags", "1", "--instance", "0xfeedc0ffee",
                               "--job", "slurm-4242", "rail0=4,0,1,2,3,4,5,6,7,65535",
                               "rail1=0,4"], check=False, capture_output=True, text=True,
                              timeout=30)
        assert tool.returncode == 0, tool.stderr
        data, anc, _, _ = rx.recvmsg(wire.SIZE + 1, socket.CMSG_SPACE(12))
    pid, uid, _gid = (int.from_bytes(anc[0][2][i:i + 4], "little") for i in (0, 4, 8))
    got = wire.decode(data, pid, uid, 9)
    assert got == PluginCensusFact(9, pid, uid, 0xfeedc0ffee, 7, "slurm-4242", change=True,
                                   bye=False, nics=(
                                       NicCensus("rail0", 4, 0, 1, 2, 3, 4, 5, 6, 7, 65535),
                                       NicCensus("rail1", 0, 4)))
    assert wire.encode(got.nics, job=got.job, seq=got.seq, flags=wire.F_CHANGE,
                       instance=got.instance) == data  # and back, byte for byte


def test_a_census_flood_does_not_starve_verdicts_nor_the_reverse() -> None:
    monitor = PluginVerdictMonitor("", ["rail0", "rail1"], Clock())  # frozen: no refill
    burst = int(plugin_verdicts.CENSUS_BURST)
    flood = kernel_hands_over(monitor, CENSUS, 1000, burst + 3)
    assert sum(isinstance(f, PluginCensusFact) for f in flood) == burst
    assert [f.reason for f in flood if isinstance(f, PluginCensusRejectedFact)] == \
        ["rate_limited"] * 3
    verdicts = kernel_hands_over(monitor, VERDICT, 1000, int(plugin_verdicts.BURST) + 1)
    assert sum(isinstance(f, PluginVerdictFact) for f in verdicts) == plugin_verdicts.BURST
    assert isinstance(verdicts[-1], PluginVerdictRejectedFact)
    many = [f for uid in range(2000, 2100) for f in kernel_hands_over(monitor, CENSUS, uid, 20)]
    assert sum(isinstance(f, PluginCensusFact) for f in many) == \
        plugin_verdicts.CENSUS_GLOBAL_BURST - burst  # every uid together: the global bucket


def test_the_engine_shows_census_in_the_nic_view_jobs_dump_and_metrics(tmp_path: Path) -> None:
    clock = Clock()

    async def main() -> tuple[NicTraffic, NicTraffic, list[JobTraffic], str, str]:
        core = await linked_core(tmp_path, clock)
        engine, view = core.engine, core.view
        try:
            dead = 2**22 + 12345  # past PID_MAX_LIMIT (linux/threads.h): never a live pid
            engine.on_fact(wire.decode(CENSUS, os.getpid(), 1000, clock.now), "plugin_verdicts")
            engine.on_fact(wire.decode(wire.encode((NicCensus("rail0", primary=9),)), dead,
                                       1000, clock.now), "plugin_verdicts")
            engine.on_fact(PluginCensusRejectedFact("bad_field", 1, 1000, clock.now))
            metrics = core.exporters.metrics.metrics
            return (view.nic("rail0").traffic, view.nic("rail1").traffic, view.jobs(),
                    json.dumps(view.dump()), metrics.render()[0].decode())
        finally:
            await engine.stop()

    rail0, rail1, jobs, dump, scrape = asyncio.run(main())
    assert (rail0.processes, rail0.primary, rail0.away, rail0.failovers) == (1, 0, 64, 64)
    assert (rail1.primary, rail1.backup, rail1.on_nic) == (3, 64, 67)
    (job,) = jobs
    assert (job.job, job.on_backup, job.failovers) == ("4242", 64, 64)
    assert '"job": "4242"' in dump and '"rejected": {"bad_field": 1}' in dump
    for line in ('linkguard_plugin_connections{device="rail0",role="away"} 64.0',
                 'linkguard_plugin_connections{device="rail1",role="backup"} 64.0',
                 'linkguard_plugin_connections{device="rail0",role="primary"} 0.0',
                 "linkguard_plugin_processes 1.0",  # the dead pid is forgotten
                 'linkguard_plugin_failovers_total{device="rail0"} 64.0',
                 'linkguard_plugin_reintegrations_total{device="rail1"} 0.0',
                 'linkguard_plugin_connection_failures_total{device="rail0",reason="peer"} 0.0',
                 'linkguard_plugin_census_rejected_total{reason="bad_field"} 1.0'):
        assert line in scrape, line
    assert "eth9" not in scrape and "4242" not in scrape  # monitored NICs only, no job label
