"""`linkguard-cli health --shm`: liveness from the control file's heartbeat (issue 30: the
Kubernetes probes no longer ask the read-only socket, which any local reader can saturate).

Control files are written by the daemon's own ShmWriter; bad ones (missing, garbage, truncated,
a directory, a FIFO, one others may write) must exit 3 with a message naming what is wrong, and
no byte pattern may crash the CLI (hypothesis)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkguard_cli.main import cli
from linkguardd.shm import ShmWriter
from linkguardd.shm.layout import HEADER_OFFSETS, LG_SHM_HEADER_SIZE

EXIT_OK, EXIT_UNREACHABLE, EXIT_STALE = 0, 3, 5
WAIT_S = 60  # a subprocess that would block (a FIFO opened without O_NONBLOCK) fails here
NOWHERE = "/nonexistent/linkguard.sock"  # health --shm must not need any socket
FILE_SIZE = 4096  # what the fuzz cases write: a header and more


def health(path: Path | str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--socket", NOWHERE, "--ro-socket", NOWHERE, "health",
                                    "--shm", str(path), *args])


def assert_clean_exit(result: Result, code: int) -> None:
    """Exit `code` through the CLI's own paths: no traceback, one line that says why."""
    assert result.exit_code == code, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and len(result.output.splitlines()) == 1


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[ShmWriter]:
    with ShmWriter(tmp_path / "linkguard.shm", nic_capacity=4, ring_slots=8) as w:
        yield w


def control_file_bytes(tmp_path: Path) -> bytes:
    """A real control file's bytes (its writer closed, the file kept)."""
    w = ShmWriter(tmp_path / "model.shm", nic_capacity=1, ring_slots=8)
    w.heartbeat()
    w.close(unlink=False)
    return (tmp_path / "model.shm").read_bytes()


def with_heartbeat(raw: bytes, heartbeat_ns: int) -> bytes:
    at = HEADER_OFFSETS["heartbeat_ns"][0]
    return raw[:at] + heartbeat_ns.to_bytes(8, "little") + raw[at + 8:]


def test_a_fresh_heartbeat_is_alive_and_names_the_writers_pid(writer: ShmWriter) -> None:
    writer.heartbeat()
    result = health(writer.path)
    assert_clean_exit(result, EXIT_OK)
    assert f"linkguardd pid {os.getpid()}: alive, heartbeat " in result.output


def test_a_stale_heartbeat_is_5_within_the_limit_0(writer: ShmWriter) -> None:
    writer.heartbeat(time.monotonic_ns() - 5 * 10**9)  # the loop stopped 5 s ago
    stale = health(writer.path)
    assert_clean_exit(stale, EXIT_STALE)
    assert "heartbeat 5.0" in stale.output and "(limit 1 s): its loop is stalled" in stale.output
    assert f"pid {os.getpid()}" in stale.output and "alive" not in stale.output
    assert_clean_exit(health(writer.path, "--max-heartbeat-age", "60"), EXIT_OK)


def test_a_heartbeat_from_the_future_is_no_proof_of_life(writer: ShmWriter) -> None:
    """Another clock domain (a time namespace): its age would stay "fresh" forever."""
    writer.heartbeat(time.monotonic_ns() + 3600 * 10**9)
    result = health(writer.path, "--max-heartbeat-age", "7200")
    assert_clean_exit(result, EXIT_STALE)
    assert "in the future" in result.output


def test_no_heartbeat_at_all_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "never.shm"
    path.write_bytes(with_heartbeat(control_file_bytes(tmp_path), 0))
    result = health(path, "--max-heartbeat-age", "1e9")
    assert_clean_exit(result, EXIT_STALE)
    assert "no heartbeat written yet" in result.output


def truncated(path: Path, keep: float) -> None:
    raw = control_file_bytes(path.parent)
    path.write_bytes(raw[:int(len(raw) * keep)])


@pytest.mark.parametrize(("make", "why"), [
    (lambda p: None, "No such file or directory (is linkguardd running?"),
    (lambda p: p.mkdir(), "a directory, not linkguardd's control file"),
    (lambda p: p.write_bytes(b""), "control file shorter than its layout"),
    (lambda p: p.write_bytes(os.urandom(FILE_SIZE)), "control file has a wrong magic"),
    (lambda p: p.write_bytes(b"linkguard\n" * 100), "control file has a wrong magic"),
    (lambda p: truncated(p, 0.1), "control file shorter than its layout"),  # in the header
    (lambda p: truncated(p, 0.5), "control file shorter than its layout"),  # header intact
], ids=["missing", "directory", "empty", "random", "text", "truncated-header",
        "truncated-body"])
def test_no_control_file_is_3_with_the_reason(tmp_path: Path, make: object, why: str) -> None:
    path = tmp_path / "linkguard.shm"
    make(path)  # type: ignore[operator]
    result = health(path)
    assert_clean_exit(result, EXIT_UNREACHABLE)
    assert f"cannot read linkguardd's heartbeat from {path}: {why}" in result.output


def test_a_file_others_may_write_is_not_the_daemons(writer: ShmWriter) -> None:
    """The plugin's own owner check: whoever can write the file could forge a heartbeat."""
    writer.heartbeat()
    os.chmod(writer.path, 0o666)
    result = health(writer.path)
    assert_clean_exit(result, EXIT_UNREACHABLE)
    assert "owner or mode untrusted" in result.output


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO with no writer blocks a plain open(2) forever; the probe would hang until kubelet
    kills it. The real CLI in a subprocess: a hang fails here as TimeoutExpired."""
    fifo = tmp_path / "linkguard.shm"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "linkguard_cli.main", "health", "--shm",
                          str(fifo)], capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert out.returncode == EXIT_UNREACHABLE, out
    assert "not a regular file (a FIFO, socket or device)" in out.stderr and not out.stdout


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=FILE_SIZE))
def test_any_bytes_in_the_file_exit_3_cleanly(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "hostile.shm"
    path.write_bytes(raw)
    assert_clean_exit(health(path), EXIT_UNREACHABLE)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, LG_SHM_HEADER_SIZE - 1), st.integers(0, 255)),
                min_size=1, max_size=8))
def test_a_corrupted_header_is_refused_or_judged_never_a_crash(
        tmp_path: Path, edits: list[tuple[int, int]]) -> None:
    """Past the magic: a real file with header bytes changed. The C reader validates the
    layout; what passes is judged by its heartbeat (alive, stale) like any daemon's."""
    raw = bytearray(with_heartbeat(control_file_bytes(tmp_path), time.monotonic_ns()))
    for offset, value in edits:
        raw[offset] = value
    path = tmp_path / "hostile.shm"
    path.write_bytes(bytes(raw))
    result = health(path, "--max-heartbeat-age", "3600")
    assert result.exit_code in (EXIT_OK, EXIT_UNREACHABLE, EXIT_STALE), result.output
    assert_clean_exit(result, result.exit_code)
