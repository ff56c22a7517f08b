"""Backup selection from fake sysfs trees laid out as the kernel does (fake_sysfs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from fake_sysfs import add_nic

from linkguardd.pairing import (
    MAX_SET,
    NO_BACKUP,
    NicTopology,
    PairingError,
    backup_sets,
    backup_sets_by_name,
    backups_by_name,
    choose_backups,
    list_pci_netdevs,
    read_topology,
)

ROOT_PORT_A = "pci0000:00/0000:00:01.0"
ROOT_PORT_B = "pci0000:00/0000:00:03.0"
SWITCH_1 = ROOT_PORT_A + "/0000:01:00.0"  # switch upstream port below root port A
SWITCH_2 = ROOT_PORT_B + "/0000:05:00.0"


def names(root: Path, ifnames: list[str]) -> dict[str, str | None]:
    return backups_by_name(read_topology(ifnames, root))


def test_same_card_first(tmp_path: Path) -> None:
    # two dual-port cards on two root ports, listed card A, card B, card A, card B
    add_nic(tmp_path, "rail0", ROOT_PORT_A + "/0000:02:00.0", 0)
    add_nic(tmp_path, "rail1", ROOT_PORT_B + "/0000:06:00.0", 0)
    add_nic(tmp_path, "rail2", ROOT_PORT_A + "/0000:02:00.1", 0)
    add_nic(tmp_path, "rail3", ROOT_PORT_B + "/0000:06:00.1", 0)
    assert names(tmp_path, ["rail0", "rail1", "rail2", "rail3"]) == {
        "rail0": "rail2", "rail1": "rail3", "rail2": "rail0", "rail3": "rail1"}


def test_same_pcie_switch_before_numa_and_order(tmp_path: Path) -> None:
    # DGX-like: two NICs behind each switch, all on NUMA node 0
    add_nic(tmp_path, "rail0", SWITCH_1 + "/0000:02:00.0/0000:03:00.0", 0)
    add_nic(tmp_path, "rail1", SWITCH_2 + "/0000:06:00.0/0000:07:00.0", 0)
    add_nic(tmp_path, "rail2", SWITCH_1 + "/0000:02:01.0/0000:04:00.0", 0)
    add_nic(tmp_path, "rail3", SWITCH_2 + "/0000:06:01.0/0000:08:00.0", 0)
    rows = read_topology(["rail0", "rail1", "rail2", "rail3"], tmp_path)
    assert rows[0] == NicTopology("rail0", ("pci0000:00", "0000:00:01.0", "0000:01:00.0",
                                            "0000:02:00.0", "0000:03:00.0"), 0)
    assert rows[0].pci_address == "0000:03:00.0"
    assert choose_backups(rows) == [2, 3, 0, 1]


def test_deeper_common_bridge_wins(tmp_path: Path) -> None:
    # x0 and x1: two ports of one card; y0: another card behind the same switch
    add_nic(tmp_path, "x0", SWITCH_1 + "/0000:02:00.0/0000:03:00.0")
    add_nic(tmp_path, "y0", SWITCH_1 + "/0000:02:01.0/0000:04:00.0")
    add_nic(tmp_path, "x1", SWITCH_1 + "/0000:02:00.0/0000:03:00.1")
    assert names(tmp_path, ["x0", "y0", "x1"]) == {"x0": "x1", "y0": "x1", "x1": "x0"}


def test_numa_node_when_no_shared_bridge(tmp_path: Path) -> None:
    for i, numa in enumerate([0, 1, 0, 1]):
        add_nic(tmp_path, f"rail{i}", f"pci0000:00/0000:00:0{i + 1}.0/0000:1{i}:00.0", numa)
    assert names(tmp_path, [f"rail{i}" for i in range(4)]) == {
        "rail0": "rail2", "rail1": "rail3", "rail2": "rail0", "rail3": "rail1"}


def test_one_group_forms_a_ring(tmp_path: Path) -> None:
    # four NICs on one NUMA node, no shared bridge: each backs up the next, wrapping
    for i in range(4):
        add_nic(tmp_path, f"rail{i}", f"pci0000:00/0000:00:0{i + 1}.0/0000:1{i}:00.0", 1)
    assert choose_backups(read_topology([f"rail{i}" for i in range(4)], tmp_path)) == [1, 2, 3, 0]


def test_virtual_or_unknown_numa_falls_back_to_next_rail(tmp_path: Path) -> None:
    add_nic(tmp_path, "veth0", None)
    add_nic(tmp_path, "eth1", ROOT_PORT_A + "/0000:02:00.0", -1)  # -1: no NUMA affinity
    add_nic(tmp_path, "eth2", ROOT_PORT_B + "/0000:06:00.0", -1)
    rows = read_topology(["veth0", "eth1", "eth2", "missing0"], tmp_path)
    assert rows[0] == NicTopology("veth0") and rows[3] == NicTopology("missing0")
    assert rows[1].numa_node is None
    assert choose_backups(rows) == [1, 2, 3, 0]


def test_virtio_netdev_reads_numa_of_its_pci_function(tmp_path: Path) -> None:
    add_nic(tmp_path, "ens3", "pci0000:00/0000:00:03.0", 1, child="virtio0")
    [row] = read_topology(["ens3"], tmp_path)
    assert row == NicTopology("ens3", ("pci0000:00", "0000:00:03.0"), 1)


def test_single_nic_has_no_backup() -> None:
    assert choose_backups([NicTopology("rail0")]) == [NO_BACKUP]
    assert choose_backups([]) == []
    assert backups_by_name([NicTopology("rail0")]) == {"rail0": None}


def test_configured_pairs_win() -> None:
    rows = [NicTopology(f"rail{i}") for i in range(3)]
    assert choose_backups(rows, {"rail0": "rail2"}) == [2, 2, 0]  # rail1, rail2: automatic
    with pytest.raises(PairingError, match="rail1 is in its own backup set"):
        choose_backups(rows, {"rail1": "rail1"})
    with pytest.raises(PairingError, match="backup rail7 of rail0 is not monitored"):
        choose_backups(rows, {"rail0": "rail7"})
    with pytest.raises(PairingError, match="rail9 is not monitored"):
        choose_backups(rows, {"rail9": "rail0"})


def test_list_pci_netdevs_in_natural_order(tmp_path: Path) -> None:
    for i in (10, 2, 1):
        add_nic(tmp_path, f"rail{i}", f"pci0000:00/0000:00:0{i % 8}.0/0000:{i:02x}:00.0")
    add_nic(tmp_path, "veth0", None)
    assert list_pci_netdevs(tmp_path) == ["rail1", "rail2", "rail10"]
    assert list_pci_netdevs(tmp_path / "nowhere") == []


# ---- backup sets and the locality policy ---------------------------------------------------
def dgx_like(root: Path) -> list[NicTopology]:
    """Eight rails: two per PCIe switch, two switches per NUMA node (the layout of an 8-GPU
    host: rail 2k and 2k+1 share switch k)."""
    for i in range(8):
        switch = f"pci0000:{i // 4:02x}/0000:{i // 4:02x}:0{i // 2 % 2 + 1}.0/0000:1{i // 2}:00.0"
        add_nic(root, f"rail{i}", f"{switch}/0000:2{i // 2}:0{i % 2}.0/0000:3{i}:00.0", i // 4)
    return read_topology([f"rail{i}" for i in range(8)], root)


def test_all_is_every_other_nic_nearest_first(tmp_path: Path) -> None:
    rows = dgx_like(tmp_path)
    sets = backup_sets_by_name(rows, {"*": "all"})
    # rail0: its switch mate, the other switch of its NUMA node, then the other node, ring order
    assert sets["rail0"] == ("rail1", "rail2", "rail3", "rail4", "rail5", "rail6", "rail7")
    assert sets["rail5"] == ("rail4", "rail6", "rail7", "rail0", "rail1", "rail2", "rail3")
    assert backup_sets_by_name(rows, {"*": "all"}, "numa")["rail5"] == (
        "rail6", "rail7", "rail4", "rail0", "rail1", "rail2", "rail3")
    assert backup_sets_by_name(rows, {"*": "all"}, "any")["rail5"] == (
        "rail6", "rail7", "rail0", "rail1", "rail2", "rail3", "rail4")
    for name, members in sets.items():
        assert name not in members and len(set(members)) == 7


def test_configured_set_is_ordered_by_locality(tmp_path: Path) -> None:
    rows = dgx_like(tmp_path)
    pairs = {"rail0": "rail6+rail2+rail1", "rail3": "all", "rail4": "rail5"}
    assert backup_sets(rows, pairs) [0] == [1, 2, 6]  # switch mate, same node, other node
    assert backup_sets(rows, pairs, "numa")[0] == [2, 1, 6]  # same node in the given order
    assert backup_sets(rows, pairs, "any")[0] == [6, 2, 1]  # as listed
    sets = backup_sets_by_name(rows, pairs)
    assert sets["rail4"] == ("rail5",)  # a pair is a set of one
    assert sets["rail1"] == ("rail0",)  # not configured: the nearest one, as before
    assert sets["rail3"][:2] == ("rail2", "rail0")
    assert choose_backups(rows, pairs)[:5] == [1, 0, 3, 2, 5]  # the first of each set


def test_star_gives_unlisted_nics_all() -> None:
    rows = [NicTopology(f"rail{i}") for i in range(4)]
    assert backup_sets(rows, {"*": "all", "rail2": "rail0"}) == [[1, 2, 3], [2, 3, 0], [0],
                                                                 [0, 1, 2]]


def test_all_is_bounded_by_the_shm_entry() -> None:
    rows = [NicTopology(f"n{i}") for i in range(20)]
    sets = backup_sets(rows, {"n0": "all"})
    assert sets[0] == list(range(1, 17)) and len(sets[0]) == MAX_SET == 16


def test_bad_sets_name_what_is_wrong() -> None:
    rows = [NicTopology(f"rail{i}") for i in range(3)]
    bad = {
        "rail0:rail1+rail7": "pairs: backup rail7 of rail0 is not monitored",
        "rail0:rail1+rail1": "pairs: rail0: rail1 listed more than once in 'rail1+rail1'",
        "rail0:rail1+rail0": "pairs: rail0 is in its own backup set",
        "rail0:": "pairs: rail0: empty member in backup set ''",
        "rail0:+rail1": "pairs: rail0: empty member in backup set '+rail1'",
        "rail0:all+rail1": "pairs: rail0: all cannot be combined with names",
        "*:rail1": "pairs: * takes only all (every other NIC), got 'rail1'",
        "rail0:rail/1": "pairs: rail0: 'rail/1' is not a valid netdev name",
    }
    for spec, message in bad.items():
        key, _, value = spec.partition(":")
        with pytest.raises(PairingError) as err:
            backup_sets(rows, {key: value})
        assert str(err.value).startswith(message), spec
    with pytest.raises(PairingError, match="locality: must be one of same-switch, numa, any"):
        backup_sets(rows, {}, "rack")


def test_single_nic_with_all_has_an_empty_set() -> None:
    assert backup_sets([NicTopology("rail0")], {"*": "all"}) == [[]]
