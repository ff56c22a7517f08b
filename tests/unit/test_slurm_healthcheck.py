"""linkguard-slurm-healthcheck against the real gRPC API over a FakeDaemon and a scontrol with
one node (fake_scontrol.py; the lab's test_slurm.py runs it against the real Slurm): a table
of (NIC states, the node in Slurm, settings -> exit status, the node afterwards, output)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_daemon import FakeDaemon, ServedFake, all_up_nics, short_socket_dir

from linkguard_slurm import healthcheck
from linkguard_slurm.healthcheck import (
    EXIT_CRASHED,
    EXIT_HEALTHY,
    EXIT_NO_ANSWER,
    EXIT_SLURM_FAILED,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
    cli,
)
from linkguardd.states import NicState, Reason

NODE = "gpu-node-7"
FAKE_SCONTROL = Path(__file__).parent / "fake_scontrol.py"
BOTH_DOWN = "linkguard: pair rail0+rail1 has no healthy NIC (rail0 DOWN, rail1 DOWN)"
ADMIN = "bad DIMM, ticket 4711"


@dataclass
class Node:
    """The node as the fake scontrol keeps it."""

    state: str = "IDLE"
    reason: str = ""
    fail: bool = False
    calls: list[list[str]] = field(default_factory=list)


class Slurm:
    def __init__(self, tmp_path: Path) -> None:
        self.program = tmp_path / "scontrol"
        self.program.symlink_to(FAKE_SCONTROL)
        self.state = tmp_path / "scontrol.json"

    def set(self, node: Node) -> None:
        self.state.write_text(json.dumps({"name": NODE, **node.__dict__}))

    def get(self) -> Node:
        return Node(**{k: v for k, v in json.loads(self.state.read_text()).items()
                       if k != "name"})

    def updates(self) -> list[list[str]]:
        return [c for c in self.get().calls if c[:1] == ["update"]]


@pytest.fixture
def slurm(tmp_path: Path) -> Slurm:
    return Slurm(tmp_path)


def two_rails(rail0: NicState = NicState.UP, rail1: NicState = NicState.UP) -> FakeDaemon:
    """rail0 and rail1 backing each other up (rail2 of the default fake is dropped)."""
    fake = FakeDaemon(all_up_nics()[:2])
    for name, state in (("rail0", rail0), ("rail1", rail1)):
        if state != NicState.UP:
            fake.inject_state(name, state, Reason.CARRIER_LOST)
    return fake


def check(served: ServedFake | None, slurm: Slurm, *args: str, socket: str | None = None):
    argv = ["--socket", socket or (served.socket_path if served else "/nonexistent/x.sock"),
            "--scontrol", str(slurm.program), "--node-name", NODE, "--config", os.devnull,
            "--retry-interval-s", "0", *args]
    return CliRunner().invoke(cli, argv)


D, U, G, R, X = NicState.DOWN, NicState.UP, NicState.DEGRADED, NicState.RECOVERING, \
    NicState.DRAINED
DRAINED_BY_US = Node("IDLE+DRAIN", BOTH_DOWN)
ROWS = [  # id, (rail0, rail1), node before, extra args, exit, node after (state, reason), output
    ("all-up", (U, U), Node(), [], EXIT_HEALTHY, ("IDLE", ""), "healthy (1 NIC pair(s): rail0+rail1)"),
    ("one-down-backup-carries", (D, U), Node(), [], EXIT_HEALTHY, ("IDLE", ""), "healthy"),
    ("both-down-drains", (D, D), Node(), [], EXIT_UNHEALTHY, ("IDLE+DRAIN", BOTH_DOWN),
     "drained: " + BOTH_DOWN),
    ("down-and-drained-nic", (D, X), Node("MIXED"), [], EXIT_UNHEALTHY,
     ("MIXED+DRAIN", "linkguard: pair rail0+rail1 has no healthy NIC (rail0 DOWN, rail1 DRAINED)"),
     "drained"),
    ("down-and-recovering", (R, D), Node(), [], EXIT_UNHEALTHY,
     ("IDLE+DRAIN", ("linkguard: pair rail0+rail1 has no healthy NIC (rail0 RECOVERING, "
      "rail1 DOWN)")), "drained"),
    ("degraded-backup-carries", (D, G), Node(), [], EXIT_HEALTHY, ("IDLE", ""), "healthy"),
    ("degraded-not-healthy", (D, G), Node(), ["--no-degraded-is-healthy"], EXIT_UNHEALTHY,
     ("IDLE+DRAIN", ("linkguard: pair rail0+rail1 has no healthy NIC (rail0 DOWN, rail1 "
      "DEGRADED)")), "drained"),
    ("already-ours-same-reason", (D, D), DRAINED_BY_US, [], EXIT_UNHEALTHY,
     ("IDLE+DRAIN", BOTH_DOWN), "still drained"),
    ("ours-reason-refreshed", (D, D), Node("IDLE+DRAIN", "linkguard: rail0 out of service"), [],
     EXIT_UNHEALTHY, ("IDLE+DRAIN", BOTH_DOWN), "drained: " + BOTH_DOWN),
    ("admin-drain-left-alone", (D, D), Node("IDLE+DRAIN", ADMIN), [], EXIT_UNHEALTHY,
     ("IDLE+DRAIN", ADMIN), "someone else's reason: " + ADMIN),
    ("slurm-down-left-alone", (D, D), Node("DOWN+NOT_RESPONDING", "Not responding"), [],
     EXIT_UNHEALTHY, ("DOWN+NOT_RESPONDING", "Not responding"), "left as it is"),
    ("healthy-resumes-own-drain", (U, D), DRAINED_BY_US, [], EXIT_HEALTHY, ("IDLE", ""),
     "resumed the node"),
    ("healthy-keeps-admin-drain", (U, U), Node("IDLE+DRAIN", ADMIN), [], EXIT_HEALTHY,
     ("IDLE+DRAIN", ADMIN), "healthy"),
    ("report-only", (D, D), Node(), ["--no-drain"], EXIT_UNHEALTHY, ("IDLE", ""), BOTH_DOWN),
    ("report-only-healthy", (U, U), DRAINED_BY_US, ["--no-drain"], EXIT_HEALTHY,
     ("IDLE+DRAIN", BOTH_DOWN), "healthy"),
    ("off-service-bound-crossed", (D, U), Node(), ["--max-off-service-s", "60"], EXIT_UNHEALTHY,
     ("IDLE+DRAIN", "linkguard: rail0 out of service for over 60 s (DOWN)"), "drained"),
    ("off-service-bound-not-crossed", (D, U), Node(), ["--max-off-service-s", "1e10"],
     EXIT_HEALTHY, ("IDLE", ""), "healthy"),
    ("scontrol-fails", (D, D), Node(fail=True), [], EXIT_SLURM_FAILED, ("IDLE", ""),
     "Slurm not updated: "),
]


@pytest.mark.parametrize("rails, before, args, code, after, fragment",
                         [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_table(slurm: Slurm, rails: tuple[NicState, NicState], before: Node, args: list[str],
               code: int, after: tuple[str, str], fragment: str) -> None:
    slurm.set(before)
    with ServedFake(two_rails(*rails)) as served:
        result = check(served, slurm, *args)
    assert result.exit_code == code, result.output
    node = slurm.get()
    assert (node.state, node.reason) == after, result.output
    assert fragment in result.output
    if "--no-drain" in args:
        assert node.calls == []  # report only: Slurm is not even asked


def test_unreachable_daemon_changes_nothing(slurm: Slurm) -> None:
    """No daemon: exit 3 after every attempt, and even our own drain is not lifted."""
    slurm.set(DRAINED_BY_US)
    result = check(None, slurm, "--attempts", "2")
    assert result.exit_code == EXIT_NO_ANSWER, result.output
    assert "left as it is: cannot reach linkguardd" in result.output
    assert "after 2 attempt(s)" in result.output
    assert slurm.get().calls == []


def test_socket_that_refuses_changes_nothing(slurm: Slurm, tmp_path: Path) -> None:
    """A socket file with nobody listening (a daemon that died): the same as none at all."""
    import socket
    path = os.path.join(short_socket_dir(), "dead.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)  # bound, never listening: connect() is refused
        slurm.set(Node())
        result = check(None, slurm, "--attempts", "1", socket=path)
    assert result.exit_code == EXIT_NO_ANSWER, result.output
    assert slurm.get().calls == []


def test_daemon_restarting_is_waited_for(slurm: Slurm) -> None:
    """The API comes back between two attempts: the answer counts."""
    slurm.set(Node())
    socket_dir = short_socket_dir()
    fake = two_rails(D, D)
    served = ServedFake(fake, socket_dir=socket_dir)
    starter = threading.Timer(0.3, served.__enter__)
    starter.start()
    try:
        result = check(None, slurm, "--attempts", "10", "--retry-interval-s", "1",
                       socket=served.socket_path)
    finally:
        starter.join()
        served.__exit__(None, None, None)
    assert result.exit_code == EXIT_UNHEALTHY, result.output
    assert slurm.get().reason == BOTH_DOWN


def test_undecided_nic_is_no_verdict(slurm: Slurm) -> None:
    slurm.set(Node())
    fake = two_rails(D, D)
    fake.inject_state("rail1", NicState.UNKNOWN, Reason.NONE)
    with ServedFake(fake) as served:
        result = check(served, slurm)
    assert result.exit_code == EXIT_NO_ANSWER, result.output
    assert "no state yet for rail1" in result.output
    assert slurm.updates() == []


def test_missing_scontrol(slurm: Slurm, tmp_path: Path) -> None:
    with ServedFake(two_rails(D, D)) as served:
        result = CliRunner().invoke(cli, ["--socket", served.socket_path, "--node-name", NODE,
                                          "--config", os.devnull, "--scontrol",
                                          str(tmp_path / "nope")])
    assert result.exit_code == EXIT_SLURM_FAILED, result.output
    assert f"{tmp_path / 'nope'}: not found" in result.output


@pytest.mark.parametrize("text, fragment", [
    ("attempts = 0\n", "attempts: must be >= 1, got 0"),
    ("atempts = 3\n", "unknown key 'atempts'"),
    ("drain = \"yes\"\n", "drain: expected bool, got str"),
    ("[environment]\n\"BAD NAME\" = \"x\"\n", "'BAD NAME' is not a variable name"),
    ("socket = \n", "not valid TOML"),
])
def test_bad_config_is_a_usage_error(slurm: Slurm, tmp_path: Path, text: str,
                                     fragment: str) -> None:
    config = tmp_path / "slurm.toml"
    config.write_text(text)
    slurm.set(Node())
    result = CliRunner().invoke(cli, ["--config", str(config), "--scontrol", str(slurm.program)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert fragment in result.output
    assert slurm.get().calls == []


def test_config_file_is_read(slurm: Slurm, tmp_path: Path) -> None:
    """What a cluster uses: slurmd passes no arguments, so the file names socket and scontrol."""
    slurm.set(Node())
    with ServedFake(two_rails(D, D)) as served:
        config = tmp_path / "slurm.toml"
        config.write_text(f'socket = "{served.socket_path}"\nscontrol = "{slurm.program}"\n'
                          f'node_name = "{NODE}"\n')
        result = CliRunner().invoke(cli, [], env={"LINKGUARD_SLURM_CONFIG": str(config)})
    assert result.exit_code == EXIT_UNHEALTHY, result.output
    assert slurm.get().reason == BOTH_DOWN


def test_a_crash_is_exit_1_and_does_nothing(slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug in the check")
    monkeypatch.setattr(healthcheck, "judge", broken)
    monkeypatch.setattr(sys, "argv", ["linkguard-slurm-healthcheck"])
    slurm.set(Node())
    with ServedFake(two_rails(D, D)) as served:
        monkeypatch.setenv("LINKGUARD_SLURM_SOCKET", served.socket_path)
        monkeypatch.setenv("LINKGUARD_SLURM_SCONTROL", str(slurm.program))
        monkeypatch.setenv("LINKGUARD_SLURM_CONFIG", os.devnull)
        with pytest.raises(SystemExit) as exc:
            healthcheck.main()
    assert exc.value.code == EXIT_CRASHED
    assert slurm.get().calls == []


def test_entry_point_runs_with_an_empty_environment(slurm: Slurm, tmp_path: Path) -> None:
    """slurmd starts HealthCheckProgram with SLURMD_NODENAME as its whole environment."""
    slurm.set(Node())
    exe = Path(sys.executable).parent / "linkguard-slurm-healthcheck"
    with ServedFake(two_rails(D, D)) as served:
        config = tmp_path / "slurm.toml"
        config.write_text(f'socket = "{served.socket_path}"\nscontrol = "{slurm.program}"\n')
        wrapper = tmp_path / "hc.sh"  # the config path is the only thing a wrapper must add
        wrapper.write_text(f"#!/bin/sh\nLINKGUARD_SLURM_CONFIG={config} exec {exe}\n")
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        proc = subprocess.run([str(wrapper)], env={"SLURMD_NODENAME": NODE},
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == EXIT_UNHEALTHY, proc.stderr
    assert slurm.get().reason == BOTH_DOWN
    assert f"node {NODE}: drained" in proc.stdout


@pytest.fixture
def nhc_env(slurm: Slurm) -> Iterator[dict[str, str]]:
    exe = Path(sys.executable).parent / "linkguard-slurm-healthcheck"
    yield {"PATH": os.environ["PATH"], "LINKGUARD_HEALTHCHECK": str(exe),
           "LINKGUARD_SLURM_CONFIG": os.devnull}


NHC = Path(__file__).resolve().parents[2] / "slurm" / "nhc" / "linkguard.nhc"
# NHC itself is not packaged for Debian: these two are what its check API provides (die marks
# the node and ends the run; log writes to its log), recorded instead of acted upon.
NHC_SHIM = 'die() { echo "DIE $1 $2"; return 1; }\nlog() { echo "LOG $*"; }\n'


@pytest.mark.parametrize("rails, expect", [((U, U), ""), ((D, D), "DIE 1 " + BOTH_DOWN),
                                           (None, "LOG check_linkguard: no verdict (exit 3)")])
def test_nhc_check(nhc_env: dict[str, str], rails: tuple[NicState, NicState] | None,
                   expect: str) -> None:
    def run(socket: str) -> subprocess.CompletedProcess[str]:
        script = f"{NHC_SHIM}. {NHC}\ncheck_linkguard --socket {socket} --attempts 1\n" \
                 "echo rc=$?\n"
        return subprocess.run(["bash", "-c", script], env=nhc_env, capture_output=True,
                              text=True, timeout=60, check=False)
    if rails is None:
        proc = run("/nonexistent/linkguard.sock")
    else:
        with ServedFake(two_rails(*rails)) as served:
            proc = run(served.socket_path)
    *said, rc = proc.stdout.strip().splitlines()
    assert rc == ("rc=1" if expect.startswith("DIE") else "rc=0"), proc.stdout
    if expect:
        assert said and said[0].startswith(expect), proc.stdout
    else:
        assert said == [], proc.stdout
