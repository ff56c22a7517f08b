"""The metrics golden, end to end (as node_exporter's end-to-end test): fixture sysfs and real
netdevs through the real monitors, policy, engine and exporters, scraped over HTTP.

A namespace of our own holds veth netdevs named like the fixture tree's (tests/fixtures/sys:
ib0 on mlx5_0, ens2np0 on mlx5_1, eth4 and eth5 on mlx4_0), each with its peer ("switch port")
beside it; the netlink monitor watches them,
the RDMA monitors and the inventory read the fixture tree, the PHY monitor asks the veths (no
FEC or PHY statistics: no data), the DOM monitor reads spec-built
EEPROM images (the only fake: no optical module here). One real fault, carrier lost on ib0
(its peer set down)
gives a transition and a detection latency; one plugin verdict (lg_verdict_send, the plugin's
own code) makes ib0 gray. The scrape, with the values that depend on time
masked, must equal tests/unit/golden/metrics.txt (`pytest --update-golden` rewrites it), and
the unmasked scrape must pass `promtool check metrics`. The fleet rules and dashboard are
checked against this golden (tests/unit/test_fleet_prometheus.py).
"""
from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from linkguardd.core import build_core
from linkguardd.dom.reader import FakePageReader
from linkguardd.main import resolve_nics
from linkguardd.monitors import MONITORS
from linkguardd.monitors.dom import DomMonitor
from linkguardd.monitors.phy import PhyMonitor
from linkguardd.monitors.rdma import RdmaMonitor
from linkguardd.monitors.rdma_counters import RdmaCountersMonitor
from linkguardd.monitors.verbs_events import FakeVerbsSource
from linkguardd.settings import Settings
from linkguardd.states import NicState

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))  # the EEPROM images live there
import dom_images

pytestmark = pytest.mark.lab
FIXTURE_SYS = Path(__file__).parents[1] / "fixtures" / "sys"
REPO = Path(__file__).parents[2]
NICS = ("ib0", "ens2np0", "eth4", "eth5")
MODULES = {"ib0": dom_images.qsfp28(), "ens2np0": None, "eth4": dom_images.cmis_flat(),
           "eth5": dom_images.qsfp_dd()}
WAIT_S = 10.0
# Series whose values depend on when the test ran or how fast the machine was.
VARYING = ("linkguard_heartbeat_age_seconds", "linkguard_monitor_duration_seconds",
           "linkguard_nic_last_transition_timestamp_seconds", "linkguard_nic_flap_penalty",
           "linkguard_detection_latency_seconds_bucket", "linkguard_detection_latency_seconds_sum")
MASK = "<varies>"


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def ns() -> Iterator[str]:
    name = "lgme" + secrets.token_hex(4)
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        for nic in NICS:
            ip(name, "link", "add", nic, "type", "veth", "peer", "name", f"p{nic}")
            ip(name, "link", "set", f"p{nic}", "up")
            ip(name, "link", "set", nic, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


def mask(text: str) -> str:
    """The scrape with each varying series' value replaced by MASK."""
    out = []
    for line in text.splitlines():
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        out.append(line.rsplit(" ", 1)[0] + " " + MASK if name in VARYING else line)
    return "\n".join(out) + "\n"


async def wait_until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def scrape_daemon(ns: str, tmp_path: Path) -> str:
    socket_dir = tempfile.mkdtemp(prefix="lgme-", dir="/tmp")  # sun_path: 107 bytes at most
    try:
        return scrape_daemon_in(ns, tmp_path, f"{socket_dir}/verdict.sock")
    finally:
        shutil.rmtree(socket_dir)


def scrape_daemon_in(ns: str, tmp_path: Path, verdict_socket: str) -> str:
    settings = Settings(interfaces=NICS, sysfs_root=str(FIXTURE_SYS), netns=ns,
                        state_dir="", plugin_verdict_socket=verdict_socket,
                        shm_path=str(tmp_path / "shm"), metrics_address="127.0.0.1:0",
                        dom_interval_s=3600.0)  # one module read: its latched flags counted once
    ifnames, backups = resolve_nics(settings)  # pairing from the fixture's PCI topology
    netlink = dict(MONITORS)["netlink"](settings, ifnames)
    monitors = [netlink,
                RdmaMonitor(settings.sysfs_root, ifnames, FakeVerbsSource(),
                            settings.stats_interval_s),
                RdmaCountersMonitor(settings.sysfs_root, ifnames, settings.stats_interval_s),
                PhyMonitor(ifnames, ns, settings.stats_interval_s),
                DomMonitor(ifnames, ns, settings.dom_interval_s,
                           page_reader=FakePageReader(MODULES)),
                dict(MONITORS)["plugin_verdicts"](settings, ifnames)]
    send = [str(REPO / "plugin" / "build" / "lg_verdict_send"), "--socket", verdict_socket,
            "--for-ms", "812", "ib0", "stalled"]

    async def main() -> str:
        core = build_core(settings, ifnames, backups, monitors)
        engine, view = core.engine, core.view
        await engine.start()
        try:
            def sampled() -> bool:  # netlink statistics and RDMA counters of every NIC
                return all("rx_errors" in engine.counters[n] for n in NICS) and \
                    "packet_seq_err" in engine.counters["ib0"]
            await wait_until(sampled, "the first counter samples")
            ip(ns, "link", "set", "pib0", "down")  # the fault: ib0 loses its carrier
            await wait_until(lambda: view.nic("ib0").state == NicState.DOWN, "ib0 DOWN")
            await asyncio.to_thread(subprocess.run, send, check=True, timeout=WAIT_S)
            await wait_until(lambda: bool(view.nic("ib0").plugin_verdicts), "ib0 reported")
            exporter = core.exporters.metrics
            assert exporter.server is not None
            url = f"http://127.0.0.1:{exporter.server.port}/metrics"
            return await asyncio.to_thread(
                lambda: urllib.request.urlopen(url, timeout=WAIT_S).read().decode())
        finally:
            await engine.stop()

    return asyncio.run(main())


def test_metrics_golden_end_to_end(ns: str, tmp_path: Path,
                                   golden: Callable[[str, str], None]) -> None:
    text = scrape_daemon(ns, tmp_path)
    assert 'linkguard_nic_state{device="ib0",linkguard_nic_state="down"} 1.0' in text
    assert re.search(r'linkguard_detection_latency_seconds_count\{monitor="netlink"\} [1-9]',
                     text), "the carrier cut was not measured"
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: Debian's prometheus package (scripts/host-packages.txt)"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60, check=False)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), \
        check.stdout + check.stderr
    golden("metrics.txt", mask(text))
