"""Thin wrappers around `ip`, `sysctl` and `nft` run inside named network namespaces.

Set-up and teardown go through the iproute2 tools (simple and robust); only the timed faults
use netlink directly (see faults.py). Nothing here ever touches the root namespace's links,
routes or rulesets: every call carries `-n NS` or runs under `ip netns exec NS`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

from linkguard_lab.errors import LabError


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("must run as root (network namespaces need CAP_SYS_ADMIN)")


def run(argv: list[str], *, stdin: str | None = None, timeout: float = 30.0,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]} not found (install iproute2/nftables)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{' '.join(argv)}: timed out after {timeout:g} s") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().replace("\n", "; ")
        raise LabError(f"{' '.join(argv)}: {detail or f'exit status {proc.returncode}'}")
    return proc


def exec_argv(ns: str, argv: list[str]) -> list[str]:
    """argv that runs a command inside `ns` (ip netns exec also gives it that ns's /sys)."""
    return ["ip", "netns", "exec", ns, *argv]


def ip_batch(ns: str, lines: list[str]) -> None:
    """Run many `ip` commands in one process inside `ns`; stops at the first failure."""
    run(["ip", "-n", ns, "-batch", "-"], stdin="\n".join(lines) + "\n")


def list_netns() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    # Lines look like "lg-a (id: 3)" or just "lg-a".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_netns(name: str) -> None:
    run(["ip", "netns", "add", name])


def link_names(ns: str) -> list[str]:
    out = run(["ip", "-n", ns, "-o", "link", "show"]).stdout
    # "3: rail0@if4: <...>" -> "rail0"
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.count(":") >= 2]


def ipv4_addresses(ns: str, ifname: str) -> list[str]:
    out = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", ifname], check=False).stdout
    # "7: br-rail0    inet 198.18.0.254/24 scope global br-rail0 ..." -> "198.18.0.254/24"
    return [line.split()[3] for line in out.splitlines() if len(line.split()) > 3]


def sysctl(ns: str, settings: dict[str, str]) -> None:
    # -e: a kernel without IPv6 has no such keys; that is fine for the lab.
    if shutil.which("sysctl"):
        args = [f"{key}={value}" for key, value in settings.items()]
        run(exec_argv(ns, ["sysctl", "-q", "-e", "-w", *args]))
        return
    # No procps (a bare container image): write /proc/sys from a shell inside the namespace,
    # skipping missing keys like -e.
    for key, value in settings.items():
        path = "/proc/sys/" + key.replace(".", "/")
        run(exec_argv(ns, ["sh", "-c", '[ ! -e "$1" ] || echo "$2" > "$1"', "sh", path, value]))


def nft(ns: str, ruleset: str) -> None:
    run(exec_argv(ns, ["nft", "-f", "-"]), stdin=ruleset)


def ns_pids(ns: str) -> list[int]:
    proc = run(["ip", "netns", "pids", ns], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def kill_ns_processes(ns: str, grace_s: float = 1.0) -> None:
    """Stop what still runs inside a lab namespace (servers started by `exec`), by PID."""
    pids = ns_pids(ns)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if pids:
                time.sleep(0.02)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our own child, so it does not linger as a zombie.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def del_netns(name: str) -> None:
    """Delete a namespace; its veths (and so their peers) go with it. Missing is fine."""
    kill_ns_processes(name)
    proc = run(["ip", "netns", "del", name], check=False)
    if proc.returncode != 0 and name in list_netns():
        raise LabError(f"ip netns del {name}: {proc.stderr.strip()}")
