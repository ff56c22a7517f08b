"""Backup sets end to end (issue 28, the daemon's half): the real linkguardd in a 4-rail lab
host, its NICs placed on a fake sysfs tree (PCIe switches, NUMA nodes) in the kernel's layout,
publishes each NIC's set ordered by its locality policy; the plugin's C reader (lg_shm_dump),
the CLI and the gRPC status show the same order, and SIGHUP applies a new policy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from daemon_fixture import Daemon, Daemons, parse_logfmt, wait_for
from fake_sysfs import add_nic
from ops_helpers import run_cli

from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

WAIT_S = 10.0
NICS = ["rail0", "rail1", "rail2", "rail3"]
# rail0 and rail3 behind one PCIe switch, rail1 behind another on the same NUMA node, rail2 on
# the other node: the three tiers of same-switch, two of numa.
PLACES = {"rail0": ("pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:12:00.0", 0),
          "rail1": ("pci0000:00/0000:00:02.0/0000:20:00.0/0000:21:00.0/0000:22:00.0", 0),
          "rail2": ("pci0000:80/0000:80:01.0/0000:90:00.0/0000:91:00.0/0000:92:00.0", 1),
          "rail3": ("pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:01.0/0000:13:00.0", 0)}
SAME_SWITCH = {"rail0": ["rail3", "rail1", "rail2"], "rail1": ["rail3", "rail0", "rail2"],
               "rail2": ["rail3", "rail0", "rail1"], "rail3": ["rail0", "rail1", "rail2"]}
NUMA = {"rail0": ["rail1", "rail3", "rail2"], "rail1": ["rail3", "rail0", "rail2"],
        "rail2": ["rail3", "rail0", "rail1"], "rail3": ["rail0", "rail1", "rail2"]}


def fake_sysfs(root: Path) -> Path:
    for name, (device, numa) in PLACES.items():
        add_nic(root, name, device, numa)
    return root


def c_sets(d: Daemon) -> dict[str, list[str]]:
    """Each NIC's backup set by name, as the plugin's C reader sees the table."""
    nics = d.c_dump()["nics"]
    return {n["name"]: [nics[i]["name"] for i in n["backup_set"]] for n in nics}


def test_daemon_publishes_sets_in_locality_order(lab_factory, daemons: Daemons,
                                                 tmp_path: Path) -> None:
    lab: Lab = lab_factory(rails=4)
    config = {"pairs": {"*": "all"}, "locality": "same-switch"}
    d = daemons.start(lab, "a", "--interfaces", ",".join(NICS), "--sysfs-root",
                      str(fake_sysfs(tmp_path / "sys")), config=config)
    assert c_sets(d) == SAME_SWITCH
    c = {n["name"]: n for n in d.c_dump()["nics"]}
    assert c["rail0"]["backup_index"] == NICS.index("rail3")  # what a version 1 reader sees
    assert {k: [NICS[i] for i in v.backup_set] for k, v in d.nics().items()} == SAME_SWITCH
    started = next(r for r in map(parse_logfmt, d.stderr().splitlines())
                   if r.get("msg") == "started")
    assert started["locality"] == "same-switch"
    assert started["backups"].split(",")[0] == "rail0:rail3+rail1+rail2"

    status = run_cli(lab, "a", d.grpc_socket, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert {n["name"]: n["backup_set"] for n in json.loads(status.stdout)["nics"]} == SAME_SWITCH
    table = run_cli(lab, "a", d.grpc_socket, "status").stdout
    assert any(line.split()[:1] == ["rail0"] and "rail3+rail1+rail2" in line
               for line in table.splitlines()), table

    d.write_config({**config, "locality": "numa"})
    d.hup()
    wait_for(lambda: c_sets(d) == NUMA, WAIT_S, "the sets in numa order after SIGHUP")
    d.write_config({"pairs": {"rail0": "rail2+rail1"}, "locality": "any"})
    d.hup()
    wait_for(lambda: c_sets(d)["rail0"] == ["rail2", "rail1"], WAIT_S, "rail0's set as listed")
    assert c_sets(d)["rail1"] == ["rail2"]  # not configured: one, the next rail under `any`
    d.stop()
