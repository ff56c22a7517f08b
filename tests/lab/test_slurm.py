"""linkguard on a real Slurm cluster in the lab (slurm_fixture.py): compute nodes a and b, each
with its linkguardd, slurmctld and srun on the head node c.

- An srun step on both nodes runs lg_nccl_driver through the plugin (the task prolog gives it
  NCCL_NET_PLUGIN and the node's LINKGUARD_SHM) while a rail is cut and restored: every byte
  verified, the step succeeds.
- Both rails of node a cut: slurmd's periodic health check drains a with linkguard's reason,
  and resumes it once both are back; an administrator's drain of b is kept through b's own
  fault and repair; a node whose daemon is gone is never drained.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_fixture import Daemon, Daemons, wait_for
from slurm_fixture import SlurmCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plugin_driver import BUILD, DRIVER, build_plugin
from linkguard_lab.lab import Lab
from linkguard_slurm.healthcheck import EXIT_HEALTHY, EXIT_NO_ANSWER, EXIT_UNHEALTHY
from linkguardd.states import NicState

pytestmark = pytest.mark.lab

DAEMON_ARGS = ("--interfaces", "rail0,rail1", "--hold-down-ms", "300")
CONNS = 2
PER_RANK = 2 * CONNS  # --bidir: CONNS send and CONNS receive connections per process
DRIVER_ARGS = f"--bidir --conns {CONNS} --size 262144 --depth 8 --verbose --timestamps " \
              "--gap-list-ms -1 --duration-s 120 --timeout 150"
PLUGIN_ENV = {"LINKGUARD_REJOIN_MS": "300", "LINKGUARD_REJOIN_TIMEOUT_MS": "1000",
              "LINKGUARD_DEAD_TIMEOUT_MS": "3000"}
BOTH_DOWN = "linkguard: pair rail0+rail1 has no healthy NIC (rail0 DOWN, rail1 DOWN)"
WAIT_S = 30.0

Cluster = Callable[[Lab, dict[str, Daemon]], SlurmCluster]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    build_plugin()


def start(lab_factory: Callable[..., Lab], daemons: Daemons,
          slurm_cluster: Cluster) -> tuple[Lab, dict[str, Daemon], SlurmCluster]:
    lab = lab_factory(hosts=3)  # a, b: compute nodes; c: head node
    nodes = {h: daemons.start(lab, h, *DAEMON_ARGS) for h in ("a", "b")}
    return lab, nodes, slurm_cluster(lab, nodes)


class Step:
    """`srun -N2 -l` of a script that starts the driver as server (rank 0, node a) or client
    (rank 1, node b), the plugin named the way NCCL names it: libnccl-net-$NCCL_NET_PLUGIN.so
    through ld.so, so the step only loads it if the task prolog gave NCCL_NET_PLUGIN."""

    def __init__(self, cluster: SlurmCluster, lab: Lab) -> None:
        script = cluster.root / "step.sh"
        script.write_text(
            "#!/bin/sh\nrole=client; [ \"$SLURM_PROCID\" = 0 ] && role=server\n"
            'echo "task env: NCCL_NET_PLUGIN=$NCCL_NET_PLUGIN LINKGUARD_SHM=$LINKGUARD_SHM" >&2\n'
            f'exec {DRIVER} --role $role --plugin "libnccl-net-$NCCL_NET_PLUGIN.so" '
            f"--mgmt {lab.mgmt_address('a')}:7300 {DRIVER_ARGS} "
            f">{cluster.root}/report-$SLURM_PROCID.json\n")  # srun -l splits long lines
        script.chmod(0o755)
        self.lines: list[tuple[int, int, str]] = []  # (rank, monotonic ns read, text)
        self.reports = [cluster.root / f"report-{rank}.json" for rank in (0, 1)]
        self._lock = threading.Lock()
        env = {**PLUGIN_ENV, "LD_LIBRARY_PATH": str(BUILD)}
        self.proc = cluster.popen(["env", *(f"{k}={v}" for k, v in env.items()), "srun",
                                   "--nodes=2", "--ntasks=2", "--nodelist=a,b", "--label",
                                   str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._threads = [threading.Thread(target=self._read, args=(s, err), daemon=True)
                         for s, err in ((self.proc.stdout, False), (self.proc.stderr, True))]
        for t in self._threads:
            t.start()

    def _read(self, stream: object, err: bool) -> None:
        for raw in iter(stream.readline, ""):  # type: ignore[attr-defined]
            m = re.match(r"\s*(\d+): (.*)", raw.rstrip("\n"))
            rank, text = (int(m[1]), m[2]) if m else (-1, raw.rstrip("\n"))
            with self._lock:
                self.lines.append((rank, time.monotonic_ns(), text))

    def said(self, pattern: str, rank: int, since: int = 0) -> list[str]:
        with self._lock:
            return [t for r, ns, t in self.lines if r == rank and ns >= since
                    and re.search(pattern, t)]

    def wait_said(self, pattern: str, n: int, since: int = 0) -> None:
        def done() -> bool:
            assert self.proc.poll() is None, f"srun ended: {self.tail()}"
            return all(len(self.said(pattern, r, since)) >= n for r in (0, 1))
        wait_for(done, WAIT_S, f"{n} lines /{pattern}/ from each rank:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        with self._lock:
            return "\n".join(f"{r}: {t}" for r, _, t in self.lines[-n:])

    def finish(self) -> tuple[int, list[dict[str, Any]]]:
        """SIGUSR1 to srun, which forwards it to the tasks: the drivers end cleanly."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)  # the srun this test started, by PID
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(timeout=60)
        for t in self._threads:
            t.join(timeout=10)
        return rc, [json.loads(p.read_text() or "{}") if p.exists() else {}
                    for p in self.reports]


def carried_by(lab: Lab, rail: int) -> bool:
    """Node a's traffic moves on `rail`, almost none on the other, over one second."""
    before = lab.tx_bytes("a", rail), lab.tx_bytes("a", 1 - rail)
    time.sleep(1.0)
    on, off = lab.tx_bytes("a", rail) - before[0], lab.tx_bytes("a", 1 - rail) - before[1]
    return on > 1 << 20 and off < on / 20


def test_srun_step_keeps_running_through_a_rail_cut(lab_factory: Callable[..., Lab],
                                                    daemons: Daemons,
                                                    slurm_cluster: Cluster) -> None:
    lab, nodes, cluster = start(lab_factory, daemons, slurm_cluster)
    step = Step(cluster, lab)
    ok = False
    try:
        wait_for(lambda: lab.tx_bytes("a", 0) > 20 << 20, WAIT_S, "traffic on a's rail0")
        for rank, host in ((0, "a"), (1, "b")):  # the prolog named each node's own daemon
            # (each rank's output is read by its own thread: wait for the line, do not race it)
            env_line = (f"task env: NCCL_NET_PLUGIN=linkguard LINKGUARD_SHM="
                        f"{nodes[host].shm_path}$")
            wait_for(lambda e=env_line, r=rank: step.said(e, r), WAIT_S,
                     f"rank {rank}: {env_line}")
            wait_for(lambda r=rank: step.said(r"dev 0: rail0 backup rail1 .*\(from daemon\)", r),
                     WAIT_S, f"rank {rank}: its devices from the daemon")
        t = time.monotonic_ns()
        lab.cut("a", 0)
        step.wait_said(r"conn [0-9a-f]+: failover: ", PER_RANK, t)
        wait_for(lambda: carried_by(lab, 1), WAIT_S, "traffic on a's rail1")
        t = time.monotonic_ns()
        lab.restore("a", 0)
        step.wait_said(r"conn [0-9a-f]+: reintegrated: ", PER_RANK, t)
        wait_for(lambda: carried_by(lab, 0), WAIT_S, "traffic back on a's rail0")
        ok = True
    finally:
        rc, reports = step.finish()  # also when the story failed: nothing left running
    assert ok and rc == 0, step.tail()
    for rank, rep in enumerate(reports):
        assert rep["ok"] and rep["errors"] == [], (rank, rep.get("failure"), step.tail())
        assert rep["corrupt_messages"] == 0 and rep["missing_messages"] == 0, rep
        assert rep["completions"] > 1000, rep
    # Both nodes stayed in service: one rail down is what the backup is for.
    assert not cluster.node("a").drained and not cluster.node("b").drained


def test_both_rails_cut_drains_the_node_and_their_return_resumes_it(
        lab_factory: Callable[..., Lab], daemons: Daemons, slurm_cluster: Cluster) -> None:
    lab, nodes, cluster = start(lab_factory, daemons, slurm_cluster)
    hc = [str(cluster.healthcheck_wrapper)]
    assert lab.run("a", hc, env={"SLURMD_NODENAME": "a"}).returncode == EXIT_HEALTHY
    lab.cut("a", 0)
    lab.cut("a", 1)
    wait_for(lambda: cluster.node("a").drained, WAIT_S,
             f"node a drained by the health check:\n{cluster.log('healthcheck-a.log')}")
    assert cluster.node("a").reason == BOTH_DOWN
    sinfo = cluster.run(["sinfo", "--noheader", "--Node", "--nodes=a", "--format=%T|%E"])
    assert sinfo.stdout.splitlines()[0] in (f"drained|{BOTH_DOWN}", f"draining|{BOTH_DOWN}")
    assert not cluster.node("b").drained
    lab.restore("a", 0)
    lab.restore("a", 1)
    wait_for(lambda: not cluster.node("a").drained, WAIT_S,
             f"node a resumed:\n{cluster.log('healthcheck-a.log')}")
    assert cluster.node("a").reason == ""
    assert "resumed the node" in cluster.log("healthcheck-a.log")

    # An administrator's drain is not linkguard's: kept through b's own fault and repair.
    admin = "bad DIMM, ticket 4711"
    cluster.run(["scontrol", "update", "nodename=b", "state=drain", f"reason={admin}"])
    lab.cut("b", 0)
    lab.cut("b", 1)
    nodes["b"].wait_state("rail1", NicState.DOWN)
    nodes["b"].wait_state("rail0", NicState.DOWN)
    assert lab.run("b", hc, env={"SLURMD_NODENAME": "b"}).returncode == EXIT_UNHEALTHY
    assert "someone else's reason: " + admin in cluster.log("healthcheck-b.log")
    lab.restore("b", 0)
    lab.restore("b", 1)
    for rail in ("rail0", "rail1"):
        nodes["b"].wait_state(rail, NicState.UP)
    assert lab.run("b", hc, env={"SLURMD_NODENAME": "b"}).returncode == EXIT_HEALTHY
    assert cluster.node("b").drained and cluster.node("b").reason == admin
    cluster.run(["scontrol", "update", "nodename=b", "state=resume"])

    # Node b's daemon stops, then b loses both rails: nobody can tell, so nothing is drained.
    nodes["b"].stop()
    lab.cut("b", 0)
    lab.cut("b", 1)
    assert lab.run("b", hc, env={"SLURMD_NODENAME": "b"}).returncode == EXIT_NO_ANSWER
    log_b = cluster.root / "healthcheck-b.log"
    seen = log_b.read_text().count("left as it is")
    wait_for(lambda: log_b.read_text().count("left as it is") > seen, WAIT_S,
             "slurmd's next health check of b")  # the periodic one, too, drained nothing
    assert not cluster.node("b").drained and cluster.node("b").reason == ""
    assert nodes["a"].nic("rail0").state == NicState.UP
