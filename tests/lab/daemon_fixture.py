"""Run the real `linkguardd` inside lab hosts and read what it publishes.

`daemons` (a fixture; register it from a conftest.py with an import) starts one daemon per lab
host through the installed entry point, each with its own shared-memory file
/dev/shm/<lab prefix>-<host>, its own sockets (/tmp/lgd-*/api.sock, api-ro.sock, and verdict.sock
for the plugins' verdicts: give it to a plugin as LINKGUARD_VERDICT_SOCKET), state
directory and config file in private temporary directories, and /metrics off. A daemon started
again (stop or kill, then start) keeps its state directory, as under systemd. A daemon is ready once its file is there, its
heartbeat is fresh, the file names this PID, every NIC has a state and it has logged
"started" (after its last socket is served). `Daemon.stop()` sends SIGTERM by PID and
asserts a clean exit: status 0 and the shm file removed. The fixture's teardown stops what a
test left running (SIGKILL after a grace period) and removes leftover files, before the lab goes.

Results can be read through both readers: Python (ShmReader, the plugin's C reader through
ctypes) and the C tool plugin/build/lg_shm_dump (`c_dump`, `c_wait_state`), which is what an
NCCL process would see. Every wait here is bounded.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from k8s_manifests import run_paths

from linkguard_lab.lab import Lab
from linkguardd.shm.layout import Event, NicEntry
from linkguardd.shm.reader import ShmReader, ShmUnavailable
from linkguardd.states import NicState

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "plugin"
# The console script next to the interpreter running pytest: the entry point a package install
# gives operators, not a re-implementation of main().
LINKGUARDD = Path(sys.executable).parent / "linkguardd"
START_TIMEOUT_S = 20.0  # import + first netlink dump take ~0.6 s here; generous for loaded CI
STOP_TIMEOUT_S = 10.0
POLL_S = 0.01

TomlValue = str | int | float | bool | Sequence[str] | Mapping[str, str]


def c_tool(name: str) -> Path:
    """plugin/build/<name>, built with the plugin's Makefile if it is missing (`make test`
    builds everything first; this covers running one test file by hand)."""
    path = PLUGIN_DIR / "build" / name
    if not path.exists():
        subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), f"build/{name}"], check=True,
                       capture_output=True, timeout=300)
    return path


def toml_text(values: Mapping[str, TomlValue]) -> str:
    """A TOML document for the flat settings the tests use (scalars, string lists, one level
    of string tables); tables come last, as TOML requires."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # a JSON string is a valid TOML basic string
        return "[" + ", ".join(value(x) for x in v) + "]"

    scalars = [f"{k} = {value(v)}" for k, v in values.items() if not isinstance(v, Mapping)]
    tables = [f"\n[{k}]\n" + "\n".join(f"{json.dumps(kk)} = {value(vv)}"  # "*" needs quotes
                                        for kk, vv in v.items())
              for k, v in values.items() if isinstance(v, Mapping)]
    return "\n".join(scalars) + "\n" + "".join(tables) + "\n"


_LOGFMT = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_logfmt(line: str) -> dict[str, str]:
    """key=value pairs of one logfmt line; quoted values are JSON strings (linkguardd.logs)."""
    return {k: json.loads(v) if v.startswith('"') else v for k, v in _LOGFMT.findall(line)}


def wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `pred` until it returns something truthy (returned); AssertionError on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


@dataclass
class Daemon:
    """One linkguardd in one lab host."""

    lab: Lab
    host: str
    workdir: Path
    args: list[str]
    shm_path: Path
    config_path: Path
    grpc_socket: Path
    grpc_ro_socket: Path
    state_dir: Path
    verdict_socket: Path
    socket_dir: Path  # the temporary directory that holds the sockets (removed at teardown)
    proc: subprocess.Popen[bytes] | None = None
    _reader: ShmReader | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "daemon not started"
        return self.proc.pid

    @property
    def stdout_path(self) -> Path:
        return self.workdir / "stdout.log"

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "stderr.log"

    # --- lifecycle ------------------------------------------------------------------------
    def write_config(self, values: Mapping[str, TomlValue]) -> None:
        """Replace the config file (atomically: a SIGHUP racing the write reads old or new)."""
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(toml_text(values))
        tmp.replace(self.config_path)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> Daemon:
        # Output goes to files, not pipes: nothing has to drain them while the test runs, and
        # they survive for the failure message.
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            # lab.popen: runs under `ip netns exec`, which execs, so this PID is the daemon's;
            # lab.down() also kills it if everything else failed.
            self.proc = self.lab.popen(self.host, self.args, stdout=out, stderr=err,
                                       stdin=subprocess.DEVNULL, env=_clean_env())
        wait_for(self._ready, timeout_s, f"linkguardd in host {self.host} to publish "
                 f"{self.shm_path}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"linkguardd in host {self.host} exited with "
                                 f"{self.proc.returncode} during start:\n{self.stderr()}")
        if not self.shm_path.exists() or not self._logged_started():
            return False  # every socket is served before "started" is logged, after the file
        try:
            with ShmReader(self.shm_path) as r:
                if not r.alive() or r.header().daemon_pid != self.pid:
                    return False  # a file left by someone else, or not yet heartbeating
                _, nics = r.snapshot()
        except ShmUnavailable:
            return False  # mid-rename or a half-made file: try again
        return bool(nics) and all(n.state != NicState.UNKNOWN for n in nics)

    def _logged_started(self) -> bool:
        """The daemon's own word that every configured surface (the API sockets, read-only
        and admin) is served: it logs "started" only after the last one is bound."""
        return any(row.get("msg") == "started" for row in self.log_rows())

    def hup(self) -> None:
        os.kill(self.pid, signal.SIGHUP)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM by PID; asserts a clean exit (status 0, shm file and API socket removed)."""
        assert self.proc is not None, "daemon not started"
        self.close_reader()
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"linkguardd in host {self.host} ignored SIGTERM for "
                                 f"{timeout_s:g} s:\n{self.stderr()}") from None
        assert rc == 0, f"linkguardd in host {self.host} exited with {rc}:\n{self.stderr()}"
        assert not self.shm_path.exists(), f"{self.shm_path} left behind after SIGTERM"
        for sock in (self.grpc_socket, self.grpc_ro_socket, self.verdict_socket):
            assert not sock.exists(), f"{sock} left behind after SIGTERM"
        return rc

    def crash(self) -> None:
        """SIGKILL by PID, as the OOM killer or a failed liveness probe ends a container: the
        shm file and the socket stay behind, for the next start() to replace."""
        assert self.proc is not None and self.proc.poll() is None, "daemon not running"
        self.close_reader()
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        """Teardown: whatever state the daemon is in, end it (by PID) and remove its files."""
        self.close_reader()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(FileNotFoundError):
            self.shm_path.unlink()
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    # --- output ---------------------------------------------------------------------------
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def log_rows(self) -> list[dict[str, str]]:
        """Every logfmt line logged so far, parsed, oldest first."""
        return [parse_logfmt(line) for line in self.stderr().splitlines()]

    def transitions(self, nic: str | None = None) -> list[dict[str, str]]:
        """The structured transition lines logged so far (msg=transition), oldest first."""
        return [r for r in self.log_rows()
                if r.get("msg") == "transition" and nic in (None, r.get("nic"))]

    # --- the Python reader ----------------------------------------------------------------
    def reader(self) -> ShmReader:
        """A read-only mapping of the daemon's file, kept open (SIGHUP does not replace it)."""
        if self._reader is None:
            self._reader = ShmReader(self.shm_path)
        return self._reader

    def close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def nics(self) -> dict[str, NicEntry]:
        return {n.name: n for n in self.reader().snapshot()[1]}

    def nic(self, name: str) -> NicEntry:
        nics = self.nics()
        assert name in nics, f"{name} not in {self.shm_path}: {sorted(nics)}"
        return nics[name]

    def events(self, since: int = 0) -> list[Event]:
        """Every event in the ring after seq `since` (asserts none were lost)."""
        events, _, lapped = self.reader().events_since(since)
        assert not lapped, f"event ring of {self.shm_path} lapped"
        return events

    def ring_head(self) -> int:
        return self.reader().ring_head()

    def wait_state(self, name: str, state: NicState, timeout_s: float = 5.0) -> NicEntry:
        """Poll the table (Python reader) until `name` is in `state`."""
        def check() -> NicEntry | None:
            entry = self.nics().get(name)
            return entry if entry is not None and entry.state == state else None

        return wait_for(check, timeout_s, f"{self.host}/{name} {state.name} "
                        f"(now {self._state_text(name)})")

    def _state_text(self, name: str) -> str:
        entry = self.nics().get(name)
        return "absent" if entry is None else NicState(entry.state).name

    # --- the C reader (plugin/build/lg_shm_dump) -----------------------------------------
    def c_dump(self, events_since: int | None = None) -> dict[str, Any]:
        """`lg_shm_dump --json`: header, table (and events after `events_since`) as C sees them."""
        argv = [str(c_tool("lg_shm_dump")), "--path", str(self.shm_path), "--json"]
        if events_since is not None:
            argv += ["--events-since", str(events_since)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, f"lg_shm_dump: exit {proc.returncode}: {proc.stderr}"
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def c_nics(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.c_dump()["nics"]}

    def c_wait_state(self, name: str, state: NicState, timeout_s: float = 5.0) -> dict[str, Any]:
        """`lg_shm_dump --wait-state NAME STATE`: the plugin's own polling reader waits; returns
        its JSON line (with the entry's reason and epoch) and asserts it saw the state."""
        argv = [str(c_tool("lg_shm_dump")), "--path", str(self.shm_path), "--wait-state", name,
                state.name, "--timeout-ms", str(int(timeout_s * 1000))]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30,
                              check=False)
        lines = proc.stdout.strip().splitlines()
        assert lines, f"lg_shm_dump --wait-state: exit {proc.returncode}, no output: {proc.stderr}"
        result: dict[str, Any] = json.loads(lines[-1])
        assert proc.returncode == 0 and result.get("seen"), (
            f"C reader: {self.host}/{name} not {state.name} within {timeout_s:g} s: {result}")
        return result


def _clean_env() -> dict[str, str]:
    """Our environment without LINKGUARD*: a developer's LINKGUARDD_HOLD_DOWN_MS or
    LINKGUARD_SHM must not change what the daemon under test does."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LINKGUARD")}


class Daemons:
    """Starts daemons in lab hosts; the fixture stops what is left at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[Daemon] = []

    def start(self, lab: Lab, host: str, *args: str,
              config: Mapping[str, TomlValue] | None = None,
              timeout_s: float = START_TIMEOUT_S, run_dir: bool = False,
              wrapper: Sequence[str] = ()) -> Daemon:
        """linkguardd in `host` with `args` (e.g. --interfaces rail0,rail1 --hold-down-ms 500).

        Always given --config (an empty file without `config`), so /etc/linkguard/linkguard.toml
        on the test machine never leaks in. Flags override the file: settings a test changes
        through SIGHUP must be in `config`, not in `args`. With `run_dir`, the shm file and the
        sockets are laid out in a fresh 0755 directory as the Kubernetes ConfigMap lays them out
        in /run (linkguard/: linkguard.shm, linkguard-ro.sock, linkguard-verdict.sock;
        linkguard-admin/: linkguard.sock). `wrapper` runs the daemon
        under a command (e.g. setpriv).
        """
        workdir = self.tmp_path / f"linkguardd-{lab.prefix}-{host}"
        workdir.mkdir(parents=True, exist_ok=False)
        # Not under tmp_path: a unix socket path is limited to 107 bytes (sun_path), and the
        # API puts its private socket one directory deeper.
        socket_dir = Path(tempfile.mkdtemp(prefix="lgd-", dir="/tmp"))
        if run_dir:
            socket_dir.chmod(0o755)
            laid = {name: socket_dir / rel for name, rel in run_paths().items()}
            for path in laid.values():
                path.parent.mkdir(mode=0o755, exist_ok=True)
            shm_path, grpc_socket = laid["shm_path"], laid["grpc_socket"]
            grpc_ro_socket, verdict_socket = laid["grpc_ro_socket"], laid["plugin_verdict_socket"]
        else:
            shm_path = Path("/dev/shm") / f"{lab.prefix}-{host}"
            # the admin socket in a directory of its own, as the daemon asks
            grpc_socket = socket_dir / "admin" / "api.sock"
            grpc_ro_socket = socket_dir / "api-ro.sock"
            verdict_socket = socket_dir / "verdict.sock"
        # The prefix is unique to this lab, so a file there is a leftover of a killed run of
        # this very lab: stale, and ours to remove.
        with contextlib.suppress(FileNotFoundError):
            shm_path.unlink()
        config_path = workdir / "linkguard.toml"
        state_dir = workdir / "state"
        argv = [*wrapper, str(LINKGUARDD), "--config", str(config_path), "--shm-path",
                str(shm_path), "--grpc-socket", str(grpc_socket), "--grpc-ro-socket",
                str(grpc_ro_socket), "--state-dir", str(state_dir), "--metrics-address", "",
                "--plugin-verdict-socket", str(verdict_socket), *args]
        daemon = Daemon(lab, host, workdir, argv, shm_path, config_path, grpc_socket,
                        grpc_ro_socket, state_dir, verdict_socket, socket_dir)
        daemon.write_config(config or {})
        self.started.append(daemon)
        return daemon.start(timeout_s)

    def stop_all(self) -> None:
        """Stop every daemon still running, asserting each exits cleanly."""
        for daemon in self.started:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.stop()

    def cleanup(self) -> None:
        errors = []
        for daemon in reversed(self.started):
            try:
                daemon.kill()
            except Exception as exc:  # noqa: BLE001 - clean the others up, then report
                errors.append(f"{daemon.host}: {exc!r}")
        if errors:
            raise RuntimeError("linkguardd teardown: " + "; ".join(errors))


@pytest.fixture
def daemons(lab_factory: Callable[..., Lab], tmp_path: Path) -> Iterator[Daemons]:
    """Depends on lab_factory so that it is torn down first: daemons stop while their
    namespaces still exist."""
    runner = Daemons(tmp_path)
    try:
        yield runner
    finally:
        runner.cleanup()
