"""The shm layout is an ABI: C (plugin/include/linkguard_shm.h, printed by lg_shm_layout) and the
Python mirror (linkguardd.shm.layout, native.py's ctypes structs, linkguardd.states) must agree on
every field's offset and size, every constant and every enum value."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import linkguardd
from linkguardd.shm import layout
from linkguardd.shm.native import LgShmReader, LgShmSnapshot

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugin"
HEADER = PLUGIN / "include" / "linkguard_shm.h"


@pytest.fixture(scope="module")
def c_layout() -> dict[str, Any]:
    """lg_shm_layout's JSON, building the tool first (make is a no-op when it is up to date)."""
    subprocess.run(["make", "-s", "-C", str(PLUGIN), "build/lg_shm_layout"], check=True)
    out = subprocess.run([str(PLUGIN / "build" / "lg_shm_layout")], check=True,
                         capture_output=True, text=True).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def c_enum(name: str) -> dict[str, int]:
    """The members of `enum name` in the header, with C's implicit numbering."""
    text = HEADER.read_text()
    match = re.search(r"enum\s+" + name + r"\s*\{(.*?)\};", text, re.DOTALL)
    assert match, f"enum {name} not found in {HEADER}"
    body = re.sub(r"/\*.*?\*/", "", match.group(1), flags=re.DOTALL)
    values: dict[str, int] = {}
    nxt = 0
    for item in (i.strip() for i in body.split(",")):
        if not item:
            continue
        ident, _, value = (part.strip() for part in item.partition("="))
        nxt = int(value, 0) if value else nxt
        values[ident] = nxt
        nxt += 1
    return values


@pytest.mark.parametrize(
    ("struct", "fields", "size"),
    [
        ("lg_shm_header", layout.HEADER_OFFSETS, layout.LG_SHM_HEADER_SIZE),
        ("lg_shm_nic", layout.NIC_OFFSETS, layout.LG_SHM_NIC_SIZE),
        ("lg_shm_event", layout.EVENT_OFFSETS, layout.LG_SHM_EVENT_SIZE),
    ],
)
def test_struct_fields_match_c(c_layout: dict[str, Any], struct: str,
                               fields: dict[str, tuple[int, int]], size: int) -> None:
    c_fields = {name: tuple(v) for name, v in c_layout[struct].items()}
    assert fields == c_fields  # same names, offsets and sizes, in both directions
    assert c_layout["sizes"][struct] == size
    # The fields tile the struct: no hole that Python's packed format would not have.
    assert sum(s for _, s in fields.values()) == size


def test_docstring_reproduces_every_field(c_layout: dict[str, Any]) -> None:
    doc = layout.__doc__ or ""
    for struct in ("lg_shm_header", "lg_shm_nic", "lg_shm_event"):
        block = doc.split(f"struct {struct} {{", 1)[1].split("};", 1)[0]
        for name in c_layout[struct]:
            assert re.search(rf"\b{name}\b", block), f"{struct}.{name} missing from the docstring"


def test_constants_match_c(c_layout: dict[str, Any]) -> None:
    for name, value in c_layout["constants"].items():
        assert getattr(layout, name) == value, name


def test_statuses_match_c(c_layout: dict[str, Any]) -> None:
    py = {f"LG_SHM_{s.name}": s.value for s in layout.ShmStatus}
    assert py == c_layout["lg_shm_status"]
    assert py == c_enum("lg_shm_status")


@pytest.mark.parametrize(
    ("struct", "ctype"), [("lg_shm_reader", LgShmReader), ("lg_shm_snapshot", LgShmSnapshot)]
)
def test_ctypes_mirrors_match_c(c_layout: dict[str, Any], struct: str,
                                ctype: type[ctypes.Structure]) -> None:
    assert ctypes.sizeof(ctype) == c_layout["sizes"][struct]
    py = {name: (getattr(ctype, name).offset, getattr(ctype, name).size)
          for name, *_ in ctype._fields_}
    assert py == {name: tuple(v) for name, v in c_layout[struct].items()}


def test_header_enums_are_complete(c_layout: dict[str, Any]) -> None:
    """The regex parse below sees every member (the COUNT sentinels agree with C)."""
    states = c_enum("lg_nic_state")
    reasons = c_enum("lg_reason")
    assert states.pop("LG_NIC_STATE_COUNT") == len(states) == layout.LG_NIC_STATE_COUNT
    assert reasons.pop("LG_REASON_COUNT") == len(reasons) == layout.LG_REASON_COUNT
    assert c_layout["constants"]["LG_NIC_STATE_COUNT"] == len(states)
    assert c_layout["constants"]["LG_REASON_COUNT"] == len(reasons)


def test_states_and_reasons_match_header() -> None:
    if not (Path(linkguardd.__file__).parent / "states.py").exists():
        pytest.skip("linkguardd/states.py not written yet")
    from linkguardd.states import NicState, Reason

    states = {k.removeprefix("LG_NIC_"): v for k, v in c_enum("lg_nic_state").items()}
    reasons = {k.removeprefix("LG_REASON_"): v for k, v in c_enum("lg_reason").items()}
    del states["STATE_COUNT"], reasons["COUNT"]
    assert {s.name: s.value for s in NicState} == states
    assert {r.name: r.value for r in Reason} == reasons


# ---- minor versions: a version 1 reader keeps reading everything it knew ---------------------
# The layout of version 1 as its lg_shm_layout printed it (plugin/include/linkguard_shm.h at
# version 1), frozen: never regenerate it. A new minor version may only carve fields out of
# version 1's reserved bytes.
V1 = json.loads((ROOT / "tests" / "fixtures" / "shm" / "layout_v1.json").read_text())
FILE_STRUCTS = ("lg_shm_header", "lg_shm_nic", "lg_shm_event")


@pytest.mark.parametrize("struct", FILE_STRUCTS)
def test_version_1_fields_keep_their_place(c_layout: dict[str, Any], struct: str) -> None:
    now = {name: tuple(v) for name, v in c_layout[struct].items()}
    for name, (offset, size) in V1[struct].items():
        if name.startswith("reserved"):
            # what a newer version put there lies wholly inside version 1's reserved range
            carved = [n for n, (o, s) in now.items() if o < offset + size and o + s > offset]
            assert all(offset <= now[n][0] and now[n][0] + now[n][1] <= offset + size
                       for n in carved), f"{struct}.{name}: a new field straddles it"
        else:
            assert now.get(name) == (offset, size), f"{struct}.{name} moved or changed size"
    v1_size = {"lg_shm_header": "LG_SHM_HEADER_SIZE", "lg_shm_nic": "LG_SHM_NIC_SIZE",
               "lg_shm_event": "LG_SHM_EVENT_SIZE"}[struct]
    assert c_layout["sizes"][struct] == V1["constants"][v1_size]


def test_minor_version_keeps_version_1_readers(c_layout: dict[str, Any]) -> None:
    """A version 1 reader accepts a file whose compat_version is at most 1 and whose entry sizes
    are its own; every value a version 1 reader compares against is unchanged."""
    now, v1 = c_layout["constants"], V1["constants"]
    assert now["LG_SHM_VERSION"] > v1["LG_SHM_VERSION"]
    assert now["LG_SHM_COMPAT_VERSION"] <= v1["LG_SHM_VERSION"]
    changed = {k for k in v1 if k not in ("LG_SHM_VERSION", "LG_SHM_COMPAT_VERSION")
               and now.get(k) != v1[k]}
    assert not changed, f"constants a version 1 reader relies on changed: {sorted(changed)}"
    assert c_layout["lg_shm_status"] == V1["lg_shm_status"]


def test_backup_set_fits_the_table() -> None:
    """Each backup_set index is one byte and a set can never need more than the table minus
    the NIC itself."""
    size = layout.NIC_OFFSETS["backup_set"][1]
    assert size == layout.LG_SHM_MAX_BACKUPS
    assert layout.LG_SHM_MAX_NICS <= 256
    assert layout.LG_SHM_MAX_BACKUPS <= layout.LG_SHM_MAX_NICS - 1
