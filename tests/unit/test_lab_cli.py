"""linkguard-lab without namespaces: naming, addresses and bad input (exit status 2)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import linkguard_lab
from linkguard_lab import netns
from linkguard_lab.cli import cli
from linkguard_lab.errors import LabError
from linkguard_lab.netlink import Netlink
from linkguard_lab.topology import MAX_HOSTS, MAX_RAILS, Topology

LAB_NET = ipaddress.ip_network("198.18.0.0/15")


def stderr_of(result: Result) -> str:
    try:
        return result.stderr
    except ValueError:  # click < 8.2 mixes stderr into output
        return result.output


# --- topology ----------------------------------------------------------------------------
def test_names_and_addresses() -> None:
    t = Topology("lg", 2, 2)
    assert t.host_names == ["a", "b"]
    assert t.namespaces == ["lg-sw", "lg-a", "lg-b"]
    assert (t.switch_ns, t.host_ns("b")) == ("lg-sw", "lg-b")
    assert (t.port("a", 0), t.port("b", 1), t.mgmt_port("b")) == ("a-r0", "b-r1", "b-m")
    assert (t.rail_ifname(1), t.bridge(1), t.bridge(None)) == ("rail1", "br-rail1", "br-mgmt")
    assert t.address("a", 0) == "198.18.0.1"
    assert t.address("b", 1) == "198.18.1.2"
    assert t.mgmt_address("a") == "198.19.0.1"


def test_largest_lab_stays_in_its_address_block_and_name_limits() -> None:
    t = Topology("lg0123456789", MAX_HOSTS, MAX_RAILS)
    addrs = [t.address(h, r) for h in t.host_names for r in range(t.rails)]
    addrs += [t.mgmt_address(h) for h in t.host_names]
    assert len(set(addrs)) == len(addrs)
    assert all(ipaddress.ip_address(a) in LAB_NET for a in addrs)
    names = [t.port(h, r) for h in t.host_names for r in range(t.rails)]
    names += [t.rail_ifname(r) for r in range(t.rails)] + [t.bridge(None), t.bridge(15)]
    assert max(len(n) for n in names) <= 15  # IFNAMSIZ - 1


def test_namespace_ownership_is_exact() -> None:
    t = Topology("lg", 2, 2)
    assert t.owns_ns("lg-sw") and t.owns_ns("lg-a") and t.owns_ns("lg-z")
    assert not t.owns_ns("lgt12ab-a") and not t.owns_ns("lg-ab") and not t.owns_ns("xlg-a")


@pytest.mark.parametrize("kwargs, message", [
    ({"prefix": "foo"}, "bad prefix"),
    ({"prefix": "lg-x"}, "bad prefix"),
    ({"prefix": "LG"}, "bad prefix"),
    ({"prefix": "lg" + "a" * 11}, "bad prefix"),
    ({"hosts": 0}, "bad host count"),
    ({"hosts": MAX_HOSTS + 1}, "bad host count"),
    ({"rails": 0}, "bad rail count"),
    ({"rails": MAX_RAILS + 1}, "bad rail count"),
])
def test_bad_shapes(kwargs: dict, message: str) -> None:
    with pytest.raises(LabError, match=message):
        Topology(**kwargs)


@pytest.mark.parametrize("rail", ["2", 2, -1, "-1", "x", "1.0", "", None])
def test_bad_rails(rail: object) -> None:
    with pytest.raises(LabError, match="unknown rail"):
        Topology("lg", 2, 2).check_rail(rail)  # type: ignore[arg-type]


def test_good_rails_and_bad_hosts() -> None:
    t = Topology("lg", 3, 2)
    assert t.check_rail("1") == 1 and t.check_rail(0) == 0
    for host in ["d", "A", "sw", "", "ab"]:
        with pytest.raises(LabError, match="unknown host"):
            t.host_ns(host)


# --- command line ------------------------------------------------------------------------
@pytest.fixture
def fake_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root, and a 2x2 lab 'lgu' as far as the namespace list shows; any real kernel call
    (netlink or a tool) fails the test, so validation must happen before them."""
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns, "list_netns", lambda: ["lgu-sw", "lgu-a", "lgu-b", "lguz-a"])
    monkeypatch.setattr(netns, "link_names", lambda ns: ["lo", "rail0", "rail1", "mgmt0"])
    monkeypatch.setattr(netns, "ipv4_addresses", lambda ns, ifname: [])  # rail-only

    def no_kernel(*args: object, **kwargs: object) -> None:
        raise AssertionError("kernel call before input validation")

    monkeypatch.setattr(netns, "run", no_kernel)
    monkeypatch.setattr(Netlink, "_ipr", no_kernel)


@pytest.mark.parametrize("args, message", [
    (["cut", "z", "0"], "unknown host 'z'"),
    (["restore", "a", "2"], "unknown rail '2'"),
    (["nicdown", "a", "-1"], "unknown rail '-1'"),
    (["nicup", "c", "0"], "unknown host 'c'"),
    (["blackhole", "a", "rail0"], "unknown rail 'rail0'"),
    (["unblackhole", "B", "0"], "unknown host 'B'"),
    (["flap", "a", "5"], "unknown rail '5'"),
    (["flap", "a", "0", "--count", "0"], "bad flap count"),
    (["flap", "a", "0", "--period-ms", "0"], "bad flap period"),
    (["exec", "x", "--", "true"], "unknown host 'x'"),
    (["exec", "a", "--"], "exec needs a command"),
    (["status", "--prefix", "lgv"], "no lab with prefix 'lgv'"),
    (["cut", "--prefix", "nolg", "a", "0"], "bad prefix"),
    (["up"], "already exists"),
    (["up", "--prefix", "lgw", "--hosts", "0"], "bad host count"),
    (["up", "--prefix", "lgw", "--rails", "99"], "bad rail count"),
    (["up", "--prefix", "lgw", "--rails", "4", "--police", "fast"], "bad rate 'fast'"),
    (["up", "--prefix", "lgw", "--police", "10"], "must be 1 kB/s .. 100 GB/s"),
    (["cut", "a", "0", "--bogus"], "unexpected extra argument"),
    (["cut", "a"], "Missing argument 'RAIL'"),
    (["frob"], "No such command 'frob'"),
])
def test_bad_input_is_one_line_and_exit_2(fake_lab: None, args: list[str], message: str) -> None:
    if "--prefix" not in args:
        args = [args[0], "--prefix", "lgu", *args[1:]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    err = stderr_of(result)
    assert err.startswith("linkguard-lab: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize("args", [["up"], ["down"], ["status"], ["cut", "a", "0"],
                                  ["exec", "a", "--", "true"], ["flap", "a", "0"], ["demo"]])
def test_not_root_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                         args: list[str]) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert stderr_of(result) == ("linkguard-lab: must run as root (network namespaces need "
                                 "CAP_SYS_ADMIN)\n")


def test_help_needs_no_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    for args in [["--help"], ["up", "--help"], ["cut", "--help"], ["demo", "--help"]]:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0 and "Usage:" in result.output


def test_every_command_is_registered() -> None:
    assert {"up", "down", "status", "exec", "cut", "restore", "nicdown", "nicup", "blackhole",
            "unblackhole", "flap", "demo"} <= set(cli.commands)


def test_real_process_without_root() -> None:
    """The console entry point as an unprivileged user: one line, status 2, no traceback."""
    env = dict(os.environ, PYTHONPATH=str(Path(linkguard_lab.__file__).parent.parent))
    argv = [sys.executable, "-m", "linkguard_lab", "up", "--prefix", "lgnoroot"]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv not available to drop root")
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run([*drop, sys.executable, "-c", "import linkguard_lab"], env=env,
                               capture_output=True, timeout=60, check=False)
        if probe.returncode != 0:
            pytest.skip("the checkout is not readable by nobody")
        argv = drop + argv
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 2
    assert res.stderr == "linkguard-lab: must run as root (network namespaces need " \
                         "CAP_SYS_ADMIN)\n"


# --- the demo's SIGTERM handler ------------------------------------------------------------
def test_demo_sigterm_unwinds_only_the_demo_process(tmp_path: Path) -> None:
    """A child forked while the demo's handler is installed (pyroute2 forks one per namespace
    socket and SIGTERMs it when done) exits at once: it must not raise into a copy of the
    demo's stack and run its `finally` (the teardown that deleted the lab under the demo)."""
    import functools
    import signal

    from linkguard_lab.demo import sigterm_unwinds

    marker = tmp_path / "teardown-ran"
    previous = signal.signal(signal.SIGTERM, functools.partial(sigterm_unwinds, os.getpid()))
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: stands for pyroute2's helper inside run_demo's try
            try:
                try:
                    os.close(r)
                    os.write(w, b"x")
                    signal.pause()
                finally:
                    marker.write_text("the child ran the parent's teardown")
            except BaseException:  # noqa: BLE001 - never back into pytest in a forked child
                os._exit(99)
            os._exit(0)
        os.close(w)
        os.read(r, 1)  # the child's handler is in place
        os.close(r)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
        assert not marker.exists()
        with pytest.raises(SystemExit) as exc:  # in the demo's own process it unwinds
            sigterm_unwinds(os.getpid(), signal.SIGTERM, None)
        assert exc.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_demo_sigterm_unwinds_once(tmp_path: Path) -> None:
    """Under timeout(1) the demo (or the GPU check) gets SIGTERM twice, once from timeout and
    once through its process group: the second must not unwind the teardown the first
    started. Its `finally` runs to the end with the second signal arriving inside it."""
    import functools
    import signal

    from linkguard_lab.demo import sigterm_unwinds

    steps: list[str] = []
    previous = signal.signal(signal.SIGTERM, functools.partial(sigterm_unwinds, os.getpid()))
    try:
        with pytest.raises(SystemExit) as exc:
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # the first: unwinds from here
                steps.append("not reached")
            finally:
                steps.append("teardown begins")
                os.kill(os.getpid(), signal.SIGTERM)  # the second, inside the teardown
                steps.append("teardown ends")
        assert exc.value.code == 128 + signal.SIGTERM
        assert steps == ["teardown begins", "teardown ends"]
    finally:
        signal.signal(signal.SIGTERM, previous)
