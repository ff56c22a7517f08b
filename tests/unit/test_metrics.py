"""/metrics: names and units, parsed back with prometheus_client's parser, a golden scrape of a
fake view, `promtool check metrics`, the HTTP server (also while the event loop is stuck), and a
real Prometheus scraping it. The golden of the real daemon is tests/lab/test_metrics_e2e.py."""
from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from fake_daemon import FakeDaemon, default_nics, qsfp28
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families

from linkguardd.core import build_core
from linkguardd.engine import Engine
from linkguardd.exporters import Update
from linkguardd.exporters.metrics import MetricsExporter
from linkguardd.metrics import DETECTION_BUCKETS, Metrics, encode, eof
from linkguardd.metrics_server import MetricsError, MetricsServer, parse_address
from linkguardd.policy import Transition
from linkguardd.settings import Settings
from linkguardd.shm.layout import LG_SHM_COMPAT_VERSION, LG_SHM_VERSION
from linkguardd.states import NicState, Reason

WAIT_S = 30


def scraped_metrics(view: FakeDaemon | None = None) -> Metrics:
    metrics = Metrics(view or FakeDaemon(), version="0.1.0")
    metrics.observe_transition("rail2", NicState.DOWN, Reason.CARRIER_LOST, "netlink", 180e-6)
    metrics.observe_transition("rail2", NicState.DOWN, Reason.CARRIER_LOST, "netlink", 0.0021)
    metrics.observe_transition("rail1", NicState.DEGRADED, Reason.DOM_WARNING, "dom", 0.0004)
    # no detection latency for operators
    metrics.observe_transition("rail0", NicState.DRAINED, Reason.OPERATOR_DRAIN)
    return metrics


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


@pytest.fixture
def scrape() -> str:
    return scraped_metrics().render()[0].decode()


EXPECTED_TYPES = {
    "linkguard_build": "info",  # 0.0.4 text has no info type: parsed back as gauge below
    "linkguard_transitions": "counter",
    "linkguard_transition_reasons": "counter",
    "linkguard_detection_latency_seconds": "histogram",
    "linkguard_heartbeat_age_seconds": "gauge",
    "linkguard_monitor_success": "gauge",
    "linkguard_monitor_errors": "counter",
    "linkguard_monitor_duration_seconds": "gauge",
    "linkguard_nic_state": "gauge",
    "linkguard_nic_carrier": "gauge",
    "linkguard_nic_carrier_changes": "counter",
    "linkguard_nic_errors": "counter",
    "linkguard_nic_receive_errors": "counter",
    "linkguard_nic_transmit_errors": "counter",
    "linkguard_transceiver_flags": "counter",
    "linkguard_nic_last_transition_timestamp_seconds": "gauge",
    "linkguard_nic_flap_penalty": "gauge",
    "linkguard_transceiver_temperature_celsius": "gauge",
    "linkguard_transceiver_supply_voltage_volts": "gauge",
    "linkguard_transceiver_tx_bias_current_amperes": "gauge",
    "linkguard_transceiver_tx_power_watts": "gauge",
    "linkguard_transceiver_rx_power_watts": "gauge",
    "linkguard_transceiver_temperature_threshold_celsius": "gauge",
    "linkguard_transceiver_supply_voltage_threshold_volts": "gauge",
    "linkguard_transceiver_tx_bias_current_threshold_amperes": "gauge",
    "linkguard_transceiver_tx_power_threshold_watts": "gauge",
    "linkguard_transceiver_rx_power_threshold_watts": "gauge",
}


def test_every_family_has_its_name_type_and_unit(scrape: str) -> None:
    found = {f.name: f.type for f in text_string_to_metric_families(scrape)}
    for name, kind in EXPECTED_TYPES.items():
        if kind == "info":
            assert found[name + "_info"] == "gauge"
        else:
            assert found[name] == kind, name
    for name in found:
        assert name.startswith("linkguard_")


def test_nic_state_is_a_state_set_with_one_true_state(scrape: str) -> None:
    state = samples(scrape, "linkguard_nic_state")
    for nic, expected in (("rail0", "up"), ("rail1", "degraded"), ("rail2", "down")):
        values = {dict(k)["linkguard_nic_state"]: v for k, v in state.items()
                  if dict(k)["device"] == nic}
        assert set(values) == {"unknown", "up", "degraded", "down", "drained", "recovering"}
        assert [s for s, v in values.items() if v == 1.0] == [expected]


def test_nic_counters_and_carrier(scrape: str) -> None:
    errors = samples(scrape, "linkguard_nic_errors_total")
    assert errors[(("counter", "rx_crc_errors"), ("device", "rail1"))] == 41
    assert not any(dict(k)["counter"] == "carrier_changes" for k in errors)
    assert samples(scrape, "linkguard_nic_carrier_changes_total")[(("device", "rail1"),)] == 6
    assert samples(scrape, "linkguard_nic_carrier") == {
        (("device", "rail0"),): 1, (("device", "rail1"),): 1, (("device", "rail2"),): 0}
    assert samples(scrape, "linkguard_nic_last_transition_timestamp_seconds")[
        (("device", "rail2"),)] == 1_700_007_190.5


def test_dom_in_base_units_per_lane(scrape: str) -> None:
    rx = samples(scrape, "linkguard_transceiver_rx_power_watts")
    assert rx[(("device", "rail1"), ("lane", "2"))] == pytest.approx(0.00008)
    assert len([k for k in rx if dict(k)["device"] == "rail0"]) == 4
    bias = samples(scrape, "linkguard_transceiver_tx_bias_current_amperes")
    assert bias[(("device", "rail0"), ("lane", "1"))] == pytest.approx(0.00652)
    temp = samples(scrape, "linkguard_transceiver_temperature_celsius")
    # rail2: no module
    assert temp == {(("device", "rail0"),): 41.5, (("device", "rail1"),): 41.5}
    low = samples(scrape, "linkguard_transceiver_rx_power_threshold_watts")
    assert low[(("device", "rail1"), ("level", "low_warning"))] == pytest.approx(0.0001)
    status = samples(scrape, "linkguard_transceiver_status")
    assert status[(("device", "rail2"), ("linkguard_transceiver_status", "no_module"))] == 1


def test_a_module_without_thresholds_exports_none() -> None:
    bare = dataclasses.replace(qsfp28(), thresholds={
        "temperature": {"high_alarm": 0.0, "low_alarm": 0.0, "high_warning": 0.0,
                        "low_warning": 0.0}})
    nics = [dataclasses.replace(default_nics()[0], dom=bare)]
    text = Metrics(FakeDaemon(nics)).render()[0].decode()
    assert not samples(text, "linkguard_transceiver_temperature_threshold_celsius")
    assert samples(text, "linkguard_transceiver_temperature_celsius")


def test_transitions_by_device_and_state(scrape: str) -> None:
    transitions = samples(scrape, "linkguard_transitions_total")
    assert transitions[(("device", "rail2"), ("state", "down"))] == 2
    assert transitions[(("device", "rail0"), ("state", "drained"))] == 1
    # every (NIC, state entered) from the first scrape, so increase() sees the first one
    assert transitions[(("device", "rail1"), ("state", "recovering"))] == 0
    assert len(transitions) == 3 * 5 and not any(dict(k)["state"] == "unknown"
                                                 for k in transitions)
    reasons = samples(scrape, "linkguard_transition_reasons_total")
    assert reasons[(("reason", "carrier_lost"),)] == 2
    assert reasons[(("reason", "holddown_expired"),)] == 0  # present before it happens
    assert (("reason", "none"),) not in reasons


def test_detection_latency_by_monitor(scrape: str) -> None:
    bucket = samples(scrape, "linkguard_detection_latency_seconds_bucket")
    netlink = {dict(k)["le"]: v for k, v in bucket.items() if dict(k)["monitor"] == "netlink"}
    assert netlink["5e-05"] == 0 and netlink["0.00025"] == 1 and netlink["0.0025"] == 2
    assert netlink["+Inf"] == 2 and len(netlink) == len(DETECTION_BUCKETS) + 1
    count = samples(scrape, "linkguard_detection_latency_seconds_count")
    # the operator's drain is not a detection; rdma is there with nothing observed yet
    assert count == {(("monitor", "dom"),): 1, (("monitor", "netlink"),): 2,
                     (("monitor", "rdma"),): 0}


def test_a_latency_on_a_bucket_bound_falls_in_that_bucket() -> None:
    metrics = Metrics()
    metrics.observe_transition("rail0", NicState.DOWN, Reason.CARRIER_LOST, "netlink", 1e-3)
    text = metrics.render()[0].decode()
    buckets = {dict(k)["le"]: v for k, v in
               samples(text, "linkguard_detection_latency_seconds_bucket").items()}
    assert (buckets["0.0005"], buckets["0.001"]) == (0, 1)


def test_the_exporter_counts_what_the_update_published() -> None:
    exporter = MetricsExporter(version="0.1.0")
    down = Transition("rail0", NicState.UP, NicState.DOWN, Reason.CARRIER_LOST, 2, 10_000)
    update = Update([down], 7, True, 0.0, "netlink", fact_ns=9_000)
    update.mark_published(9_000 + 250_000)
    exporter.export(update)
    exporter.export(Update([down], 8, True, 0.0, "netlink", fact_ns=9_000))  # never published
    metrics = exporter.metrics
    assert metrics.transitions[("rail0", "down")] == 2
    hist = metrics.detection["netlink"]
    assert hist.count == 1 and hist.sum == pytest.approx(250e-6)


def test_daemon_health_metrics(scrape: str) -> None:
    assert samples(scrape, "linkguard_heartbeat_age_seconds") == {(): 0.042}
    assert samples(scrape, "linkguard_monitor_success")[(("monitor", "dom"),)] == 0
    assert samples(scrape, "linkguard_monitor_errors_total") == {
        (("monitor", "dom"),): 4, (("monitor", "netlink"),): 0, (("monitor", "rdma"),): 0}
    assert samples(scrape, "linkguard_monitor_duration_seconds")[
        (("monitor", "netlink"),)] == 0.0012
    build = samples(scrape, "linkguard_build_info")
    assert build == {(("shm_compat_version", str(LG_SHM_COMPAT_VERSION)),
                      ("shm_version", str(LG_SHM_VERSION)), ("version", "0.1.0")): 1}


def test_latched_flags_by_flag_and_lane(scrape: str) -> None:
    assert samples(scrape, "linkguard_transceiver_flags_total") == {
        (("device", "rail1"), ("flag", "rx_power_low_warning"), ("lane", "2")): 3,
        (("device", "rail1"), ("flag", "temperature_high_warning"), ("lane", "")): 1}


def test_error_totals_are_apart_from_their_kinds() -> None:
    counters = {"rx_crc_errors": 4, "rx_frame_errors": 1, "rx_errors": 5, "tx_errors": 2,
                "rx_packets": 912_345, "rx_dropped": 9, "symbol_error": 7,
                "carrier_changes": 3}
    nics = [dataclasses.replace(default_nics()[0], counters=counters)]
    text = Metrics(FakeDaemon(nics)).render()[0].decode()
    kinds = {dict(k)["counter"]: v for k, v in samples(text, "linkguard_nic_errors_total").items()}
    assert kinds == {"rx_crc_errors": 4, "rx_frame_errors": 1, "symbol_error": 7}
    assert samples(text, "linkguard_nic_receive_errors_total") == {(("device", "rail0"),): 5}
    assert samples(text, "linkguard_nic_transmit_errors_total") == {(("device", "rail0"),): 2}


def test_registries_are_not_shared() -> None:
    a, b = Metrics(), Metrics()
    a.observe_transition("rail0", NicState.DOWN, Reason.CARRIER_LOST, "netlink", 0.001)
    assert b.reasons["carrier_lost"] == 0
    assert samples(b.render()[0].decode(), "linkguard_transition_reasons_total")[
        (("reason", "carrier_lost"),)] == 0


def test_without_a_view_only_daemon_wide_metrics() -> None:
    names = families(Metrics().render()[0].decode())
    assert "linkguard_transition_reasons" in names and "linkguard_nic_state" not in names


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_promtool_finds_no_problem(scrape: str) -> None:
    out = subprocess.run(["promtool", "check", "metrics"], input=scrape, text=True, check=False,
                         capture_output=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), \
        out.stdout + out.stderr


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text; version=1.0.0"])
def test_the_loop_friendly_render_is_the_same_scrape(accept: str | None) -> None:
    metrics = scraped_metrics()
    encoder, content_type = choose_encoder(accept or "")
    parts = encode(metrics.thread_families(), encoder) + asyncio.run(
        metrics.render_loop_part(encoder)) + eof(content_type)
    assert (parts, content_type) == metrics.render(accept)


def test_openmetrics_when_asked() -> None:
    body, content_type = scraped_metrics().render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    parsed = {f.name: f.type for f in parse_om(body.decode())}
    assert parsed["linkguard_nic_state"] == "stateset"
    assert parsed["linkguard_transceiver"] == "info"


# --- HTTP ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:9846", ("127.0.0.1", 9846)), (":9846", (None, 9846)),
    ("[::1]:9846", ("::1", 9846)), ("localhost:0", ("localhost", 0)),
])
def test_parse_address(address: str, expected: tuple[str | None, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9846", "host:", "host:port", "host:70000"])
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(address)


class ServedMetrics:
    """MetricsServer on 127.0.0.1 (port chosen by the kernel) on its own event loop."""

    def __init__(self, metrics: Metrics) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = MetricsServer(metrics, "127.0.0.1:0")

    def __enter__(self) -> Self:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(WAIT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(WAIT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


@pytest.fixture
def http() -> Iterator[ServedMetrics]:
    with ServedMetrics(scraped_metrics()) as served:
        yield served


def get(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_http_scrape(http: ServedMetrics, scrape: str) -> None:
    status, headers, body = get(http.url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert body.decode() == scrape


def test_http_gzip_and_openmetrics(http: ServedMetrics) -> None:
    status, headers, body = get(http.url + "/metrics", **{
        "Accept-Encoding": "gzip", "Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body).decode().endswith("# EOF\n")


def test_http_other_paths_and_methods(http: ServedMetrics) -> None:
    assert get(http.url + "/")[0] == 200
    assert get(http.url + "/nope")[0] == 404
    assert get(http.url + "/metrics", method="POST")[0] == 405
    status, _, body = get(http.url + "/metrics", method="HEAD")
    assert status == 200 and body == b""


def test_http_survives_a_client_that_sends_nothing(http: ServedMetrics) -> None:
    with socket.create_connection(("127.0.0.1", http.server.port), timeout=WAIT_S):
        pass  # connect and hang up without a request
    assert get(http.url + "/metrics")[0] == 200


def test_a_stuck_event_loop_shows_in_the_heartbeat_age(tmp_path: Path) -> None:
    """The age is computed by the server's thread at scrape time: while the engine's loop is
    blocked the scrape still answers, with the age growing (fake clock) and without the
    families only the loop can read."""
    now = [10**12]
    settings = Settings(interfaces=("rail0",), shm_path=str(tmp_path / "shm"),
                        state_dir="",
                        sysfs_root=str(tmp_path), metrics_address="")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(WAIT_S)

    async def make() -> tuple[Engine, MetricsServer]:
        core = build_core(settings, ["rail0"], {}, [], clock=lambda: now[0])
        engine = core.engine
        await engine.start()
        server = MetricsServer(Metrics(core.view), "127.0.0.1:0", loop_answer_s=0.2)
        await server.start()
        return engine, server

    engine, server = on_loop(make())
    url = f"http://127.0.0.1:{server.port}/metrics"
    release = threading.Event()
    try:
        text = get(url)[2].decode()
        assert samples(text, "linkguard_heartbeat_age_seconds") == {(): 0.0}
        assert samples(text, "linkguard_nic_state")
        loop.call_soon_threadsafe(release.wait, WAIT_S)  # the loop is stuck from here
        now[0] += 7 * 10**9
        status, _, body = get(url)
        stuck = body.decode()
        assert status == 200 and samples(stuck, "linkguard_heartbeat_age_seconds") == {(): 7.0}
        assert "linkguard_build_info" in stuck and not samples(stuck, "linkguard_nic_state")
        release.set()
        assert samples(get(url)[2].decode(), "linkguard_nic_state")
    finally:
        release.set()
        on_loop(server.stop())
        on_loop(engine.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


# --- a real Prometheus --------------------------------------------------------------------------
PROMETHEUS_CONFIG = """
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: linkguard
    static_configs: [{targets: ["127.0.0.1:%d"]}]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian prometheus package")
def test_prometheus_scrapes_and_answers_a_state_query(http: ServedMetrics) -> None:
    workdir = tempfile.mkdtemp(prefix="lg-prom-")
    with open(os.path.join(workdir, "prometheus.yml"), "w") as f:
        f.write(PROMETHEUS_CONFIG % http.server.port)
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={workdir}/prometheus.yml",
         f"--storage.tsdb.path={workdir}/data", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    query = urllib.parse.quote('linkguard_nic_state{device="rail2",linkguard_nic_state="down"}')
    try:
        result = None
        for _ in range(WAIT_S * 4):
            try:
                status, _, body = get(f"http://127.0.0.1:{port}/api/v1/query?query={query}")
                result = json.loads(body)["data"]["result"] if status == 200 else None
            except (urllib.error.URLError, ConnectionError):
                result = None
            if result:
                break
            threading.Event().wait(0.25)
        assert result and result[0]["value"][1] == "1", result
    finally:
        proc.terminate()
        proc.wait(WAIT_S)
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_taken_port_is_a_clear_error(http: ServedMetrics) -> None:
    second = MetricsServer(Metrics(), f"127.0.0.1:{http.server.port}")
    with pytest.raises(MetricsError, match=f"127.0.0.1:{http.server.port}.*metrics_address"):
        asyncio.run(second.start())
