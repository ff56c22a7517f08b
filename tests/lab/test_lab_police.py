"""`linkguard-lab up --rails 4 --police RATE` (issue 28): a 4-rail lab whose every rail port is
policed to the same rate, so connections spread over the rails share the rails' capacity, not
the CPU. Built and removed through the real command line; the policer is read back from the
switch's nftables rules and seen dropping on every rail. Traffic is bounded in count and time."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import pytest
from test_lab import lab_cli

from linkguard_lab import netns
from linkguard_lab.lab import Lab, unique_prefix

pytestmark = pytest.mark.lab

RAILS = 4
# 1 kB/s, the slowest rate the lab takes: any burst past the policer's 64 KiB bucket is dropped
# whatever the machine's speed, so "dropped" is not a timing question.
RATE = "1kB"
PING_BYTES = 65000  # the largest ICMP echo (65507): about 45 frames of 1500 bytes
PINGS = 20  # sent, then at most 1 s for the replies (no -w: the count bounds it)


@pytest.fixture
def policed_lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("lab tests need root (network namespaces)")
    prefix = unique_prefix("lgt")
    try:
        res = lab_cli("up", "--prefix", prefix, "--rails", str(RAILS), "--police", RATE)
        assert res.returncode == 0, res.stderr
        assert f"2 hosts x {RAILS} rails" in res.stdout and f"policed to {RATE}" in res.stdout
        lab = Lab.attach(prefix)
        yield lab
        lab.close()
    finally:
        Lab(prefix).down()  # also after a failed assertion: nothing is left


def test_every_rail_is_policed_to_the_same_rate(policed_lab: Lab) -> None:
    lab = policed_lab
    assert lab.rails == list(range(RAILS))
    faults = lab.gray_faults()
    for host in lab.hosts:
        for rail in lab.rails:
            (fault,) = faults[(host, rail)]
            assert fault["kind"] == "slow"
            assert [r["comment"] for r in fault["rules"]] == [f"slow {RATE} (iifname)",
                                                            f"slow {RATE} (oifname)"]
    rules = netns.run(netns.exec_argv(lab.topo.switch_ns, ["nft", "list", "table", "bridge",
                                                          "linkguard_lab"])).stdout
    assert len(re.findall(r"limit rate over 1000 bytes/second", rules)) == 2 * RAILS * 2
    # Small traffic passes on every rail, both ways (under the bucket); it also leaves each
    # host the other's neighbour entry, so no ARP has to pass a drained policer below ...
    for rail in lab.rails:
        assert lab.ping("a", "b", rail, timeout_s=5) and lab.ping("b", "a", rail, timeout_s=5)
    # ... and bursts past it are dropped on every rail, both ways. The switch runs a frame
    # through the policers of both its ports, host a's first (gray.py adds a's rules first),
    # so a's port drops both directions here: a's bursts entering (iifname), b's leaving to a
    # (oifname). b's identical rules, listed above, see only what a's let through.
    pings = [lab.popen(src, ["ping", "-n", "-q", "-c", str(PINGS), "-i", "0.01", "-s",
                             str(PING_BYTES), "-W", "1", lab.address(dst, rail)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for rail in lab.rails for src, dst in (("a", "b"), ("b", "a"))]
    for p in pings:
        p.wait(timeout=30)
    faults = lab.gray_faults()
    for rail in lab.rails:
        dropped = {r["comment"]: r["dropped"] for r in faults[("a", rail)][0]["rules"]}
        assert dropped[f"slow {RATE} (iifname)"] > 0, rail
        assert dropped[f"slow {RATE} (oifname)"] > 0, rail


def test_unslow_lifts_one_rail_only(policed_lab: Lab) -> None:
    lab = policed_lab
    lab.unslow("a", 2)
    faults = lab.gray_faults()
    assert ("a", 2) not in faults and ("b", 2) in faults and ("a", 3) in faults


def test_police_refuses_a_bad_rate_before_building() -> None:
    if os.geteuid() != 0:
        pytest.skip("lab tests need root (network namespaces)")
    prefix = unique_prefix("lgt")
    res = lab_cli("up", "--prefix", prefix, "--rails", str(RAILS), "--police", "fast")
    assert res.returncode == 2 and "bad rate 'fast'" in res.stderr
    assert Lab(prefix).existing_namespaces() == []
