"""The pieces of the Slurm integration: reading scontrol's node line, pairs and off-service time
from linkguardd's messages, the settings file, and the task prolog's output."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from linkguard.v1 import linkguard_pb2 as pb
from linkguard_slurm import settings as cfg
from linkguard_slurm.scontrol import SlurmError, parse_node
from linkguard_slurm.taskprolog import lines
from linkguard_slurm.verdict import off_service_since, pairs

REPO = Path(__file__).resolve().parents[2]
PROLOG = Path(sys.executable).parent / "linkguard-slurm-taskprolog"
# Lines as slurm-wlm 22.05.8 prints them (shortened in the middle, where no field matters).
SHOWN = "NodeName=a Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 State={} ThreadsPerCore=1 " \
        "Partitions=lab  BootTime=2026-12-01T08:23:04 CapWatts=n/a ExtSensorsTemp=n/s"


@pytest.mark.parametrize("line, state, reason, drained", [
    (SHOWN.format("IDLE"), "IDLE", "", False),
    (SHOWN.format("IDLE+DRAIN") + " Reason=linkguard: pair rail0+rail1 has no healthy NIC "
     "(rail0 DOWN, rail1 DOWN) [root@2026-12-01T08:32:06]", "IDLE+DRAIN",
     "linkguard: pair rail0+rail1 has no healthy NIC (rail0 DOWN, rail1 DOWN)", True),
    (SHOWN.format("MIXED+DRAIN") + " Reason=swap [cable] now [slurm@2026-12-01T08:32:06]",
     "MIXED+DRAIN", "swap [cable] now", True),
    (SHOWN.format("DOWN+NOT_RESPONDING") + " Reason=Not responding [slurm@2026-12-01T09:00:00]",
     "DOWN+NOT_RESPONDING", "Not responding", False),
    (SHOWN.format("IDLE+DRAIN") + " Reason=no user suffix", "IDLE+DRAIN", "no user suffix", True),
])
def test_parse_node(line: str, state: str, reason: str, drained: bool) -> None:
    info = parse_node("a", line)
    assert (info.state, info.reason, info.drained) == (state, reason, drained)


@pytest.mark.parametrize("line", ["", "Node b not found", SHOWN.replace("NodeName=a", "NodeName=b"),
                                  "NodeName=a Arch=x86_64"])
def test_parse_node_rejects_what_it_cannot_read(line: str) -> None:
    with pytest.raises(SlurmError, match="unexpected output"):
        parse_node("a", line)


def nic(name: str, backup: str = "", state: int = pb.NIC_STATE_UP, since: float = 0) -> pb.Nic:
    return pb.Nic(name=name, backup=backup, state=state, since_unix=since)  # type: ignore[arg-type]


def test_pairs_once_each_and_alone_without_backup() -> None:
    nics = [nic("rail0", "rail1"), nic("rail1", "rail0"), nic("rail2", "rail3"),
            nic("rail3", "rail2"), nic("eth9"), nic("eth8", "gone"), nic("eth7", "eth7")]
    assert pairs(nics) == [("rail0", "rail1"), ("rail2", "rail3"), ("eth9",), ("eth8",),
                           ("eth7",)]


UP, DOWN, REC, UNK = pb.NIC_STATE_UP, pb.NIC_STATE_DOWN, pb.NIC_STATE_RECOVERING, \
    pb.NIC_STATE_UNKNOWN


@pytest.mark.parametrize("history, since, expect", [
    ([], 500.0, 500.0),  # no history: when the current state began
    ([(UP, DOWN, 500.0)], 500.0, 500.0),
    # DOWN -> RECOVERING -> DOWN: out of service since it left UP, not since the last flap
    ([(UP, DOWN, 100.0), (DOWN, REC, 200.0), (REC, DOWN, 300.0)], 300.0, 100.0),
    # it was UP in between: only the last stretch counts
    ([(UP, DOWN, 100.0), (DOWN, UP, 150.0), (UP, DOWN, 400.0)], 400.0, 400.0),
    ([(UNK, DOWN, 50.0), (DOWN, REC, 60.0), (REC, DOWN, 70.0)], 70.0, 50.0),  # down since start
    # the start of the stretch fell out of the history: the oldest one known
    ([(REC, DOWN, 300.0)], 300.0, 300.0),
])
def test_off_service_since(history: list[tuple[int, int, float]], since: float,
                           expect: float) -> None:
    events = [pb.Event(nic="rail0", old_state=o, new_state=n, time_unix=t)  # type: ignore[arg-type]
              for o, n, t in history]
    events.insert(0, pb.Event(nic="rail1", old_state=UP, new_state=DOWN, time_unix=1.0))
    assert off_service_since(nic("rail0", state=DOWN, since=since), events) == expect


def test_example_config_is_generated_from_the_table(tmp_path: Path) -> None:
    shipped = (REPO / "slurm" / "linkguard-slurm.toml").read_text()
    assert shipped == cfg.render_example_toml(), "regenerate slurm/linkguard-slurm.toml"
    # Uncommented, every value shown is valid and is the default (the table is an example).
    example = tmp_path / "slurm.toml"
    example.write_text("\n".join(ln[1:] for ln in shipped.splitlines() if re.match(r"#\S", ln)))
    loaded = cfg.load(str(example))
    assert dataclasses.replace(loaded, environment={}) == cfg.Settings(environment={})
    assert set(loaded.environment) == {"LINKGUARD_INNER"}


@pytest.mark.parametrize("toml, environ, expect", [
    ("", {}, ["export NCCL_NET_PLUGIN=linkguard",
              "export LINKGUARD_SHM=/run/linkguard/linkguard.shm"]),
    ("", {"NCCL_NET_PLUGIN": "none"}, ["export LINKGUARD_SHM=/run/linkguard/linkguard.shm"]),
    (('nccl_net_strict = true\nshm_path = "/dev/shm/lab-%n"\n[environment]\n'
     'LINKGUARD_INNER = "/opt/x/libnccl-net.so"\n'), {"SLURMD_NODENAME": "b"},
     ["export NCCL_NET_PLUGIN=linkguard", "export NCCL_NET=linkguard",
      "export LINKGUARD_SHM=/dev/shm/lab-b", "export LINKGUARD_INNER=/opt/x/libnccl-net.so"]),
    ('nccl_net_plugin = ""\nshm_path = ""\n', {}, []),
])
def test_taskprolog_lines(tmp_path: Path, toml: str, environ: dict[str, str],
                          expect: list[str]) -> None:
    config = tmp_path / "slurm.toml"
    config.write_text(toml)
    assert lines(cfg.load(str(config)), environ) == expect


@pytest.mark.parametrize("toml, env, fragment", [
    ("", {}, "export NCCL_NET_PLUGIN=linkguard\n"),
    ("nccl_net_strict = 1\n", {}, "print linkguard-slurm-taskprolog: "),
    ("", {"LINKGUARD_SLURM_NCCL_NET_STRICT": "maybe"}, "print linkguard-slurm-taskprolog: "),
])
def test_taskprolog_never_fails_the_task(tmp_path: Path, toml: str, env: dict[str, str],
                                         fragment: str) -> None:
    """slurmstepd runs it with the task's environment; exit 0 whatever the config says."""
    config = tmp_path / "slurm.toml"
    config.write_text(toml)
    proc = subprocess.run([str(PROLOG)], capture_output=True, text=True, timeout=60,
                          env={"LINKGUARD_SLURM_CONFIG": str(config), "SLURMD_NODENAME": "a",
                               **env}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert fragment in proc.stdout
    assert all(ln.startswith(("export ", "print ")) for ln in proc.stdout.splitlines())
