"""RdmaCountersMonitor against the committed fake sysfs tree (tests/fixtures/sys, README there):
PMA counters and mlx5 hw_counters in the kernel's formats, devices that lack some or all of
them, hostile file contents, and the monitor's samples through the real policy."""
from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkguardd.facts import CountersFact, Fact, LinkFact
from linkguardd.monitors.rdma_counters import (
    HW_COUNTERS,
    PMA_COUNTERS,
    RdmaCountersMonitor,
    parse_counter,
    read_all,
    read_counters,
)
from linkguardd.policy import Policy, PolicyConfig
from linkguardd.states import NicState, Reason

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sys"


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


def port_dir(root: Path, dev: str, port: int = 1) -> Path:
    return root / "class/infiniband" / dev / "ports" / str(port)


def poll(mon: RdmaCountersMonitor) -> list[Fact]:
    """One poll of a monitor that is not running: the facts it reports."""
    facts: list[Fact] = []
    mon._sink = facts.append
    asyncio.run(mon.poll_once())
    return facts


# --- formats -------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("0\n", 0), ("12\n", 12), ("18446744073709551615\n", 2**64 - 1), ("N/A (no PMA)\n", None),
])
def test_parse_counter(text: str, expected: int | None) -> None:
    assert parse_counter(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "twelve", "-1", "+1", "1_000", "1.5", "N/A",
                                  "0x10", "１２", "18446744073709551616", "9" * 400])
def test_parse_counter_rejects_what_is_not_a_u64(text: str) -> None:
    with pytest.raises(ValueError):
        parse_counter(text)


# --- the fixture tree ----------------------------------------------------------------------

def test_every_port_reads_the_counters_its_device_has() -> None:
    got = {(dev, port): (netdev, values, errors)
           for dev, port, netdev, values, errors in read_all(FIXTURE)}
    netdev, ib0, errors = got[("mlx5_0", 1)]
    assert netdev == "ib0" and errors == []
    assert ib0 == {
        "symbol_error": 12, "link_error_recovery": 0, "link_downed": 1, "port_rcv_errors": 3,
        "port_xmit_discards": 0, "local_link_integrity_errors": 0,
        "excessive_buffer_overrun_errors": 0, "out_of_sequence": 5, "packet_seq_err": 2,
        "duplicate_request": 0, "local_ack_timeout_err": 1, "rnr_nak_retry_err": 0}
    _, roce, _ = got[("mlx5_1", 1)]
    assert "out_of_sequence" not in roce  # a device without the out_of_seq_cnt capability
    assert "excessive_buffer_overrun_errors" not in roce  # "N/A (no PMA)"
    assert roce["rnr_nak_retry_err"] == 7 and roce["link_downed"] == 4
    _, mlx4, _ = got[("mlx4_0", 2)]
    assert set(mlx4) == set(PMA_COUNTERS)  # no hw_counters/ at all
    assert got[("rxe0", 1)][1:] == ({}, [])  # rxe: neither PMA nor mlx5 counters: no data
    assert all(not errors for _n, _v, errors in got.values())


def test_the_monitor_reports_watched_ports_only_and_skips_ports_without_counters() -> None:
    mon = RdmaCountersMonitor(FIXTURE, interfaces=["ib0", "mlx4_0", "eth0"])
    facts = poll(mon)
    assert all(isinstance(f, CountersFact) and f.source == "rdma" for f in facts)
    assert sorted(f.ifname for f in facts) == ["eth4", "eth5", "ib0"]  # rxe0 (eth0) has none
    assert mon.health.success and mon.health.last_error == ""


def test_no_infiniband_class_is_no_data_and_success(tmp_path: Path) -> None:
    mon = RdmaCountersMonitor(tmp_path)
    assert poll(mon) == []
    assert mon.health.success


def test_the_running_monitor_samples_every_poll(sysfs: Path) -> None:
    mon = RdmaCountersMonitor(sysfs, interfaces=["ib0"], poll_interval_s=0.01)
    seen: list[Fact] = []

    async def main() -> None:
        await mon.start(seen.append)
        assert len(seen) == 1  # the initial poll, before start() returns
        (port_dir(sysfs, "mlx5_0") / "hw_counters/packet_seq_err").write_text("9\n")
        for _ in range(500):
            if any(isinstance(f, CountersFact) and f.counters["packet_seq_err"] == 9
                   for f in seen):
                break
            await asyncio.sleep(0.01)
        await mon.stop()

    asyncio.run(main())
    assert isinstance(seen[-1], CountersFact) and seen[-1].counters["packet_seq_err"] == 9


# --- hostile content -----------------------------------------------------------------------

def test_bad_content_is_an_error_naming_the_file_and_the_rest_is_read(sysfs: Path) -> None:
    pdir = port_dir(sysfs, "mlx5_0")
    (pdir / "counters/symbol_error").write_text("abc\n")
    (pdir / "hw_counters/out_of_sequence").write_text("99999999999999999999999\n")
    (pdir / "hw_counters/packet_seq_err").write_bytes(b"\xff\xfe\n")
    mon = RdmaCountersMonitor(sysfs, interfaces=["ib0"])
    [fact] = poll(mon)
    assert isinstance(fact, CountersFact)
    assert not {"symbol_error", "out_of_sequence", "packet_seq_err"} & set(fact.counters)
    assert fact.counters["port_rcv_errors"] == 3  # the others are still read
    assert not mon.health.success
    assert f"{pdir}/counters/symbol_error: unparsable counter" in mon.health.last_error
    assert "out_of_sequence: unparsable counter (larger than a u64" in mon.health.last_error
    assert mon.health.errors == 1


def test_a_counter_that_is_a_directory_or_unreadable_is_skipped(sysfs: Path) -> None:
    pdir = port_dir(sysfs, "mlx5_0")
    (pdir / "counters/symbol_error").unlink()
    (pdir / "counters/symbol_error").mkdir()  # open() fails: as a missing counter
    errors: list[str] = []
    values = read_counters(pdir, errors)
    assert "symbol_error" not in values and values["link_downed"] == 1 and errors == []


def test_a_saturated_pma_counter_is_said_once(sysfs: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="linkguardd.monitors.rdma_counters")
    (port_dir(sysfs, "mlx5_0") / "counters/symbol_error").write_text("65535\n")
    mon = RdmaCountersMonitor(sysfs, interfaces=["ib0"])
    poll(mon)
    poll(mon)
    said = [r.getMessage() for r in caplog.records if "at its maximum" in r.getMessage()]
    assert said == [("rdma_counters: mlx5_0/1 counters/symbol_error is at its maximum (65535): "
                     "new errors no longer show; clear it with `perfquery -R`")]
    assert mon.health.success  # a saturated counter was read fine


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=80) | st.integers(min_value=0, max_value=2**70).map(
    lambda n: f"{n}\n".encode()) | st.text(max_size=30).map(str.encode),
       name=st.sampled_from(list(PMA_COUNTERS) + list(HW_COUNTERS)))
def test_any_file_content_is_a_value_or_an_error_naming_the_file(raw: bytes, name: str) -> None:
    sub = "counters" if name in PMA_COUNTERS else "hw_counters"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / sub / name
        path.parent.mkdir()
        path.write_bytes(raw)
        errors: list[str] = []
        values = read_counters(Path(tmp), errors)
    if name in values:
        assert values[name] == int(raw.decode().strip()) <= 2**64 - 1 and errors == []
    elif raw.strip() != b"N/A (no PMA)":
        assert len(errors) == 1 and errors[0].startswith(f"{path}: unparsable counter")


# --- through the policy --------------------------------------------------------------------

def judged(sysfs: Path, rewrite: dict[str, str | None]) -> tuple[Policy, list[object]]:
    """Two polls of ib0's port through a real Policy, `rewrite` applied to files in between
    (None: the file goes away)."""
    policy = Policy(PolicyConfig(error_rate_min_interval_ms=0), ["ib0"])
    policy.apply(LinkFact("ib0", 0, admin_up=True, carrier=True, operstate="UP"), 0)
    mon = RdmaCountersMonitor(sysfs, interfaces=["ib0"])
    out: list[object] = []
    for fact in poll(mon):
        out += policy.apply(fact, 1)
    for rel, text in rewrite.items():
        path = port_dir(sysfs, "mlx5_0") / rel
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    for fact in poll(mon):
        out += policy.apply(fact, 2)
    return policy, out


def test_a_climbing_counter_makes_the_nic_degraded_naming_it(sysfs: Path) -> None:
    policy, out = judged(sysfs, {"hw_counters/local_ack_timeout_err": "5000\n"})
    rec = policy.records["ib0"]
    assert (rec.state, rec.reason) == (NicState.DEGRADED, Reason.ERROR_RATE)
    assert rec.detail.startswith("local_ack_timeout_err ") and rec.detail.endswith("/s > 10/s")
    assert len(out) == 1


def test_a_reset_and_missing_counters_are_no_alarm(sysfs: Path) -> None:
    policy, out = judged(sysfs, {"counters/symbol_error": "0\n",  # perfquery -R
                                 "hw_counters/out_of_sequence": "0\n",
                                 "hw_counters/packet_seq_err": None})  # gone: fine too
    assert policy.records["ib0"].state == NicState.UP and out == []
    assert ("rdma", "packet_seq_err") not in policy.records["ib0"].last_rates
