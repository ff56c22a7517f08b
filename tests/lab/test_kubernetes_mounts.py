"""What a Kubernetes training pod sees of linkguardd, with a real daemon in the lab.

The DaemonSet keeps the shm file and the API socket in the host directory /run/linkguard, which
pods mount read-only as a directory (fleet/kubernetes). A pod here is what the container runtime
makes of that: a process in its own mount namespace (unshare -m) where a tmpfs hides the host's
/run and the daemon's directory is bind-mounted read-only at /run/linkguard; commands run in it
through nsenter, as `kubectl exec` does. The contract: when the daemon restarts (it replaces the
file and the socket with new inodes), a pod that mounted the directory reads the new instance,
through the plugin's C reader (lg_shm_dump) and the CLI; a pod that mounted the single files
keeps the old, dead inodes. Pods are ended by PID; their mounts go with their namespace.
"""
from __future__ import annotations

import grp
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_fixture import LINKGUARDD, Daemon, Daemons, c_tool, wait_for
from k8s_manifests import added_capabilities, probe_argv, run_paths
from ops_helpers import flood, open_files

from linkguard_cli.render import STALE_HEARTBEAT_S
from linkguard_lab.lab import Lab
from linkguardd.api.server import MAX_CONNECTIONS_PER_SOCKET
from linkguardd.shm import ShmReader

pytestmark = pytest.mark.lab

POD_RUN = Path("/run/linkguard")  # where the manifests mount the host directory in a pod
FILES = ("linkguard.shm", "linkguard-ro.sock")
FAST = ("--interfaces", "rail0,rail1", "--hold-down-ms", "500")
WAIT_S = 20.0
CLI = LINKGUARDD.parent / "linkguard-cli"
SATURATE = MAX_CONNECTIONS_PER_SOCKET + 64  # connections: more than the daemon serves
# capability(7) numbers, for /proc/<pid>/status CapEff
CAP_BITS = {"CHOWN": 0, "NET_ADMIN": 12}


class Pod:
    """A long-lived mount namespace that sees `host_dir` at /run/linkguard, read-only: the
    directory itself (hostPath type Directory), or each file of it (type File / Socket)."""

    def __init__(self, host_dir: Path, single_files: bool) -> None:
        binds = ([f'touch /run/linkguard/{f} && mount --bind -o ro "$1/{f}" /run/linkguard/{f}'
                  for f in FILES] if single_files
                 else ['mount --bind -o ro "$1" /run/linkguard'])
        script = " && ".join(["mount -t tmpfs -o mode=0755 pod-run /run", "mkdir /run/linkguard",
                              *binds, "exec sleep 300"])  # bounded even if teardown never came
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "pod",
             str(host_dir)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait_ready(self) -> Pod:
        wait_for(self._ready, WAIT_S, "the pod's mounts")
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"pod set-up failed: {self.proc.stderr.read()}")  # type: ignore
        # sh execs sleep only once every mount succeeded
        return Path(f"/proc/{self.proc.pid}/comm").read_text().strip() == "sleep"

    def argv(self, *argv: str | Path) -> list[str]:
        return ["nsenter", f"--target={self.proc.pid}", "--mount", "--", *map(str, argv)]

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=60,
                              check=False)

    def shm(self) -> dict:
        """lg_shm_dump --json on the pod's /run/linkguard/linkguard.shm (heartbeat unchecked)."""
        out = self.run(c_tool("lg_shm_dump"), "--path", POD_RUN / FILES[0], "--json",
                       "--heartbeat-timeout-ms", "0")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stderr.close()  # type: ignore[union-attr]


@pytest.fixture
def pods() -> Iterator[Callable[[Path, bool], Pod]]:
    """pods(host_dir, single_files): a ready Pod, stopped at teardown whatever happened."""
    made: list[Pod] = []

    def make(host_dir: Path, single_files: bool) -> Pod:
        made.append(Pod(host_dir, single_files))
        return made[-1].wait_ready()

    yield make
    for pod in made:
        pod.stop()
    host_mounts = Path("/proc/self/mountinfo").read_text()
    assert " /run/linkguard " not in host_mounts, "a pod's mount leaked into the host"


def probe(pod: Pod, name: str) -> subprocess.CompletedProcess[str]:
    """The DaemonSet's exec probe, as the manifest spells it, run in the pod's view."""
    argv = probe_argv(name)
    assert argv[0] == "linkguard-cli"
    return pod.run(CLI, *argv[1:])


def test_a_directory_mount_follows_a_daemon_restart_and_file_mounts_pin_the_old_one(
        lab: Lab, daemons: Daemons, pods: Callable[[Path, bool], Pod]) -> None:
    d = daemons.start(lab, "a", *FAST, run_dir=True)
    by_dir, by_file = pods(d.shm_path.parent, False), pods(d.shm_path.parent, True)
    for pod in (by_dir, by_file):
        seen = pod.shm()
        assert seen["daemon_pid"] == d.pid
        assert {n["name"]: n["state"] for n in seen["nics"]} == {"rail0": "UP", "rail1": "UP"}
    write = by_dir.run("sh", "-c", f"echo x > {POD_RUN / FILES[0]}")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    # The probe reads the control file through the pod's read-only view of the directory.
    alive = probe(by_dir, "livenessProbe")
    assert alive.returncode == 0 and f"pid {d.pid}: alive" in alive.stdout, alive.stderr

    # A long-running reader in the pod, as an NCCL process holds the file: it waits for rail0
    # DOWN, which only the next daemon instance will publish.
    waiter = subprocess.Popen(by_dir.argv(c_tool("lg_shm_dump"), "--path", POD_RUN / FILES[0],
                                          "--wait-state", "rail0", "DOWN", "--timeout-ms",
                                          str(int(WAIT_S * 1000))),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        old_pid, old_inode = d.pid, d.shm_path.stat().st_ino
        d.crash()  # SIGKILL, like an OOM kill: the old file stays until the next start
        lab.cut("a", 0)
        d.start()
        assert d.pid != old_pid and d.shm_path.stat().st_ino != old_inode
        out, err = waiter.communicate(timeout=WAIT_S + 30)
    finally:
        if waiter.poll() is None:
            os.kill(waiter.pid, signal.SIGKILL)
            waiter.wait(timeout=10)
    assert waiter.returncode == 0 and json.loads(out.splitlines()[-1])["seen"], (out, err)

    # Directory mount: a fresh look sees the new instance, its file and its socket.
    seen = by_dir.shm()
    assert seen["daemon_pid"] == d.pid
    assert {n["name"]: n["state"] for n in seen["nics"]}["rail0"] == "DOWN"
    assert by_dir.run("stat", "-c", "%i", POD_RUN / FILES[0]).stdout.strip() == str(
        d.shm_path.stat().st_ino)
    alive = probe(by_dir, "livenessProbe")
    assert alive.returncode == 0 and f"pid {d.pid}: alive" in alive.stdout, alive.stderr

    # Single-file mounts: still the killed daemon's inode, pid and table, its heartbeat stopped.
    assert by_file.run("stat", "-c", "%i", POD_RUN / FILES[0]).stdout.strip() == str(old_inode)
    pinned = by_file.shm()
    assert pinned["daemon_pid"] == old_pid
    assert {n["name"]: n["state"] for n in pinned["nics"]}["rail0"] == "UP"
    stale = by_file.run(c_tool("lg_shm_dump"), "--path", POD_RUN / FILES[0])
    assert stale.returncode != 0, "a pinned file whose writer died must read as no daemon"
    dead = probe(by_file, "livenessProbe")
    assert dead.returncode == 5 and f"pid {old_pid}: heartbeat" in dead.stderr, dead

    d.stop()  # SIGTERM: the directory pod sees the file go, as a plugin would
    assert by_dir.run("test", "-e", POD_RUN / FILES[0]).returncode != 0
    gone = probe(by_dir, "livenessProbe")
    assert gone.returncode == 3 and "No such file" in gone.stderr, gone


def heartbeat_age_s(d: Daemon) -> float:
    """The age of the heartbeat in the daemon's file now, read as the probe reads it."""
    with ShmReader(d.shm_path) as reader:
        beat = reader.heartbeat_ns()
    return (time.monotonic_ns() - beat) / 1e9


def test_the_liveness_probe_ignores_a_saturated_socket_and_catches_a_stopped_daemon(
        lab: Lab, daemons: Daemons, pods: Callable[[Path, bool], Pod]) -> None:
    """Issue 30: any pod that mounts /run/linkguard can hold every connection the daemon
    serves on the read-only socket. A probe that asked it would then fail, and kubelet would
    restart a healthy daemon on a job's word; the probe reads the control file instead, so the
    flood changes nothing, while a daemon whose loop stopped (SIGSTOP) still fails it."""
    d = daemons.start(lab, "a", *FAST, run_dir=True)
    pod = pods(d.shm_path.parent, False)
    ro_in_pod = POD_RUN / d.grpc_ro_socket.name
    with open_files(SATURATE + 256):
        held = flood(str(d.grpc_ro_socket), SATURATE)
        try:
            # The attack works: the health RPC on the read-only socket no longer gets through.
            rpc = pod.run(CLI, "--ro-socket", ro_in_pod, "--timeout", "5", "health")
            assert rpc.returncode == 3 and "cannot reach linkguardd" in rpc.stderr, rpc
            alive = probe(pod, "livenessProbe")
            assert alive.returncode == 0 and f"pid {d.pid}: alive" in alive.stdout, alive
            assert probe(pod, "startupProbe").returncode == 0
        finally:
            for sock in held:
                sock.close()

    os.kill(d.pid, signal.SIGSTOP)  # the loop stops; the process, its file and sockets stay
    try:
        wait_for(lambda: heartbeat_age_s(d) > STALE_HEARTBEAT_S, WAIT_S,
                 "the stopped daemon's heartbeat to pass the probe's limit")
        stalled = probe(pod, "livenessProbe")
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert stalled.returncode == 5, stalled
    assert f"linkguardd pid {d.pid}: heartbeat" in stalled.stderr, stalled
    assert "its loop is stalled" in stalled.stderr and not stalled.stdout, stalled
    # Resumed, it is alive again without a restart.
    wait_for(lambda: probe(pod, "livenessProbe").returncode == 0, WAIT_S,
             "the resumed daemon's probe")
    d.stop()


def test_a_pods_plugin_reports_through_the_read_only_mount_as_any_user(
        lab: Lab, daemons: Daemons, pods: Callable[[Path, bool], Pod]) -> None:
    """sendto() on a socket needs write permission on the socket file, not a writable mount:
    a job's verdict reaches the daemon through the pod's read-only view, from a user that is
    neither root nor in any linkguard group, and the kernel names that user."""
    d = daemons.start(lab, "a", *FAST, run_dir=True)
    pod = pods(d.shm_path.parent, False)
    write = pod.run("sh", "-c", f"echo x > {POD_RUN / 'x'}")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    # A copy that user 65534 can run wherever the checkout lives (a home directory is 0700).
    tools = Path(tempfile.mkdtemp(prefix="lgv-", dir="/tmp"))
    try:
        tools.chmod(0o755)
        send = shutil.copy(c_tool("lg_verdict_send"), tools)
        sent = pod.run("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
                       send, "--socket", POD_RUN / d.verdict_socket.name, "--for-ms", "700",
                       "rail1", "stalled")
    finally:
        shutil.rmtree(tools)
    assert sent.returncode == 0, sent.stderr
    out = subprocess.run([str(CLI), "--socket", str(d.grpc_ro_socket), "status", "--json"],
                         capture_output=True, text=True, timeout=60, check=False)
    nics = {n["name"]: n for n in json.loads(out.stdout)["nics"]}
    (verdict,) = nics["rail1"]["plugin_verdicts"]
    assert (verdict["verdict"], verdict["uid"], verdict["for_ms"]) == ("stalled", 65534, 700)
    assert verdict["pid"] > 0 and nics["rail1"]["state"] == "UP" and not nics["rail0"][
        "plugin_verdicts"]
    d.stop()


def cap_mask(names: set[str]) -> int:
    return sum(1 << CAP_BITS[n] for n in names)


def only(caps: set[str]) -> list[str]:
    """setpriv as the container runtime sets up the DaemonSet's container: root, bounding set
    (hence permitted and effective) reduced to `caps`, no inheritable caps, no_new_privs."""
    keep = ",".join(f"+{c.lower()}" for c in sorted(caps))
    return ["setpriv", f"--bounding-set=-all{',' + keep if keep else ''}", "--inh-caps=-all",
            "--no-new-privs", "--"]


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{name} not in /proc/{pid}/status")


def dom_monitor(d: Daemon) -> dict:
    """The DOM monitor's own health from `linkguard-cli dump`."""
    out = subprocess.run([str(CLI), "--socket", str(d.grpc_socket), "dump"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    health: dict = json.loads(out.stdout)["monitors"]["dom"]
    return health


def test_the_daemon_works_with_only_the_daemonsets_capabilities(lab: Lab,
                                                                daemons: Daemons) -> None:
    caps = added_capabilities()
    group = grp.getgrnam("nogroup")  # root is not a member: chown to it needs CAP_CHOWN
    d = daemons.start(lab, "a", *FAST, "--admin-group", group.gr_name, "--reader-group",
                      group.gr_name, run_dir=True, wrapper=only(caps))
    assert int(status_field(d.pid, "CapEff"), 16) == cap_mask(caps)
    assert status_field(d.pid, "NoNewPrivs") == "1"
    for sock in (d.grpc_socket, d.grpc_ro_socket):  # CAP_CHOWN
        assert sock.stat().st_gid == group.gr_gid, sock
    assert d.c_nics()["rail0"]["state"] == "UP"
    # CAP_NET_ADMIN: the kernel let the module reads through (a veth answers "no module")
    health = wait_for(lambda: (h := dom_monitor(d))["last_duration_s"] > 0 and h, WAIT_S,
                      "the first module read")
    assert health["success"] and not health["last_error"], health
    d.stop()

    # The contrast: without it, every module read is refused.
    lacking = daemons.start(lab, "b", *FAST, run_dir=True, wrapper=only(caps - {"NET_ADMIN"}))
    assert int(status_field(lacking.pid, "CapEff"), 16) == cap_mask(caps - {"NET_ADMIN"})
    health = wait_for(lambda: (h := dom_monitor(lacking))["last_error"] and h, WAIT_S,
                      "the first module read")
    assert not health["success"] and "Operation not permitted" in health["last_error"], health
    lacking.stop()


def test_a_root_pod_without_capabilities_cannot_drain(lab: Lab, daemons: Daemons,
                                                      pods: Callable[[Path, bool], Pod]) -> None:
    """Issue 30, finding 1: a training pod runs as uid 0 by default, and uid 0 passes a
    root-owned socket's mode check without any capability. Laid out as the ConfigMap lays the
    host's /run, the pod's mount holds no socket that drains: the admin one is not there
    (ENOENT, exit 3) and the read-only one refuses (PERMISSION_DENIED, exit 4)."""
    d = daemons.start(lab, "a", *FAST, run_dir=True)
    pod = pods(d.shm_path.parent, False)
    admin_in_pod = Path("/run") / run_paths()["grpc_socket"]
    sockets = pod.run("find", POD_RUN, "-type", "s").stdout.split()
    assert str(POD_RUN / d.grpc_ro_socket.name) in sockets, sockets
    refused = {}
    for sock in sorted({*sockets, str(admin_in_pod)}):
        out = pod.run(*only(set()), CLI, "--socket", sock, "--timeout", "10", "drain", "rail0",
                      "--reason", "pod", "--force")
        refused[sock] = out.returncode
        assert out.returncode in (3, 4), (sock, out.stdout, out.stderr)
    assert refused[str(admin_in_pod)] == 3  # no such file in the pod
    assert refused[str(POD_RUN / d.grpc_ro_socket.name)] == 4  # PERMISSION_DENIED
    # In the pod the process really is uid 0 with no capability at all.
    caps = pod.run(*only(set()), "sh", "-c", "id -u; grep CapEff /proc/self/status")
    assert caps.stdout.split() == ["0", "CapEff:", "0000000000000000"], caps
    assert d.c_nics()["rail0"]["state"] == "UP"
    # The contrast: root on the host (the DaemonSet's view) drains through the admin socket.
    host = subprocess.run([str(CLI), "--socket", str(d.grpc_socket), "drain", "rail0",
                           "--reason", "host", "--force"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert host.returncode == 0, host.stderr
    d.stop()
