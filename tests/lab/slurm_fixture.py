"""A real Slurm cluster inside a lab: munged, slurmctld and one slurmd per compute host.

`slurm_cluster` (a fixture; register it from a conftest.py with an import) returns a function
that starts the cluster in a lab whose last host is the head node (slurmctld, munged, where
srun and scontrol run) and whose other hosts are compute nodes, each with a linkguardd already
running (the `daemons` fixture). Nothing of the machine's own Slurm or munge is used or
touched: munged gets its own key, socket and directories, and every daemon its own slurm.conf
(SLURM_CONF), spool, state and log directories, all in one temporary directory. slurmctld
listens on the head's management address, each slurmd (-N <host>) on its host's: all in the
lab's namespaces. Node names are the lab's host letters.

linkguard's programs are wired in as an operator would: HealthCheckProgram runs
linkguard-slurm-healthcheck (through a two-line wrapper that adds the config path, since slurmd
gives health checks no other environment), TaskProlog is linkguard-slurm-taskprolog, and one
TOML file (the Settings of linkguard_slurm) names each node's API socket and shm file with %n.

Teardown, always, by PID: slurmds, slurmctld, munged (SIGTERM, SIGKILL after a grace period),
then the directory. Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from daemon_fixture import Daemon, Daemons, wait_for

from linkguard_lab.lab import Lab
from linkguard_slurm.scontrol import NodeInfo, parse_node

BIN = Path(sys.executable).parent
HEALTHCHECK = BIN / "linkguard-slurm-healthcheck"
TASKPROLOG = BIN / "linkguard-slurm-taskprolog"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# How often slurmd runs the health check; short, so a test sees a drain within seconds.
HEALTH_CHECK_INTERVAL_S = 2


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: install slurm-wlm and munge (scripts/host-packages.txt)")
    return path


@dataclass
class SlurmCluster:
    lab: Lab
    head: str
    nodes: list[str]
    daemons: dict[str, Daemon]
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # --- paths ----------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def linkguard_conf(self) -> Path:
        return self.root / "linkguard-slurm.toml"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.sock"

    @property
    def healthcheck_wrapper(self) -> Path:
        return self.root / "healthcheck.sh"

    def env(self) -> dict[str, str]:
        """A clean environment for Slurm's commands and the jobs they start (srun passes its
        environment to the tasks): this cluster's slurm.conf and linkguard config, no
        LINKGUARD*/NCCL* of the developer's."""
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("LINKGUARD", "LGTCP", "NCCL", "SLURM"))}
        return {**keep, "SLURM_CONF": str(self.conf),
                "LINKGUARD_SLURM_CONFIG": str(self.linkguard_conf)}

    # --- start ----------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        self._write_files()
        self._start_munge()
        self._popen("slurmctld", self.head, [_which("slurmctld"), "-D"])
        for node in self.nodes:
            (self.root / "spool" / node).mkdir(parents=True)
            self._popen(f"slurmd-{node}", node, [_which("slurmd"), "-D", "-N", node])
        wait_for(self._all_idle, START_TIMEOUT_S, f"slurm nodes {', '.join(self.nodes)} idle "
                 f"(logs in {self.root})")
        return self

    def _popen(self, name: str, host: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.out").open("wb")
        with log:
            self.procs[name] = self.lab.popen(host, argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=self.env())

    def _start_munge(self) -> None:
        keydir = self.root / "munge-key"  # munged insists: key and seed private to its user,
        keydir.mkdir(mode=0o700)          # the socket's directory searchable by everyone
        (self.root / "munge").mkdir(mode=0o755)
        subprocess.run([_which("mungekey"), "--create", f"--keyfile={keydir / 'munge.key'}"],
                       check=True, capture_output=True, timeout=30)
        self._popen("munged", self.head, [
            _which("munged"), "--foreground", f"--key-file={keydir / 'munge.key'}",
            f"--seed-file={keydir / 'munged.seed'}", f"--socket={self.munge_socket}",
            f"--pid-file={self.root / 'munge' / 'munged.pid'}",
            f"--log-file={self.root / 'munged.log'}"])
        wait_for(self.munge_socket.exists, START_TIMEOUT_S, f"munged socket {self.munge_socket}")

    def _write_files(self) -> None:
        self.root.chmod(0o755)
        sockets = self.root / "lgd"
        sockets.mkdir()
        for node, daemon in self.daemons.items():  # one %n-named path to each node's API
            (sockets / f"{node}.sock").symlink_to(daemon.grpc_socket)
        self.linkguard_conf.write_text(
            f'socket = "{sockets}/%n.sock"\nscontrol = "{_which("scontrol")}"\n'
            f'shm_path = "/dev/shm/{self.lab.prefix}-%n"\nattempts = 2\n'
            'retry_interval_s = 0.5\n')
        self.healthcheck_wrapper.write_text(
            "#!/bin/sh\n# slurmd runs health checks with SLURMD_NODENAME alone\n"
            f"export SLURM_CONF={self.conf} LINKGUARD_SLURM_CONFIG={self.linkguard_conf}\n"
            f'exec {HEALTHCHECK} "$@" >>{self.root}/healthcheck-$SLURMD_NODENAME.log 2>&1\n')
        self.healthcheck_wrapper.chmod(0o755)
        # No cgroups: `ip netns exec` remounts /sys, so none are mounted where slurmd looks;
        # linuxproc tracking and task/none need none, and cgroup/v1 then only checks the path.
        (self.root / "cgroup").mkdir()
        (self.root / "cgroup.conf").write_text(
            f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={self.root / 'cgroup'}\n"
            "CgroupAutomount=no\n")
        hw = _hardware()
        lines = [
            f"ClusterName={self.lab.prefix}",
            # slurmctld knows itself by the host name (the lab's namespaces share the UTS one)
            (f"SlurmctldHost={socket.gethostname().split('.')[0]}"
            f"({self.lab.mgmt_address(self.head)})"),
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/linear", "MpiDefault=none", "MailProg=/bin/true",
            "ReturnToService=2",
            f"HealthCheckProgram={self.healthcheck_wrapper}",
            f"HealthCheckInterval={HEALTH_CHECK_INTERVAL_S}",
            f"TaskProlog={TASKPROLOG}",
            *(f"NodeName={n} NodeAddr={self.lab.mgmt_address(n)} {hw}" for n in self.nodes),
            (f"PartitionName=lab Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
            "State=UP"),
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _all_idle(self) -> bool:
        self._check_running()
        proc = self.run(["sinfo", "--noheader", "--Node", "--format=%N %T"], check=False)
        states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def _check_running(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n"
                                     f"{self.log(name + '.out')}")

    # --- use ------------------------------------------------------------------------------
    def run(self, argv: list[str], host: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm command (or any) with this cluster's environment, on the head node."""
        proc = self.lab.run(host or self.head, argv, env=self.env(), timeout=timeout)
        if check:
            assert proc.returncode == 0, f"{' '.join(argv)}: exit {proc.returncode}: " \
                                         f"{proc.stderr}{proc.stdout}"
        return proc

    def node(self, name: str) -> NodeInfo:
        """What slurmctld says about a node (the real scontrol, parsed as the check does)."""
        return parse_node(name, self.run(["scontrol", "-o", "show", "node", name]).stdout
                          .strip())

    def popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
        return self.lab.popen(self.head, argv, env=self.env(), text=True, **kwargs)

    def log(self, name: str) -> str:
        path = self.root / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # --- stop -----------------------------------------------------------------------------
    def stop(self) -> None:
        """slurmds first (they may hold steps), then slurmctld, then munged; by PID."""
        for name in [*(f"slurmd-{n}" for n in self.nodes), "slurmctld", "munged"]:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)


def _hardware() -> str:
    """This machine's CPU layout as slurmd -C reports it (every lab node runs on it)."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    return " ".join(f"{k}={fields[k]}" for k in keys if k in fields)


@pytest.fixture
def slurm_cluster(daemons: Daemons) -> Iterator[Callable[[Lab, dict[str, Daemon]],
                                                          SlurmCluster]]:
    """Depends on `daemons` so that it is torn down first: Slurm stops while the daemons and
    the namespaces still exist."""
    made: list[SlurmCluster] = []

    def make(lab: Lab, nodes: dict[str, Daemon]) -> SlurmCluster:
        head = lab.hosts[-1]
        assert head not in nodes, "the last lab host is the head node"
        # Short: munge's socket path must fit in sun_path (107 bytes).
        root = Path(tempfile.mkdtemp(prefix="lgslurm-", dir="/tmp"))
        cluster = SlurmCluster(lab, head, list(nodes), nodes, root)
        made.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in made:
            try:
                cluster.stop()
            finally:
                with contextlib.suppress(OSError):
                    shutil.rmtree(cluster.root)
