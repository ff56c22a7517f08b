"""linkguardd.service under a booted systemd: readiness, users and directories, the sockets'
authorization, the watchdog, reload, stop, and a real cut seen by the daemon systemd started.

The tests run in file order on one booted system (conftest.py): each leaves the daemon in the
state the next one starts from (running, rail0 drained by root from test_root_drains on).
"""
from __future__ import annotations

import json
import time

import pytest
from conftest import ADMIN, NICS, READER, STRANGER
from machine import Machine

UNIT = "linkguardd"
RUN_DIR, STATE_DIR = "/run/linkguard", "/var/lib/linkguard"
ADMIN_DIR = "/run/linkguard-admin"  # the admin socket alone: jobs are given RUN_DIR only
ADMIN_SOCK, RO_SOCK, SHM = f"{ADMIN_DIR}/linkguard.sock", f"{RUN_DIR}/linkguard-ro.sock", \
    f"{RUN_DIR}/linkguard.shm"
VERDICT_SOCK = f"{RUN_DIR}/linkguard-verdict.sock"  # jobs' plugins report gray NICs here
VENV_PYTHON = "/usr/local/lib/linkguard/venv/bin/python"
LAB_TOOL = "/usr/local/lib/linkguard/venv/bin/linkguard-lab"  # in the wheel, not on PATH
# What the plugin sees: the C reader it shares with linkguardd's ShmReader.
PLUGIN_VIEW = """
from linkguardd.shm.reader import ShmReader, ShmUnavailable
try:
    with ShmReader() as r:
        print("daemon" if r.alive() else "no daemon: stale heartbeat")
except ShmUnavailable as e:
    print(f"no daemon: {e.status.name}")
"""
WAIT_S = 90  # bound of every poll (the watchdog: WatchdogSec=10s, then a restart)
LAB = "lgsd"
LAB_DROPIN = "/run/systemd/system/linkguardd.service.d/lab.conf"


def show(m: Machine, *props: str) -> dict[str, str]:
    out = m.run("systemctl", "show", UNIT, *(f"--property={p}" for p in props)).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def states(m: Machine) -> dict[str, dict]:
    # exit 1 while a NIC is not UP (drained), with the same JSON
    out = m.run("linkguard-cli", "status", "-o", "json", check=False).stdout
    return {n["name"]: n for n in json.loads(out)["nics"]}


def events(m: Machine, since: int = 0) -> list[dict]:
    out = m.run("linkguard-cli", "events", "--since", str(since), "-o", "json").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def plugin_view(m: Machine) -> str:
    return m.run(VENV_PYTHON, "-c", PLUGIN_VIEW).stdout.strip()


def wait_for(what: str, predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S} s: {what}")
        time.sleep(0.5)


def test_start_returns_once_ready_with_the_status_line(machine: Machine) -> None:
    machine.run("systemctl", "enable", "--now", UNIT)  # docs/operators.md, "Start"
    assert machine.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    # Type=notify: start returned, so READY=1 came, so the first scan is in shared memory
    assert plugin_view(machine) == "daemon"
    props = show(machine, "ActiveState", "SubState", "StatusText", "WatchdogUSec")
    assert props == {"ActiveState": "active", "SubState": "running",
                     "StatusText": f"watching {len(NICS)} NICs", "WatchdogUSec": "10s"}
    status = machine.run("systemctl", "status", UNIT, "--no-pager").stdout
    assert "Active: active (running)" in status
    assert f'Status: "watching {len(NICS)} NICs"' in status


def test_sysusers_groups_directories_sockets_and_control_file(machine: Machine) -> None:
    groups = machine.run("getent", "group", "linkguard", "linkguard-admin").stdout
    assert [g.split(":")[0] for g in groups.splitlines()] == ["linkguard", "linkguard-admin"]
    stat = {path: machine.run("stat", "-c", "%U %G %a %F", path).stdout.strip()
            for path in (RUN_DIR, ADMIN_DIR, STATE_DIR, ADMIN_SOCK, RO_SOCK, SHM, VERDICT_SOCK)}
    assert stat == {
        RUN_DIR: "root root 755 directory",
        ADMIN_DIR: "root root 755 directory",
        STATE_DIR: "root root 755 directory",
        ADMIN_SOCK: "root linkguard-admin 660 socket",
        RO_SOCK: "root linkguard 660 socket",
        SHM: "root root 644 regular file",
        VERDICT_SOCK: "root root 666 socket",
    }
    nccl = machine.run("cat", "/etc/nccl.conf").stdout
    assert "NCCL_NET_PLUGIN=linkguard" in nccl.splitlines()
    # NCCL_NET_PLUGIN=linkguard: NCCL dlopens "libnccl-net-linkguard.so" through ld.so
    assert "=> /usr/local/lib/libnccl-net-linkguard.so" in machine.run("ldconfig", "-p").stdout


def test_the_daemon_runs_with_two_capabilities_on_a_read_only_system(machine: Machine) -> None:
    pid = show(machine, "MainPID")["MainPID"]
    status = machine.run("cat", f"/proc/{pid}/status").stdout
    caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    chown_and_net_admin = f"{(1 << 0) | (1 << 12):016x}"  # CAP_CHOWN 0, CAP_NET_ADMIN 12
    assert (caps["CapBnd"], caps["CapEff"]) == (chown_and_net_admin, chown_and_net_admin)

    def writable(path: str) -> bool:  # as seen from the daemon's own mount namespace
        probe = f"{path}/.linkguard-probe"
        return machine.run("nsenter", "-t", pid, "-m", "sh", "-c",
                           f"touch {probe} && rm {probe}", check=False).returncode == 0

    assert {p: writable(p) for p in (RUN_DIR, ADMIN_DIR, STATE_DIR, "/etc/linkguard",
                                     "/usr/local", "/var")} \
        == {RUN_DIR: True, ADMIN_DIR: True, STATE_DIR: True, "/etc/linkguard": False,
            "/usr/local": False, "/var": False}


METRICS_GET = """
import urllib.request
body = urllib.request.urlopen("http://127.0.0.1:9846/metrics", timeout=10).read().decode()
print("linkguard_nic_state" in body)
"""


def test_the_hardening_is_in_effect_and_the_daemon_works_under_it(machine: Machine) -> None:
    """Issue 30: LimitNOFILE, ProtectProc=invisible, IP only on localhost; /metrics (on
    127.0.0.1) still answers, and the exposure `systemd-analyze security` gives is <= 3.1."""
    props = show(machine, "MainPID", "ProtectProc", "IPAddressDeny", "IPAddressAllow",
                 "LimitNOFILE")
    assert props["ProtectProc"] == "invisible" and props["LimitNOFILE"] == "4096", props
    assert props["IPAddressDeny"] and "127.0.0.0/8" in props["IPAddressAllow"], props
    # the heartbeat's priority: ahead of ordinary processes, not realtime (issue 30)
    sched = show(machine, "Nice", "CPUWeight")
    assert sched["Nice"] == "-10" and sched["CPUWeight"] == "1000", sched
    stat = machine.run("cat", f"/proc/{props['MainPID']}/stat").stdout
    assert stat.rsplit(")", 1)[1].split()[16] == "-10", stat  # field 19, nice (proc(5))
    limits = machine.run("cat", f"/proc/{props['MainPID']}/limits").stdout
    assert [ln.split()[3:5] for ln in limits.splitlines() if ln.startswith("Max open files")] \
        == [["4096", "4096"]]
    # the daemon's own /proc is mounted hidepid=invisible
    mounts = machine.run("nsenter", "-t", props["MainPID"], "-m", "cat", "/proc/self/mounts")
    assert any(" /proc proc " in ln and "hidepid=invisible" in ln
               for ln in mounts.stdout.splitlines()), mounts.stdout
    assert machine.run(VENV_PYTHON, "-c", METRICS_GET).stdout.strip() == "True"
    security = machine.run("systemd-analyze", "security", UNIT, check=False).stdout
    level = security.rsplit("Overall exposure level for linkguardd.service: ", 1)[-1].split()[0]
    assert float(level) <= 3.1, security


def test_the_reader_group_reads_and_may_not_drain(machine: Machine) -> None:
    status = machine.run("linkguard-cli", "status", user=READER, check=False)
    assert status.returncode == 0, status.stderr
    assert [line.split()[0] for line in status.stdout.splitlines()[2:]] == list(NICS)
    drain = machine.run("linkguard-cli", "drain", "rail0", "--reason", "x", user=READER,
                        check=False)
    assert drain.returncode == 3 and "permission denied" in drain.stderr  # the kernel's no
    via_ro = machine.run("linkguard-cli", "--socket", RO_SOCK, "drain", "rail0", "--reason", "x",
                         user=READER, check=False)
    assert via_ro.returncode == 4, via_ro.stderr  # the read-only socket refuses it
    stranger = machine.run("linkguard-cli", "status", user=STRANGER, check=False)
    assert stranger.returncode == 3 and "permission denied" in stranger.stderr
    assert states(machine)["rail0"]["state"] == "UP"


def test_the_admin_group_drains_and_undrains(machine: Machine) -> None:
    # not in the reader group: reads through the admin socket (docs/operators.md)
    assert machine.run("linkguard-cli", "status", user=ADMIN, check=False).returncode == 0
    machine.run("linkguard-cli", "drain", "rail0", "--reason", "test", user=ADMIN)
    assert states(machine)["rail0"]["state"] == "DRAINED"
    machine.run("linkguard-cli", "undrain", "rail0", user=ADMIN)
    assert states(machine)["rail0"]["state"] != "DRAINED"


def test_root_drains_and_the_drain_is_saved(machine: Machine) -> None:
    machine.run("linkguard-cli", "drain", "rail0", "--reason", "swap optic")
    assert "swap optic" in machine.run("cat", f"{STATE_DIR}/state.json").stdout


def test_a_stalled_daemon_is_killed_by_the_watchdog_and_keeps_its_drain(machine: Machine) -> None:
    before = show(machine, "MainPID", "NRestarts")
    machine.run("systemctl", "kill", "--kill-whom=main", "--signal=SIGSTOP", UNIT)
    wait_for("the stalled daemon's heartbeat goes stale for the plugin",
             lambda: plugin_view(machine) == "no daemon: stale heartbeat")

    def restarted() -> bool:
        now = show(machine, "MainPID", "ActiveState")
        return now["ActiveState"] == "active" and now["MainPID"] not in ("0", before["MainPID"])

    wait_for("systemd kills and restarts the daemon", restarted)
    assert int(show(machine, "NRestarts")["NRestarts"]) == int(before["NRestarts"]) + 1
    journal = machine.run("journalctl", "-u", UNIT, "--no-pager").stdout
    assert "Watchdog timeout" in journal
    rail0 = states(machine)["rail0"]
    assert rail0["state"] == "DRAINED", rail0
    assert plugin_view(machine) == "daemon"


def test_reload_applies_the_config_and_keeps_the_state(machine: Machine) -> None:
    pid = show(machine, "MainPID")["MainPID"]
    machine.sh("""
        ip link add rail2 type veth peer name rail2-peer
        ip link set rail2-peer up && ip link set rail2 up
        sed -i 's/^interfaces = .*/interfaces = ["rail0", "rail1", "rail2"]/' \
            /etc/linkguard/linkguard.toml
    """)
    machine.run("systemctl", "reload", UNIT)
    wait_for("rail2 is monitored after the reload", lambda: "rail2" in states(machine))
    assert show(machine, "MainPID", "ActiveState") == {"MainPID": pid, "ActiveState": "active"}
    assert states(machine)["rail0"]["state"] == "DRAINED"
    wait_for("the status line counts 3 NICs",
             lambda: show(machine, "StatusText")["StatusText"] == "watching 3 NICs")


def test_stop_is_a_clean_exit_that_leaves_no_daemon_for_the_plugin(machine: Machine) -> None:
    machine.run("systemctl", "stop", UNIT)
    props = show(machine, "ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    assert props == {"ActiveState": "inactive", "Result": "success",
                     "ExecMainCode": "1", "ExecMainStatus": "0"}  # CLD_EXITED, status 0
    assert plugin_view(machine) == "no daemon: ENOENT"  # the clean exit removed the file
    assert machine.run("test", "-d", RUN_DIR, check=False).returncode == 0  # Preserve=yes
    assert machine.run("linkguard-cli", "status", check=False).returncode == 3


def test_a_daemon_started_by_systemd_sees_a_cut_in_the_lab(machine: Machine) -> None:
    """linkguard-lab inside the container's own network namespace; systemd puts the daemon in
    host a's namespace (NetworkNamespacePath=, a drop-in)."""
    machine.run(LAB_TOOL, "up", "--hosts", "2", "--rails", "2", "--prefix", LAB)
    try:
        machine.sh(f"""
            mkdir -p {LAB_DROPIN.rsplit('/', 1)[0]}
            printf '[Service]\\nNetworkNamespacePath=/run/netns/{LAB}-a\\n%s\\n' \
                'Environment=LINKGUARDD_INTERFACES=rail0,rail1' > {LAB_DROPIN}
            systemctl daemon-reload
            systemctl start {UNIT}
        """)
        pid = show(machine, "MainPID")["MainPID"]
        assert machine.run("ip", "netns", "identify", pid).stdout.strip() == f"{LAB}-a"
        last = max(e["seq"] for e in events(machine))
        machine.run(LAB_TOOL, "cut", "a", "1", "--prefix", LAB)
        wait_for("the daemon reports rail1 DOWN",
                 lambda: any(e["nic"] == "rail1" and e["new_state"] == "DOWN"
                             for e in events(machine, since=last)))
        cut = next(e for e in events(machine, since=last) if e["nic"] == "rail1")
        assert cut["reason"].lower() == "carrier_lost", cut
        # A NIC going DOWN is a warning in the journal (the daemon's <N> priorities), so
        # `journalctl -p warning` finds it.
        wait_for("the DOWN transition in `journalctl -p warning`",
                 lambda: "to=DOWN" in machine.run("journalctl", "-u", UNIT, "-p", "warning",
                                                  "--no-pager", "-o", "cat").stdout)
    finally:
        machine.sh(f"""
            systemctl stop {UNIT}; rm -f {LAB_DROPIN}; systemctl daemon-reload
            {LAB_TOOL} down --prefix {LAB}
        """, check=False)
