"""The control channel end to end: the Python writer (through the C writer) against the C reader,
both as the plugin's CLI twin lg_shm_dump and through ctypes (ShmReader)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import secrets
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from linkguardd.shm import Event, NicEntry, ShmReader, ShmStatus, ShmUnavailable, ShmWriter
from linkguardd.shm.layout import HEADER_OFFSETS, LG_NO_BACKUP, LG_SHM_VERSION
from linkguardd.shm.native import strerror

PLUGIN = Path(__file__).resolve().parents[2] / "plugin"
M64 = (1 << 64) - 1
STRESS_SECONDS = 3
EXIT_NO_DAEMON, EXIT_CHECK = 1, 3  # lg_shm_dump's exit statuses


@pytest.fixture(scope="module")
def dump() -> Path:
    subprocess.run(["make", "-s", "-C", str(PLUGIN), "build/lg_shm_dump"], check=True)
    return PLUGIN / "build" / "lg_shm_dump"


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A private directory on tmpfs (where the daemon's file lives), removed afterwards."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = Path("/dev/shm") / f"lgtest-{secrets.token_hex(6)}"
    d.mkdir(mode=0o700)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_dump(dump: Path, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(dump), "--path", str(path), *args], capture_output=True,
                          text=True, timeout=60, check=False)


def dump_json(dump: Path, path: Path, *args: str) -> dict[str, Any]:
    proc = run_dump(dump, path, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def nic(name: str, state: int = 1, **kw: Any) -> NicEntry:
    return NicEntry(name=name, state=state, **kw)


def event(i: int) -> Event:
    return Event(nic_index=i % 3, name=f"rail{i % 3}", old_state=1, new_state=3, reason=2,
                 epoch=i, time_ns=i * 1000, fact_ns=i * 999)


def stress_entries(c: int, count: int) -> list[NicEntry]:
    """The self-checking pattern lg_shm_dump --stress-snapshots expects (see its header): every
    field of every entry derives from the publish counter c."""
    hx = f"{c & M64:016x}"
    v4 = tuple(socket.inet_ntop(socket.AF_INET, struct.pack(">I", (c + k) & 0xFFFFFFFF))
               for k in range(4))
    v6 = tuple(socket.inet_ntop(socket.AF_INET6,
                                struct.pack(">QQ", (c + k) & M64, ~(c + k) & M64))
               for k in range(4))
    return [NicEntry(name=f"stress{i}", state=c % 6, reason=c % 17, epoch=c,
                     last_change_ns=(c * 0x9E3779B97F4A7C15) & M64, backup_index=LG_NO_BACKUP,
                     flags=c & 15, ifindex=c & 0xFFFFFFFF, speed_mbps=(c >> 32) & 0xFFFFFFFF,
                     rdma_port=(3 * c) & 0xFFFFFFFF, ipv4=v4, ipv6=v6, rdma_dev=hx * 3,
                     pci_path=hx * 11) for i in range(count)]


def valid_file(path: Path) -> Path:
    """A well-formed control file left behind by a writer, for tests to corrupt."""
    w = ShmWriter(path, nic_capacity=4, ring_slots=8)
    w.publish_table([nic("rail0")])
    w.close(unlink=False)
    return path


def patch(path: Path, field: str, value: int) -> None:
    offset, size = HEADER_OFFSETS[field]
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(value.to_bytes(size, "little"))


# ---- the stress test ---------------------------------------------------------------------

def test_stress_python_writer_c_reader_never_tears(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "stress"
    count = 8
    with ShmWriter(path, nic_capacity=16, ring_slots=64) as w:
        c = (1 << 32) - 1000  # the counter (and epoch) crosses 2^32 during the run
        w.publish_table(stress_entries(c, count))
        reader = subprocess.Popen(
            [str(dump), "--path", str(path), "--stress-snapshots", str(STRESS_SECONDS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while reader.poll() is None:  # as fast as Python can, until the reader is done
                c += 1
                w.publish_table(stress_entries(c, count))
            out, err = reader.communicate(timeout=60)
        finally:
            if reader.poll() is None:
                reader.kill()
    result = json.loads(out)
    print(f"stress: {result}")
    assert reader.returncode == 0, err
    assert result["torn"] == 0, err
    assert result["snapshots"] > 1000
    # The writer really raced the reader: distinct generations were seen while it wrote, so
    # torn == 0 is evidence (with the seqlock's re-check removed, this run reports hundreds
    # torn). The bound is low because a loaded 2-core machine starves the Python writer.
    assert result["generations"] > 20
    assert result["last_counter"] > result["first_counter"] >= (1 << 32) - 1000


# ---- table and events --------------------------------------------------------------------

def test_table_roundtrip_python_and_c(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "table"
    entries = [
        nic("rail0", 1, reason=1, epoch=3, last_change_ns=123456789, backup_index=1, flags=0b1011,
            ifindex=7, speed_mbps=400000, rdma_port=1, ipv4=("198.18.0.1", "198.18.1.1"),
            ipv6=("fd00::1",), rdma_dev="mlx5_0", pci_path="/sys/devices/pci0000:00/0000:00:02.0"),
        nic("rail1", 3, reason=2, epoch=9, backup_index=0),
    ]
    with ShmWriter(path, nic_capacity=4, ring_slots=8) as w, ShmReader(path) as r:
        assert r.changed()  # first call
        assert not r.changed()
        generation = w.publish_table(entries)
        assert generation == 2
        assert r.changed()
        assert r.snapshot() == (generation, entries)
        assert not r.changed()  # the snapshot saw this generation
        c = dump_json(dump, path)
        assert c["generation"] == generation
        assert c["daemon_pid"] == os.getpid() == r.header().daemon_pid
        c0, c1 = c["nics"]
        assert (c0["name"], c0["state"], c0["reason"], c0["epoch"]) == ("rail0", "UP", "STARTUP", 3)
        assert (c0["backup_index"], c0["flags"], c0["ifindex"], c0["speed_mbps"]) == (
            1, 0b1011, 7, 400000)
        assert (c0["ipv4"], c0["ipv6"]) == (["198.18.0.1", "198.18.1.1"], ["fd00::1"])
        assert (c0["rdma_dev"], c0["rdma_port"], c0["pci_path"]) == (
            "mlx5_0", 1, entries[0].pci_path)
        assert (c1["name"], c1["state"], c1["reason"]) == ("rail1", "DOWN", "CARRIER_LOST")
        assert w.publish_table(entries[:1]) == 4  # shrinking the table
        assert len(r.snapshot()[1]) == 1


def test_garbage_entries_are_sanitized(shm_dir: Path) -> None:
    path = shm_dir / "garbage"
    with ShmWriter(path, nic_capacity=4, ring_slots=8) as w, ShmReader(path) as r:
        w.publish_table([nic("rail0", state=99, reason=500, backup_index=3)])
        (entry,) = r.snapshot()[1]
        assert (entry.state, entry.reason, entry.backup_index) == (0, 0, LG_NO_BACKUP)


def test_backup_sets_roundtrip_and_are_sanitized(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "sets"
    entries = [nic("rail0", backup_set=(2, 1, 3)), nic("rail1", backup_index=0),
               nic("rail2", backup_set=(3,)), nic("rail3")]
    assert entries[0].backup_index == 2 and entries[1].backup_set == (0,)  # each implies the other
    with pytest.raises(ValueError, match="backup_index 1 is not the first of backup_set"):
        nic("rail0", backup_index=1, backup_set=(2, 1)).pack()
    with pytest.raises(ValueError, match="at most 16 backups"):
        nic("rail0", backup_set=tuple(range(1, 18))).pack()
    with ShmWriter(path, nic_capacity=4, ring_slots=8) as w, ShmReader(path) as r:
        w.publish_table(entries)
        assert r.snapshot()[1] == entries
        c = dump_json(dump, path)
        assert [n["backup_set"] for n in c["nics"]] == [[2, 1, 3], [0], [3], []]
        assert [n["backup_index"] for n in c["nics"]] == [2, 0, 3, LG_NO_BACKUP]
        # a writer's garbage: past the table, the NIC itself, a repeat
        w.publish_table([nic("rail0", backup_set=(1, 0, 9, 1, 2)), nic("rail1"), nic("rail2")])
        assert r.snapshot()[1][0].backup_set == (1, 2)
        assert dump_json(dump, path)["nics"][0]["backup_set"] == [1, 2]


def test_version_1_reader_sees_the_pair(shm_dir: Path) -> None:
    """The bytes a version 1 reader decodes (tests/fixtures/shm/layout_v1.json) are those of a
    pair-only file: the nearest member as backup_index, compat_version 1."""
    v1 = json.loads((PLUGIN.parent / "tests" / "fixtures" / "shm" / "layout_v1.json").read_text())
    path = shm_dir / "v1"
    with ShmWriter(path, nic_capacity=2, ring_slots=8) as w:
        w.publish_table([nic("rail0", 1, epoch=5, backup_set=(1,)), nic("rail1", 3, epoch=7)])
        raw = path.read_bytes()

    def field(buf: bytes, struct_name: str, name: str, fmt: str) -> Any:
        off = v1[struct_name][name][0]
        return struct.unpack_from("<" + fmt, buf, off)[0]

    assert field(raw, "lg_shm_header", "compat_version", "I") <= v1["constants"]["LG_SHM_VERSION"]
    assert field(raw, "lg_shm_header", "nic_size", "I") == v1["constants"]["LG_SHM_NIC_SIZE"]
    table = field(raw, "lg_shm_header", "nic_table_offset", "Q")
    size = v1["constants"]["LG_SHM_NIC_SIZE"]
    rows = [raw[table + i * size: table + (i + 1) * size] for i in range(2)]
    assert [field(e, "lg_shm_nic", "name", "16s").rstrip(b"\0") for e in rows] == [b"rail0",
                                                                                 b"rail1"]
    assert [field(e, "lg_shm_nic", "backup_index", "i") for e in rows] == [1, LG_NO_BACKUP]
    assert [field(e, "lg_shm_nic", "epoch", "Q") for e in rows] == [5, 7]
    assert [field(e, "lg_shm_nic", "state", "I") for e in rows] == [1, 3]


def test_ring_wraps_past_its_size(shm_dir: Path) -> None:
    path = shm_dir / "ring"
    with ShmWriter(path, nic_capacity=1, ring_slots=16) as w, ShmReader(path) as r:
        cursor = r.ring_head()
        seen: list[Event] = []
        for i in range(1, 101):  # 100 events through 16 slots, read every 7
            assert w.push_event(event(i)) == i
            if i % 7 == 0 or i == 100:
                events, cursor, lapped = r.events_since(cursor)
                assert not lapped
                seen += events
        assert [e.seq for e in seen] == list(range(1, 101))
        assert seen[41] == dataclasses.replace(event(42), seq=42)


def test_ring_wraps_past_2_32(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "ring32"
    first = (1 << 32) - 10
    with ShmWriter(path, nic_capacity=1, ring_slots=16, first_seq=first) as w:
        w.heartbeat()
        with ShmReader(path) as r:
            start = r.ring_head()
            assert start == first - 1
            cursor = start
            for batch in range(3):  # 36 events, crossing 2^32 in the second batch
                for i in range(12):
                    w.push_event(event(batch * 12 + i))
                c = dump_json(dump, path, "--events-since", str(cursor))
                assert not c["events_lapped"]
                assert [e["seq"] for e in c["events"]] == list(range(cursor + 1, cursor + 13))
                events, cursor, lapped = r.events_since(cursor)
                assert not lapped
                assert [e["seq"] for e in c["events"]] == [e.seq for e in events]
                assert c["events_cursor"] == cursor
            assert cursor == first + 35 > 1 << 32


def test_events_lapped(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "lap"
    with ShmWriter(path, nic_capacity=1, ring_slots=16) as w, ShmReader(path) as r:
        w.heartbeat()
        cursor = r.ring_head()
        for i in range(1, 41):
            w.push_event(event(i))
        events, new_cursor, lapped = r.events_since(cursor)
        assert lapped  # 24 events were lost: the caller must re-read the table
        assert [e.seq for e in events] == list(range(25, 41))  # what the ring still holds
        assert new_cursor == 40
        assert r.events_since(new_cursor) == ([], 40, False)
        c = dump_json(dump, path, "--events-since", "0")
        assert c["events_lapped"]
        assert [e["seq"] for e in c["events"]] == list(range(25, 41))
        assert r.events_since(1000)[2]  # a cursor from another daemon: lapped, not silent


# ---- "no daemon" -------------------------------------------------------------------------

def make_missing(p: Path) -> None:
    pass


def make_empty(p: Path) -> None:
    p.write_bytes(b"")


def make_short(p: Path) -> None:
    p.write_bytes(valid_file(p).read_bytes()[:100])


def make_random(p: Path) -> None:
    p.write_bytes(random.Random(7).randbytes(16384))


def make_wrong_magic(p: Path) -> None:
    patch(valid_file(p), "magic", 0x12345678)


def make_unknown_major(p: Path) -> None:
    patch(valid_file(p), "compat_version", LG_SHM_VERSION + 1)


def make_bad_layout(p: Path) -> None:
    patch(valid_file(p), "ring_slots", 6)  # not a power of two


def make_truncated(p: Path) -> None:
    os.truncate(valid_file(p), 1024)  # the header promises more


@pytest.mark.parametrize(
    ("make", "status"),
    [
        (make_missing, ShmStatus.ENOENT),
        (make_empty, ShmStatus.ESHORT),
        (make_short, ShmStatus.ESHORT),
        (make_random, ShmStatus.EMAGIC),
        (make_wrong_magic, ShmStatus.EMAGIC),
        (make_unknown_major, ShmStatus.EVERSION),
        (make_bad_layout, ShmStatus.ELAYOUT),
        (make_truncated, ShmStatus.ESHORT),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)).removeprefix("make_"),
)
def test_bad_file_means_no_daemon(shm_dir: Path, dump: Path, make: Callable[[Path], None],
                                  status: ShmStatus) -> None:
    path = shm_dir / "bad"
    make(path)
    with pytest.raises(ShmUnavailable) as exc:
        ShmReader(path)
    assert exc.value.status == status
    assert strerror(status) in str(exc.value) and str(path) in str(exc.value)
    proc = run_dump(dump, path, "--json")
    assert proc.returncode == EXIT_NO_DAEMON
    assert strerror(status) in proc.stderr
    assert proc.stdout == ""


def test_a_newer_minor_layout_is_read_by_todays_reader(shm_dir: Path, dump: Path) -> None:
    """Upgrades (docs/operators.md): a daemon whose layout is a newer version with the same
    compat_version is read by the plugins of jobs that were started before it."""
    path = valid_file(shm_dir / "newer")
    patch(path, "version", LG_SHM_VERSION + 1)
    with ShmReader(path) as r:
        assert [n.name for n in r.snapshot()[1]] == ["rail0"]
    proc = run_dump(dump, path, "--json", "--heartbeat-timeout-ms", "0")
    assert proc.returncode == 0, proc.stderr
    patch(path, "compat_version", LG_SHM_VERSION + 1)  # an entry size changed: not ours
    with pytest.raises(ShmUnavailable) as exc:
        ShmReader(path)
    assert exc.value.status == ShmStatus.EVERSION


def test_stale_heartbeat(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "stale"
    with ShmWriter(path, nic_capacity=1, ring_slots=8) as w, ShmReader(path) as r:
        w.heartbeat()
        assert r.alive(timeout_ns=60 * 10**9)
        w.heartbeat(now_ns=1)  # a beat from long ago: the daemon stopped beating
        assert not r.alive(timeout_ns=10**9)
        assert r.heartbeat_ns() == r.header().heartbeat_ns == 1
        proc = run_dump(dump, path)
        assert proc.returncode == EXIT_NO_DAEMON
        assert strerror(ShmStatus.ESTALE) in proc.stderr
        assert run_dump(dump, path, "--heartbeat-timeout-ms", "0").returncode == 0
        w.heartbeat()
        assert r.alive(timeout_ns=60 * 10**9)


# ---- the file ----------------------------------------------------------------------------

def test_a_file_others_can_write_is_not_trusted(shm_dir: Path, dump: Path) -> None:
    """Issue #16: whoever can write the control file chooses the plugin's devices, so a file
    writable by group or others (or, below, owned by a stranger) is "no daemon"."""
    path = shm_dir / "planted"
    with ShmWriter(path, nic_capacity=1, ring_slots=8) as w:
        w.publish_table([nic("rail0", state=3)])
        w.heartbeat()
        ShmReader(path).close()
        for mode in (0o666, 0o646, 0o664):
            path.chmod(mode)
            with pytest.raises(ShmUnavailable) as exc:
                ShmReader(path)
            assert exc.value.status == ShmStatus.EUNTRUSTED
            proc = run_dump(dump, path, "--json")
            assert proc.returncode == EXIT_NO_DAEMON
            assert strerror(ShmStatus.EUNTRUSTED) in proc.stderr
        path.chmod(0o644)
        with ShmReader(path) as r:
            assert r.snapshot()[1][0].name == "rail0"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_strangers_file_is_trusted_only_as_the_configured_owner(
        shm_dir: Path, dump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = shm_dir / "foreign"
    with ShmWriter(path, nic_capacity=1, ring_slots=8) as w:
        w.heartbeat()
        os.chown(path, 54321, 54321)
        with pytest.raises(ShmUnavailable) as exc:
            ShmReader(path)
        assert exc.value.status == ShmStatus.EUNTRUSTED
        monkeypatch.setenv("LINKGUARD_SHM_OWNER", "54321")
        ShmReader(path).close()
        assert run_dump(dump, path, "--json").returncode == 0


def test_writer_makes_a_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "run" / "linkguard" / "linkguard.shm"
    with ShmWriter(path, nic_capacity=1, ring_slots=8):
        assert path.parent.stat().st_mode & 0o777 == 0o755
        ShmReader(path).close()


def test_file_mode_0644_despite_umask(shm_dir: Path) -> None:
    path = shm_dir / "mode"
    old = os.umask(0o077)
    try:
        w = ShmWriter(path, nic_capacity=1, ring_slots=8)
    finally:
        os.umask(old)
    with w:
        assert path.stat().st_mode & 0o777 == 0o644
        assert [p.name for p in shm_dir.iterdir()] == ["mode"]  # no temporary file left
    assert not path.exists()


def test_close_unlink_spares_a_successor(shm_dir: Path) -> None:
    path = shm_dir / "restart"
    old = ShmWriter(path, nic_capacity=1, ring_slots=8)
    reader = ShmReader(path)
    new = ShmWriter(path, nic_capacity=2, ring_slots=8)  # a restarted daemon
    new.publish_table([nic("rail0"), nic("rail1")])
    assert reader.replaced()
    old.close(unlink=True)
    assert path.exists()
    with ShmReader(path) as r2:
        assert not r2.replaced()
        assert [n.name for n in r2.snapshot()[1]] == ["rail0", "rail1"]
    new.close(unlink=True)
    assert not path.exists()
    assert reader.replaced()
    reader.close()


def wait_mapped(pid: int, path: Path) -> None:
    """Until process `pid` has mapped `path` (bounded; this is a rendezvous, not a timing)."""
    for _ in range(2000):
        if str(path) in Path(f"/proc/{pid}/maps").read_text():
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never mapped {path}")


def test_wait_state_sees_change_and_follows_restart(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "wait"
    first = ShmWriter(path, nic_capacity=2, ring_slots=8)
    first.publish_table([nic("rail0", 1, epoch=1)])
    first.heartbeat()
    waiter = subprocess.Popen(
        [str(dump), "--path", str(path), "--wait-state", "rail0", "DOWN", "--timeout-ms", "20000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_mapped(waiter.pid, path)  # it reads the first daemon's file
    first.publish_table([nic("rail0", 1, epoch=1), nic("rail1", 3, epoch=2)])
    # The daemon dies (stale beat) and a new one publishes rail0 DOWN in a new file: the C
    # reader must notice the replaced file and re-open it, as the plugin does.
    first.heartbeat(now_ns=1)
    first.close(unlink=False)
    with ShmWriter(path, nic_capacity=2, ring_slots=8) as second:
        second.publish_table([nic("rail0", 3, reason=2, epoch=5)])
        out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    seen = json.loads(out)
    assert (seen["nic"], seen["state"], seen["seen"]) == ("rail0", "DOWN", True)
    assert (seen["reason"], seen["epoch"]) == ("CARRIER_LOST", 5)


def test_wait_state_times_out(shm_dir: Path, dump: Path) -> None:
    path = shm_dir / "timeout"
    with ShmWriter(path, nic_capacity=1, ring_slots=8) as w:
        w.publish_table([nic("rail0", 1)])
        proc = run_dump(dump, path, "--wait-state", "rail0", "drained", "--timeout-ms", "50")
        assert proc.returncode == EXIT_CHECK
        assert json.loads(proc.stdout)["last_state"] == "UP"
        proc = run_dump(dump, path, "--wait-state", "rail7", "UP", "--timeout-ms", "50")
        assert json.loads(proc.stdout)["last_state"] == "ABSENT"
        assert run_dump(dump, path, "--wait-state", "rail0", "SIDEWAYS").returncode == 2


# ---- the writer's own checks ---------------------------------------------------------------

def test_writer_refuses_bad_input(shm_dir: Path) -> None:
    with pytest.raises(OSError) as exc:
        ShmWriter(shm_dir / "w", nic_capacity=0)
    assert exc.value.errno == 22  # EINVAL
    (shm_dir / "file").write_text("")
    with pytest.raises(OSError):
        ShmWriter(shm_dir / "file" / "under-a-file")  # its directory cannot be made
    with ShmWriter(shm_dir / "w", nic_capacity=2, ring_slots=8) as w:
        for bad in ([nic("a"), nic("b"), nic("c")], [nic("x" * 16)],
                    [nic("a", ipv4=("300.1.1.1",))], [nic("a", ipv6=("::1",) * 5)],
                    [nic("a", pci_path="/" * 192)]):
            with pytest.raises(ValueError):
                w.publish_table(bad)
        with pytest.raises(ValueError):
            w.push_event(Event(0, "n" * 20, 1, 3, 2))
        assert w.publish_table([]) == 2  # nothing refused above reached the file
    assert w.closed
    with pytest.raises(ValueError):
        w.publish_table([])
    w.close()  # idempotent


def test_writer_dead_mid_update_is_busy(shm_dir: Path) -> None:
    path = valid_file(shm_dir / "dead")
    patch(path, "generation", 3)  # odd: the writer died between its two generation stores
    with ShmReader(path) as r, pytest.raises(ShmUnavailable) as exc:
        r.snapshot()
    assert exc.value.status == ShmStatus.EBUSY
