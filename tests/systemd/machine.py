"""A Debian system booted with systemd as PID 1 in systemd-nspawn, driven through nsenter.

The host's PID 1 is not systemd, so machinectl and `systemctl -M` cannot reach the container:
commands enter its namespaces (`nsenter -t <its PID 1> -a`). nspawn runs in cgroups of its own
(one per mounted named/unified hierarchy), so tear-down can remove everything it created. The
system is stopped in order (poweroff inside, then the nspawn process is waited for by PID); the
container manager is never SIGKILLed: if poweroff does not end it, SIGTERM asks nspawn to power
the container off itself.
"""
from __future__ import annotations

import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Self

CGROUP_HIERARCHIES = ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")
BOOT_TIMEOUT_S = 60
POWEROFF_TIMEOUT_S = 60
COMMAND_TIMEOUT_S = 120
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class MachineError(RuntimeError):
    pass


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == path for line in f)


def _remove_tree(cgroup: Path) -> None:
    """rmdir a cgroup and the ones nspawn made below it (payload/, supervisor/), deepest first."""
    if not cgroup.is_dir():
        return
    for child in [p for p in cgroup.iterdir() if p.is_dir()]:
        _remove_tree(child)
    cgroup.rmdir()


class Machine:
    def __init__(self, rootfs: Path, binds: dict[str, str], log_path: Path) -> None:
        self.rootfs = rootfs
        self.binds = binds  # host path -> container path, read-only
        self.log_path = log_path
        self.name = f"lgsd-{uuid.uuid4().hex[:8]}"
        self.cgroups = [Path(h) / self.name for h in CGROUP_HIERARCHIES if _mounted(h)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0

    # --- life cycle ------------------------------------------------------------------------------
    def boot(self) -> Self:
        for cgroup in self.cgroups:
            cgroup.mkdir()
        argv = ["systemd-nspawn", "--quiet", f"--directory={self.rootfs}", "--volatile=overlay",
                "--boot", "--private-network", "--keep-unit", "--register=no",
                f"--machine={self.name}", "--console=passive"]
        argv += [f"--bind-ro={src}:{dst}" for src, dst in self.binds.items()]
        # nspawn's own cgroups: the shell moves itself there, then becomes nspawn (same PID)
        enter = f'for cg in "$@"; do [ "$cg" = -- ] && break; echo $$ > "$cg/cgroup.procs"; done;' \
                f' shift {len(self.cgroups) + 1}; exec "$@"'
        argv = ["sh", "-c", enter, "sh", *map(str, self.cgroups), "--", *argv]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while not self.leader:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise MachineError(f"nspawn did not start a PID 1 (see {self.log_path})")
            self.leader = self._child_pid()
            time.sleep(0.1)
        # systemctl needs PID 1's private socket, which it creates a moment after exec
        while self.run("test", "-S", "/run/systemd/private", check=False).returncode:
            if time.monotonic() > deadline:
                raise MachineError(f"systemd in the container never listened (see {self.log_path})")
            time.sleep(0.1)
        state = self.run("systemctl", "is-system-running", "--wait", check=False,
                         timeout=BOOT_TIMEOUT_S)
        if state.stdout.strip() != "running":
            failed = self.run("systemctl", "--failed", "--no-pager", check=False).stdout
            raise MachineError(f"booted system is {state.stdout.strip()!r} ({state.stderr.strip()}),"
                               f" not 'running':\n{failed}")
        return self

    def _child_pid(self) -> int:
        """nspawn's child once it has exec'd systemd (before that it is nspawn's own helper)."""
        assert self.proc is not None
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return int(child)
                except FileNotFoundError:
                    pass
        return 0

    def poweroff(self) -> list[str]:
        """Stops the system in order and removes what nspawn left; returns what could not be."""
        problems: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            if self.leader:
                self.run("systemctl", "poweroff", "--no-block", check=False)
            if not self._wait_exit():
                problems.append("poweroff did not end the container: sent nspawn SIGTERM")
                self.proc.send_signal(signal.SIGTERM)
                if not self._wait_exit():
                    problems.append(f"nspawn pid {self.proc.pid} still running")
        for cgroup in self.cgroups:
            try:
                _remove_tree(cgroup)
            except OSError as exc:
                problems.append(f"cgroup {cgroup}: {exc}")
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            problems += [f"mount left: {line.split()[4]}" for line in f
                         if str(self.rootfs) in line.split()[4]]
        return problems

    def _wait_exit(self) -> bool:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=POWEROFF_TIMEOUT_S)
            return True
        except subprocess.TimeoutExpired:
            return False

    def __enter__(self) -> Self:
        try:
            return self.boot()
        except BaseException:
            self.poweroff()  # a boot that failed halfway leaves nothing either
            raise

    def __exit__(self, *exc_info: object) -> None:
        """Always powers off; a tear-down that left something fails (after any test error)."""
        problems = self.poweroff()
        if problems:
            raise MachineError(f"tear-down of {self.name} left: {problems}")

    # --- commands inside -------------------------------------------------------------------------
    def run(self, *argv: str, user: str | None = None, check: bool = True,
            timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
        """argv inside the system (as root, or as `user` with its groups), clean environment."""
        cmd = ["nsenter", "-t", str(self.leader), "-a",
               "env", "-i", f"PATH={CONTAINER_PATH}", "LANG=C.UTF-8"]
        if user:
            cmd += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        result = subprocess.run(cmd + list(argv), check=False, capture_output=True, text=True,
                                timeout=timeout, input=stdin)
        if check and result.returncode != 0:
            raise MachineError(f"`{shlex.join(argv)}` exited {result.returncode}:\n"
                               f"{result.stdout}{result.stderr}")
        return result

    def sh(self, script: str, **kwargs) -> subprocess.CompletedProcess[str]:
        return self.run("sh", "-ec", script, **kwargs)
