"""The lab's routed-fabric variant without namespaces: router addresses, the source rules and
tables a host gets, the switch's lines, the nftables hooks its faults need, and the CLI."""

from __future__ import annotations

import ipaddress
import json
import re

import pytest
from click.testing import CliRunner

from linkguard_lab import netns, routing
from linkguard_lab.cli import cli
from linkguard_lab.faults import nft_ruleset
from linkguard_lab.gray import gray_ruleset
from linkguard_lab.lab import Lab
from linkguard_lab.netlink import Netlink
from linkguard_lab.topology import MAX_HOSTS, MAX_RAILS, Topology

LAB_NET = ipaddress.ip_network("198.18.0.0/15")


def test_routers_sit_on_their_rail_apart_from_every_host() -> None:
    t = Topology("lg", MAX_HOSTS, MAX_RAILS, routed=True)
    hosts = {t.address(h, r) for h in t.host_names for r in range(t.rails)}
    for r in range(t.rails):
        router = ipaddress.ip_address(t.router_address(r))
        net = ipaddress.ip_network(t.rail_network(r))
        assert router in net and net.subnet_of(LAB_NET)  # type: ignore[arg-type]
        assert str(router) not in hosts
        assert all(ipaddress.ip_address(t.address(h, r)) in net for h in t.host_names)
    assert len({t.rail_table(r) for r in range(t.rails)}) == t.rails
    assert Topology("lg").routed is False  # rail-only unless asked


def test_switch_routes_every_rail_and_never_the_management_network() -> None:
    t = Topology("lg", 2, 3, routed=True)
    assert routing.switch_lines(t) == [
        "addr add 198.18.0.254/24 dev br-rail0", "addr add 198.18.1.254/24 dev br-rail1",
        "addr add 198.18.2.254/24 dev br-rail2"]
    assert routing.sysctls(t, "lg-sw") == {"net.ipv4.ip_forward": "1"}
    assert routing.sysctls(t, "lg-a") == {}


def test_a_rail_only_lab_gets_nothing_of_it() -> None:
    t = Topology("lg", 2, 2)
    assert routing.switch_lines(t) == [] and routing.host_lines(t, "a") == []
    assert routing.sysctls(t, "lg-sw") == {}


def test_a_host_reaches_every_other_rail_through_its_own_rails_router() -> None:
    """Per rail: a source rule before the main table, and a table with the rail's own subnet
    and every other rail's subnet via that rail's router, on that rail's NIC."""
    t = Topology("lg", 3, 3, routed=True)
    lines = routing.host_lines(t, "b")
    rules = [ln for ln in lines if ln.startswith("rule ")]
    assert rules == ["rule add from 198.18.0.2 table 100 priority 1000",
                     "rule add from 198.18.1.2 table 101 priority 1001",
                     "rule add from 198.18.2.2 table 102 priority 1002"]
    assert all(int(ln.rsplit(" ", 1)[1]) < 32766 for ln in rules)  # the main table's rule
    for r in range(t.rails):
        table = [ln for ln in lines if ln.startswith("route ") and
                 ln.endswith(f"table {t.rail_table(r)}")]
        assert f"route add 198.18.{r}.0/24 dev rail{r} src 198.18.{r}.2 table {100 + r}" in table
        gateways = {m[1]: m[2] for ln in table
                    if (m := re.match(r"route add (\S+) via (\S+) dev rail\d", ln))}
        assert sorted(gateways) == sorted(t.rail_network(q) for q in range(t.rails) if q != r)
        assert set(gateways.values()) == {t.router_address(r)}
        assert all(f"dev rail{r} src {t.address('b', r)} " in ln for ln in table)
    for ln in lines:  # only lab addresses, and never the management network
        for addr in re.findall(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?", ln):
            net = ipaddress.ip_network(addr, strict=False)
            assert net.subnet_of(LAB_NET) and not net.subnet_of(  # type: ignore[arg-type]
                ipaddress.ip_network("198.19.0.0/24"))
    assert routing.host_lines(Topology("lg", 2, 1, routed=True), "a") == [
        "rule add from 198.18.0.1 table 100 priority 1000",
        "route add 198.18.0.0/24 dev rail0 src 198.18.0.1 table 100"]


def test_faults_cover_the_hooks_routed_frames_pass() -> None:
    """Routed frames reach the router through the bridge's input hook and leave through its
    output hook, not forward: a routed lab's blackhole and gray chains hook all three."""
    rail_only, routed = Topology("lg", 2, 2), Topology("lg", 2, 2, routed=True)
    hooks = re.compile(r"type filter hook (\w+)")
    assert hooks.findall(nft_ruleset(rail_only)) == ["forward"]
    assert hooks.findall(nft_ruleset(routed)) == ["forward", "input", "output"]
    assert nft_ruleset(routed).count("meta iifgroup") == 3
    jumps = re.compile(r'add rule bridge linkguard_lab (\w+) (iif|oif)name "a-r0" jump lossy_a_r0')
    assert sorted(m[0] for m in jumps.findall(gray_ruleset(routed))) == [
        "forward", "forward", "input", "input", "output", "output"]
    assert {m[0] for m in jumps.findall(gray_ruleset(rail_only))} == {"forward"}


@pytest.fixture
def fake_kernel(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Root and a 2x2 lab 'lgu'; `addresses` says what the switch's bridges hold."""
    addresses: dict[str, list[str]] = {}
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns, "list_netns", lambda: ["lgu-sw", "lgu-a", "lgu-b"])
    monkeypatch.setattr(netns, "link_names", lambda ns: ["lo", "rail0", "rail1", "mgmt0"])
    monkeypatch.setattr(netns, "ipv4_addresses",
                        lambda ns, ifname: addresses.get(f"{ns}/{ifname}", []))
    monkeypatch.setattr(Lab, "status", lambda self: [])
    monkeypatch.setattr(Netlink, "close", lambda self: None)
    return addresses


def test_attach_reads_routed_from_the_switch(fake_kernel: dict[str, list[str]]) -> None:
    assert Lab.attach("lgu").routed is False
    fake_kernel["lgu-sw/br-rail0"] = ["198.18.0.254/24"]
    lab = Lab.attach("lgu")
    assert lab.routed and lab.topo == Topology("lgu", 2, 2, routed=True)
    out = CliRunner().invoke(cli, ["status", "--prefix", "lgu", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["routed"] is True
    out = CliRunner().invoke(cli, ["status", "--prefix", "lgu"])
    assert "2 hosts x 2 rails (routed)" in out.output


def test_up_has_a_routed_flag() -> None:
    out = CliRunner().invoke(cli, ["up", "--help"])
    assert out.exit_code == 0 and "--routed" in out.output

