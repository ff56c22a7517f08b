"""The lab's faults are the kernel events they claim to be.

Carrier is read from /sys inside each namespace (`ip netns exec NS cat ...`), a different
path from the netlink the lab itself uses, and reachability with real ICMP over the rails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import linkguard_lab
from linkguard_lab import netns
from linkguard_lab.cli import cli
from linkguard_lab.errors import LabError
from linkguard_lab.lab import Lab, unique_prefix

pytestmark = pytest.mark.lab


def carrier(lab: Lab, host: str, ifname: str) -> str | None:
    return lab.sysfs(host, ifname, "carrier")


def carrier_changes(lab: Lab, host: str, ifname: str) -> int:
    return int(lab.sysfs(host, ifname, "carrier_changes") or -1)


def lab_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process (exit status and stderr as a user sees)."""
    env = dict(os.environ, PYTHONPATH=str(Path(linkguard_lab.__file__).parent.parent))
    return subprocess.run([sys.executable, "-m", "linkguard_lab", *args], env=env, check=False,
                          capture_output=True, text=True, timeout=60)


def test_shape_and_addresses(lab: Lab) -> None:
    assert lab.hosts == ["a", "b"] and lab.rails == [0, 1]
    assert sorted(lab.existing_namespaces()) == sorted(
        [f"{lab.prefix}-sw", f"{lab.prefix}-a", f"{lab.prefix}-b"])
    for host in lab.hosts:
        for rail in lab.rails:
            assert carrier(lab, host, f"rail{rail}") == "1"
        show = lab.run(host, ["ip", "-4", "-o", "addr", "show"], check=True).stdout
        assert f"{lab.address(host, 0)}/24" in show and f"{lab.mgmt_address(host)}/24" in show
        # Only lab addresses (198.18.0.0/15) and loopback exist in a host.
        for line in show.splitlines():
            addr = line.split()[3]
            assert addr.startswith(("198.18.", "198.19.", "127.")), addr
    assert lab.ping("a", "b", 0) and lab.ping("b", "a", 1)
    mgmt = lab.run("a", ["ping", "-n", "-q", "-c", "1", "-W", "1", lab.mgmt_address("b")])
    assert mgmt.returncode == 0
    # attach() reads the same shape back from the kernel.
    again = Lab.attach(lab.prefix)
    assert (again.hosts, again.rails) == (lab.hosts, lab.rails)
    again.close()


def test_cut_is_carrier_loss_on_that_host_only(lab: Lab) -> None:
    assert lab.ping("a", "b", 0)
    before = time.monotonic_ns()
    t_cut = lab.cut("a", 0)
    assert before <= t_cut <= time.monotonic_ns()
    assert carrier(lab, "a", "rail0") == "0"
    assert carrier(lab, "b", "rail0") == "1"
    assert carrier(lab, "a", "rail1") == "1"
    assert carrier(lab, "a", "mgmt0") == "1"
    assert not lab.carrier("a", 0) and lab.carrier("b", 0)  # netlink agrees with /sys
    assert not lab.ping("a", "b", 0)
    assert lab.ping("a", "b", 1)

    lab.restore("a", 0)
    assert carrier(lab, "a", "rail0") == "1"
    assert lab.ping("a", "b", 0, timeout_s=3)


def test_nicdown_is_host_side(lab: Lab) -> None:
    lab.nicdown("a", 0)
    assert lab.sysfs("a", "rail0", "operstate") == "down"
    assert int(lab.sysfs("a", "rail0", "flags") or "0", 16) & 0x1 == 0  # IFF_UP cleared
    assert carrier(lab, "sw", "a-r0") == "0"  # the switch port sees the NIC go away
    assert carrier(lab, "b", "rail0") == "1"
    assert not lab.ping("a", "b", 0)

    lab.nicup("a", 0)
    assert carrier(lab, "a", "rail0") == "1"
    assert lab.ping("a", "b", 0, timeout_s=3)


def test_blackhole_drops_silently_with_carrier_up(lab: Lab) -> None:
    assert lab.ping("a", "b", 0)
    changes = carrier_changes(lab, "a", "rail0")
    lab.blackhole("a", 0)
    assert lab.blackholed("a", 0) and not lab.blackholed("a", 1)
    assert carrier(lab, "a", "rail0") == "1"
    assert carrier(lab, "sw", "a-r0") == "1"
    assert not lab.ping("a", "b", 0)
    assert not lab.ping("b", "a", 0)
    assert lab.ping("a", "b", 1)  # the other rail is unaffected
    assert carrier_changes(lab, "a", "rail0") == changes  # no link event at all
    status = CliRunner().invoke(cli, ["status", "--prefix", lab.prefix])
    assert status.exit_code == 0
    faulty = [ln.split() for ln in status.output.splitlines() if "blackhole" in ln]
    assert [(row[0], row[1]) for row in faulty] == [("a", "rail0")]

    lab.unblackhole("a", 0)
    assert not lab.blackholed("a", 0)
    assert lab.ping("a", "b", 0, timeout_s=3)


def test_routed_lab_routes_between_rails_and_its_faults_still_apply(lab: Lab) -> None:
    """The default lab is rail-only: a rail's NIC reaches no other rail. `up --routed` makes the
    switch route between them, through the sender's own rail, and a blackhole or cut of a port
    stops the routed traffic through it too (the bridge's input and output hooks)."""
    assert not lab.routed and not lab.ping("a", "b", 1, from_rail=0)
    prefix = unique_prefix("lgt")
    try:
        up = lab_cli("up", "--routed", "--prefix", prefix)
        assert up.returncode == 0 and "2 hosts x 2 rails (routed)" in up.stdout, up.stderr
        assert "routers in" in up.stdout and "rail1=198.18.1.254" in up.stdout, up.stdout
        routed = Lab.attach(prefix)
        assert routed.routed and not Lab.attach(lab.prefix).routed
        assert routed.ping("a", "b", 1, from_rail=0, timeout_s=3)
        assert routed.ping("b", "a", 0, from_rail=1, timeout_s=3)
        assert routed.ping("a", "b", 0) and routed.ping("a", "b", 1)  # same rail as before
        route = routed.run("a", ["ip", "route", "get", routed.address("b", 1), "from",
                                 routed.address("a", 0)], check=True).stdout
        assert f"via {routed.topo.router_address(0)} dev rail0" in route, route
        switch = routed.run("sw", ["ip", "-4", "-o", "addr", "show"], check=True).stdout
        assert sorted(ln.split()[3] for ln in switch.splitlines() if "127." not in ln) == [
            f"{routed.topo.router_address(r)}/24" for r in routed.rails]

        routed.blackhole("a", 0)
        assert not routed.ping("a", "b", 1, from_rail=0)  # into the router through a-r0
        assert not routed.ping("b", "a", 0, from_rail=1)  # out of the router through a-r0
        assert routed.ping("a", "b", 0, from_rail=1, timeout_s=3)  # a's other rail is fine
        routed.unblackhole("a", 0)
        assert routed.ping("a", "b", 1, from_rail=0, timeout_s=3)
        routed.cut("a", 0)
        assert not routed.ping("a", "b", 1, from_rail=0)
        routed.restore("a", 0)
        assert routed.ping("a", "b", 1, from_rail=0, timeout_s=3)
        routed.close()
    finally:
        Lab(prefix).down()
    assert not Lab(prefix).existing_namespaces()


def test_flap_ends_up_with_carrier_and_counts_changes(lab: Lab) -> None:
    before = carrier_changes(lab, "a", "rail0")
    before_b = carrier_changes(lab, "b", "rail0")
    stamps = lab.flap("a", 0, count=3, period_ms=100)
    assert len(stamps) == 6 and stamps == sorted(stamps)
    assert carrier(lab, "a", "rail0") == "1"
    assert carrier_changes(lab, "a", "rail0") - before >= 6
    assert carrier_changes(lab, "b", "rail0") == before_b  # b saw nothing


def test_tx_bytes_counts_what_a_host_sends_on_that_rail_only(lab: Lab) -> None:
    before = lab.tx_bytes("a", 0), lab.tx_bytes("a", 1), lab.tx_bytes("b", 0)
    for _ in range(3):
        assert lab.ping("a", "b", 0)
    assert lab.tx_bytes("a", 0) - before[0] >= 3 * 84  # three echo requests, 84 B of IP each
    assert lab.tx_bytes("a", 1) - before[1] < 3 * 84  # rail1 carried none of them
    assert lab.tx_bytes("b", 0) - before[2] >= 3 * 84  # the replies


def test_cli_faults_and_exec(lab: Lab) -> None:
    p = ["--prefix", lab.prefix]
    res = lab_cli("cut", *p, "b", "1")
    assert res.returncode == 0, res.stderr
    assert carrier(lab, "b", "rail1") == "0"
    assert lab_cli("restore", *p, "b", "1").returncode == 0
    assert carrier(lab, "b", "rail1") == "1"
    assert lab_cli("flap", *p, "b", "1", "--count", "2", "--period-ms", "20").returncode == 0
    assert carrier(lab, "b", "rail1") == "1"
    assert lab_cli("exec", *p, "b", "--", "sh", "-c", "exit 7").returncode == 7
    res = lab_cli("exec", *p, "a", "--", "ping", "-c", "1", "-W", "1", lab.address("b", 0))
    assert res.returncode == 0


@pytest.mark.parametrize("args, message", [
    (["cut", "z", "0"], "unknown host 'z'"),
    (["cut", "a", "2"], "unknown rail '2'"),
    (["blackhole", "a", "x"], "unknown rail 'x'"),
    (["flap", "c", "0"], "unknown host 'c'"),
    (["exec", "q", "--", "true"], "unknown host 'q'"),
])
def test_cli_bad_host_or_rail(lab: Lab, args: list[str], message: str) -> None:
    res = lab_cli(*args[:1], "--prefix", lab.prefix, *args[1:])
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert all(not row["faults"] for row in lab.status())  # nothing was touched


def test_up_twice_is_an_error_and_keeps_the_lab(lab: Lab) -> None:
    with pytest.raises(LabError, match="already exists"):
        Lab(lab.prefix).up()
    res = lab_cli("up", "--prefix", lab.prefix)
    assert res.returncode == 2 and "already exists" in res.stderr
    assert carrier(lab, "a", "rail0") == "1" and lab.ping("a", "b", 0)


def test_down_is_complete_and_idempotent(lab_factory) -> None:
    lab = lab_factory()
    server = lab.popen("b", ["sleep", "300"])
    lab.down()
    assert server.poll() is not None
    assert not [n for n in netns.list_netns() if n.startswith(f"{lab.prefix}-")]
    lab.down()
    res = lab_cli("down", "--prefix", lab.prefix)
    assert res.returncode == 0 and "nothing to remove" in res.stdout
    res = lab_cli("status", "--prefix", lab.prefix)
    assert res.returncode == 2 and "no lab" in res.stderr


def test_cli_down_stops_processes_left_in_the_lab(lab: Lab) -> None:
    res = lab_cli("exec", "--prefix", lab.prefix, "b", "--", "sh", "-c",
                  "sleep 300 >/dev/null 2>&1 & echo $!")
    pid = int(res.stdout.split()[-1])
    assert lab_cli("down", "--prefix", lab.prefix).returncode == 0
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not lab.existing_namespaces()


def test_failed_up_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    lab = Lab(unique_prefix("lgt"))

    def broken(ns: str, ruleset: str) -> None:
        raise LabError("injected failure")

    monkeypatch.setattr(netns, "nft", broken)
    with pytest.raises(LabError, match="injected"):
        lab.up()
    assert lab.existing_namespaces() == []


def test_two_labs_with_other_shapes_are_isolated(lab: Lab, lab_factory) -> None:
    other = lab_factory(hosts=3, rails=1)
    assert other.hosts == ["a", "b", "c"] and other.rails == [0]
    # Same addresses in both labs, yet a cut in one is not seen in the other.
    other.cut("a", 0)
    assert carrier(other, "a", "rail0") == "0" and carrier(lab, "a", "rail0") == "1"
    # A first ping also resolves ARP through a fresh bridge: allow a loaded machine time.
    assert lab.ping("a", "b", 0, timeout_s=5) and other.ping("b", "c", 0, timeout_s=5)
    attached = Lab.attach(other.prefix)
    assert (attached.hosts, attached.rails) == (["a", "b", "c"], [0])
    attached.close()


def test_fixture_tears_down_when_a_test_fails(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    (tmp_path / "conftest.py").write_text(
        "from linkguard_lab.pytest_fixture import lab, lab_factory  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(
        "from pathlib import Path\n"
        "def test_fails(lab):\n"
        "    Path(__file__).with_name('prefix').write_text(lab.prefix)\n"
        "    assert False, 'deliberate'\n")
    env = dict(os.environ, PYTHONPATH=str(Path(linkguard_lab.__file__).parent.parent))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 1 and "deliberate" in res.stdout, res.stdout + res.stderr
    prefix = (tmp_path / "prefix").read_text()
    assert prefix.startswith("lgt")
    assert not [n for n in netns.list_netns() if n.startswith(f"{prefix}-")]


def test_a_lab_without_nft_rules_or_sysctl_still_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a bare image (the GPU machine's) allows: no nftables table, no procps `sysctl`."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    real_which = netns.shutil.which
    monkeypatch.setattr(netns.shutil, "which",
                        lambda name: None if name == "sysctl" else real_which(name))
    with Lab(unique_prefix("lgt"), blackhole_rules=False) as lab:
        lab.up()
        ruleset = netns.run(netns.exec_argv(lab.ns("sw"), ["nft", "list", "ruleset"])).stdout
        assert "linkguard_lab" not in ruleset
        with pytest.raises(LabError, match="without the blackhole rules"):
            lab.blackhole("a", 0)
        # The /proc/sys fallback applied the lab's sysctls inside the host namespace.
        v6 = lab.run("a", ["cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"]).stdout.strip()
        assert v6 in ("1", "")  # "" only on a kernel without IPv6 (the key is skipped)
        lab.cut("a", 0)
        assert carrier(lab, "a", "rail0") == "0" and carrier(lab, "b", "rail0") == "1"
    assert not lab.existing_namespaces()
