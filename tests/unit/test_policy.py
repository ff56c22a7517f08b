"""The health policy from tables: (time in ms, fact) steps -> expected (state, reason) after each.

The harness ticks the policy at each step's time before applying the step's fact, as the engine
does at next_deadline_ns(); so a row "(2300, TICK, UP, ...)" says the hold-down ended by 2300 ms.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from linkguardd.facts import (
    CountersFact,
    DomFact,
    IbPortFact,
    LinkFact,
    LinkRenamedFact,
    OperatorFact,
    VerbsEventFact,
)
from linkguardd.policy import Policy, PolicyConfig, Transition
from linkguardd.states import NicState as S
from linkguardd.states import Reason as R

MS = 1_000_000
IF = "rail0"
TICK, SETTLE = "tick", "settle"
Step = tuple[int, Any, S, R]


def link(**kw: Any) -> Callable[[int], LinkFact]:
    fields = {"admin_up": True, "carrier": True, "operstate": "UP", **kw}
    return lambda at: LinkFact(IF, at, **fields)


UP = link()
LOST = link(carrier=False, operstate="DOWN")  # what rtnetlink reports when the far end dies
ADMIN_DOWN = link(admin_up=False, carrier=False, operstate="DOWN")
GONE = link(present=False)


def ib(state: str, present: bool = True) -> Callable[[int], IbPortFact]:
    return lambda at: IbPortFact("mlx5_0", 1, at, IF, state, "5: LinkUp", present=present)


def verbs(event: str) -> Callable[[int], VerbsEventFact]:
    return lambda at: VerbsEventFact("mlx5_0", event, at)  # no port, no netdev: as pyverbs says


def dom(warnings: tuple[str, ...] = (), alarms: tuple[str, ...] = (),
        status: str = "ok") -> Callable[[int], DomFact]:
    return lambda at: DomFact(IF, at, status, warnings, alarms)


def counters(source: str = "netlink", **values: int) -> Callable[[int], CountersFact]:
    return lambda at: CountersFact(IF, at, values, source)


def op(action: str) -> Callable[[int], OperatorFact]:
    return lambda at: OperatorFact(IF, action, at, "swap optic")


def run(steps: list[Step], config: PolicyConfig | None = None) -> tuple[Policy, list[Transition]]:
    policy = Policy(config, [IF])
    seen: list[Transition] = []
    for row, (t_ms, event, state, reason) in enumerate(steps):
        now = t_ms * MS
        seen += policy.tick(now)
        if event == SETTLE:
            seen += policy.settle(now)
        elif event != TICK:
            seen += policy.apply(event(now), now)
        rec = policy.records[IF]
        assert (rec.state, rec.reason) == (state, reason), f"row {row} at {t_ms} ms: {rec.detail}"
    return policy, seen


def flaps(start_ms: int, count: int, period_ms: int, up_after_ms: int) -> list[Step]:
    """`count` flaps: carrier lost at start + k*period, back up_after_ms later."""
    out: list[Step] = []
    for k in range(count):
        t = start_ms + k * period_ms
        out += [(t, LOST, S.DOWN, R.CARRIER_LOST),
                (t + up_after_ms, UP, S.RECOVERING, R.LINK_RESTORED)]
    return out


SCENARIOS: dict[str, tuple[list[Step], PolicyConfig | None]] = {
    # First sight of a healthy link: straight to UP (a daemon restart must not move traffic).
    "startup healthy": ([(0, UP, S.UP, R.STARTUP)], None),
    "operstate UNKNOWN with carrier is up": (
        [(0, link(operstate="UNKNOWN"), S.UP, R.STARTUP)], None),
    "startup faulty, then hold-down": ([
        (0, LOST, S.DOWN, R.CARRIER_LOST),  # first sight: no flap (nothing was up)
        (10, UP, S.RECOVERING, R.LINK_RESTORED),
        (2009, TICK, S.RECOVERING, R.LINK_RESTORED),  # hold-down 2000 ms from 10 ms
        (2010, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "absent at settle, picked up when it appears": ([
        (0, SETTLE, S.DOWN, R.ABSENT),
        (5000, UP, S.RECOVERING, R.LINK_RESTORED),
        (7000, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "absent as reported by the monitor": ([(0, GONE, S.DOWN, R.ABSENT)], None),
    "unplugged while running": ([(0, UP, S.UP, R.STARTUP), (100, GONE, S.DOWN, R.ABSENT)], None),
    "carrier lost, restored, hold-down": ([
        (0, UP, S.UP, R.STARTUP),
        (100, LOST, S.DOWN, R.CARRIER_LOST),
        (300, UP, S.RECOVERING, R.LINK_RESTORED),
        (2299, TICK, S.RECOVERING, R.LINK_RESTORED),
        (2300, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    # Second flap 900 ms after the first: 1000 * 2^(-900/15000) + 1000 = 1959.3 <= 2000, so no
    # suppression; the hold-down restarts from the second restore (1500 + 2000 = 3500 ms).
    "bounce during hold-down restarts it": ([
        (0, UP, S.UP, R.STARTUP), (100, LOST, S.DOWN, R.CARRIER_LOST),
        (200, UP, S.RECOVERING, R.LINK_RESTORED), (1000, LOST, S.DOWN, R.CARRIER_LOST),
        (1500, UP, S.RECOVERING, R.LINK_RESTORED), (2200, TICK, S.RECOVERING, R.LINK_RESTORED),
        (3499, TICK, S.RECOVERING, R.LINK_RESTORED), (3500, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "admin down": ([(0, UP, S.UP, R.STARTUP), (5, ADMIN_DOWN, S.DOWN, R.ADMIN_DOWN)], None),
    "operstate down with carrier": ([(0, link(operstate="DORMANT"), S.DOWN, R.OPER_DOWN)], None),
    "IB port not ACTIVE": ([
        (0, UP, S.UP, R.STARTUP), (1, ib("4: ACTIVE"), S.UP, R.STARTUP),
        (100, ib("1: DOWN"), S.DOWN, R.IB_PORT_NOT_ACTIVE),
        (200, ib("INIT"), S.DOWN, R.IB_PORT_NOT_ACTIVE),
        (300, ib("ACTIVE"), S.RECOVERING, R.LINK_RESTORED),
        (2300, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "verbs PORT_ERR, then PORT_ACTIVE": ([
        (0, UP, S.UP, R.STARTUP), (1, ib("ACTIVE"), S.UP, R.STARTUP),  # learns mlx5_0/1 = rail0
        (100, verbs("PORT_ERR"), S.DOWN, R.VERBS_PORT_ERR),
        (200, verbs("PORT_ACTIVE"), S.RECOVERING, R.LINK_RESTORED),
        (2200, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "verbs PORT_ERR cleared by a later sysfs ACTIVE": ([
        (0, UP, S.UP, R.STARTUP), (1, ib("ACTIVE"), S.UP, R.STARTUP),
        (100, verbs("PORT_ERR"), S.DOWN, R.VERBS_PORT_ERR),
        (150, ib("ACTIVE"), S.RECOVERING, R.LINK_RESTORED)], None),
    # DEVICE_FATAL: sysfs may still say ACTIVE; only unregistration (or PORT_ACTIVE) clears it.
    "verbs DEVICE_FATAL until the device re-registers": ([
        (0, UP, S.UP, R.STARTUP), (1, ib("ACTIVE"), S.UP, R.STARTUP),
        (100, verbs("DEVICE_FATAL"), S.DOWN, R.VERBS_DEVICE_FATAL),
        (200, ib("ACTIVE"), S.DOWN, R.VERBS_DEVICE_FATAL),
        (250, verbs("PORT_ERR"), S.DOWN, R.VERBS_DEVICE_FATAL),
        (300, ib("ACTIVE", present=False), S.RECOVERING, R.LINK_RESTORED),
        (400, ib("ACTIVE"), S.RECOVERING, R.LINK_RESTORED),
        (2300, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),  # healthy since 300 ms
    "DOM warning degrades, clears via hold-down": ([
        (0, UP, S.UP, R.STARTUP),
        (100, dom(warnings=("rx_power_low[2]",)), S.DEGRADED, R.DOM_WARNING),
        (200, dom(alarms=("rx_power_low[2]",)), S.DEGRADED, R.DOM_WARNING),  # reason = entry
        (300, dom(), S.RECOVERING, R.CONDITION_CLEARED),
        (2299, TICK, S.RECOVERING, R.CONDITION_CLEARED),
        (2300, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "DOM alarm": ([(0, UP, S.UP, R.STARTUP),
                   (1, dom(alarms=("temperature_high",)), S.DEGRADED, R.DOM_ALARM)], None),
    "DOM no module is no data": ([(0, UP, S.UP, R.STARTUP),
                                  (1, dom(status="no_module"), S.UP, R.STARTUP)], None),
    "DOM warnings ignored when configured off": ([
        (0, UP, S.UP, R.STARTUP), (1, dom(warnings=("tx_bias_high[0]",)), S.UP, R.STARTUP),
        (2, dom(alarms=("tx_bias_high[0]",)), S.DEGRADED, R.DOM_ALARM)],
        PolicyConfig(dom_degrade_on_warning=False)),
    "DOM warning at first sight": ([(0, dom(warnings=("x",)), S.UNKNOWN, R.STARTUP),
                                    (1, UP, S.DEGRADED, R.DOM_WARNING)], None),
    # rx_crc_errors limit 10/s: (10-0)/1 s = 10/s is not above it; (40-10)/1 s = 30/s is. The
    # NIC is DEGRADED until the rate stayed clean for the clean window (60 s from the last excess
    # at 2000 ms), then RECOVERING for the hold-down.
    "error rate from two samples": ([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=10), S.UP, R.STARTUP),
        (2000, counters(rx_crc_errors=40), S.DEGRADED, R.ERROR_RATE),
        (2200, counters(rx_crc_errors=41), S.DEGRADED, R.ERROR_RATE),  # < 500 ms: kept waiting
        (3000, counters(rx_crc_errors=45), S.DEGRADED, R.ERROR_RATE),  # 5/s: clean, but latched
        (61999, TICK, S.DEGRADED, R.ERROR_RATE),
        (62000, TICK, S.RECOVERING, R.CONDITION_CLEARED),  # a clean minute since 2000 ms
        (64000, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "a burst inside the clean window starts it again": ([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=30), S.DEGRADED, R.ERROR_RATE),
        (2000, counters(rx_crc_errors=30), S.DEGRADED, R.ERROR_RATE),
        (50000, counters(rx_crc_errors=30), S.DEGRADED, R.ERROR_RATE),
        (51000, counters(rx_crc_errors=100), S.DEGRADED, R.ERROR_RATE),  # 70/s: again
        (61000, TICK, S.DEGRADED, R.ERROR_RATE),  # the first burst's window has passed
        (111000, TICK, S.RECOVERING, R.CONDITION_CLEARED)], None),
    "clean window configured": ([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=30), S.DEGRADED, R.ERROR_RATE),
        (6000, TICK, S.RECOVERING, R.CONDITION_CLEARED)],
        PolicyConfig(error_rate_clean_window_ms=5000)),
    "error rate of an RDMA counter": ([
        (0, UP, S.UP, R.STARTUP), (0, counters("rdma", symbol_error=100), S.UP, R.STARTUP),
        (500, counters("rdma", symbol_error=120), S.DEGRADED, R.ERROR_RATE)], None),  # 40/s
    "error rate of an RDMA transport counter": ([
        (0, UP, S.UP, R.STARTUP), (0, counters("rdma", packet_seq_err=7), S.UP, R.STARTUP),
        (1000, counters("rdma", packet_seq_err=17), S.UP, R.STARTUP),  # 10/s: not above
        (2000, counters("rdma", packet_seq_err=40), S.DEGRADED, R.ERROR_RATE)], None),
    "uncorrectable FEC blocks degrade; corrected ones are only watched": ([
        (0, UP, S.UP, R.STARTUP),
        (0, counters("phy", fec_corrected_blocks=0, fec_uncorrectable_blocks=0), S.UP, R.STARTUP),
        (1000, counters("phy", fec_corrected_blocks=10**9, fec_uncorrectable_blocks=1),
         S.UP, R.STARTUP),
        (2000, counters("phy", fec_corrected_blocks=2 * 10**9, fec_uncorrectable_blocks=5),
         S.DEGRADED, R.ERROR_RATE)], None),
    "PCS symbol errors degrade like IB symbol errors": ([
        (0, UP, S.UP, R.STARTUP),
        (0, counters("phy", symbol_error_during_carrier=0), S.UP, R.STARTUP),
        (1000, counters("phy", symbol_error_during_carrier=11), S.DEGRADED, R.ERROR_RATE)], None),
    "RNR NAKs are watched, never judged": ([
        (0, UP, S.UP, R.STARTUP), (0, counters("rdma", rnr_nak_retry_err=0), S.UP, R.STARTUP),
        (1000, counters("rdma", rnr_nak_retry_err=10**12), S.UP, R.STARTUP)], None),
    # A reset or a wrap reads lower than before: a new baseline, never a rate (no false alarm)
    # and no end of a DEGRADED verdict either.
    "counter reset is a new baseline": ([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=1000), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=1100), S.DEGRADED, R.ERROR_RATE),
        (2000, counters(rx_crc_errors=3), S.DEGRADED, R.ERROR_RATE),
        (3000, counters(rx_crc_errors=5), S.DEGRADED, R.ERROR_RATE),
        (61000, TICK, S.RECOVERING, R.CONDITION_CLEARED)], None),
    "counter reset on a healthy NIC is no alarm": ([
        (0, UP, S.UP, R.STARTUP), (0, counters("rdma", symbol_error=65000), S.UP, R.STARTUP),
        (1000, counters("rdma", symbol_error=0), S.UP, R.STARTUP),
        (2000, counters("rdma", symbol_error=3), S.UP, R.STARTUP)], None),
    "a 32-bit counter wrapping is no alarm": ([
        (0, UP, S.UP, R.STARTUP),
        (0, counters("rdma", out_of_sequence=2**32 - 5), S.UP, R.STARTUP),
        (1000, counters("rdma", out_of_sequence=20), S.UP, R.STARTUP),
        (2000, counters("rdma", out_of_sequence=40), S.UP, R.STARTUP)], None),
    "a counter first seen high is no alarm": ([
        (0, UP, S.UP, R.STARTUP), (0, counters("rdma", symbol_error=60000), S.UP, R.STARTUP),
        (1000, counters("rdma", symbol_error=60002), S.UP, R.STARTUP)], None),
    "unconfigured counters are ignored": ([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_missed_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_missed_errors=10**6), S.UP, R.STARTUP)], None),
    "degraded then down is a flap": ([
        (0, UP, S.UP, R.STARTUP), (1, dom(warnings=("x",)), S.DEGRADED, R.DOM_WARNING),
        (2, LOST, S.DOWN, R.CARRIER_LOST), (3, UP, S.DEGRADED, R.DOM_WARNING)], None),
    "drain overrides a DOWN link; undrain waits a hold-down": ([
        (0, UP, S.UP, R.STARTUP), (100, LOST, S.DOWN, R.CARRIER_LOST),
        (200, op("drain"), S.DRAINED, R.OPERATOR_DRAIN),
        (300, UP, S.DRAINED, R.OPERATOR_DRAIN), (400, LOST, S.DRAINED, R.OPERATOR_DRAIN),
        (500, UP, S.DRAINED, R.OPERATOR_DRAIN),
        (10000, op("undrain"), S.RECOVERING, R.OPERATOR_UNDRAIN),  # link stable since 500 ms,
        (11999, TICK, S.RECOVERING, R.OPERATOR_UNDRAIN),  # but the hold-down counts from undrain
        (12000, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "undrain of a dead link is DOWN": ([
        (0, op("drain"), S.DRAINED, R.OPERATOR_DRAIN), (100, LOST, S.DRAINED, R.OPERATOR_DRAIN),
        (200, op("undrain"), S.DOWN, R.CARRIER_LOST)], None),
    "drain an UP link": ([
        (0, UP, S.UP, R.STARTUP), (1, op("drain"), S.DRAINED, R.OPERATOR_DRAIN),
        (2, op("drain"), S.DRAINED, R.OPERATOR_DRAIN),
        (3, op("undrain"), S.RECOVERING, R.OPERATOR_UNDRAIN),
        (2003, TICK, S.UP, R.HOLDDOWN_EXPIRED)], None),
    "zero hold-down goes straight back": ([
        (0, UP, S.UP, R.STARTUP), (1, LOST, S.DOWN, R.CARRIER_LOST),
        (2, UP, S.UP, R.HOLDDOWN_EXPIRED)], PolicyConfig(hold_down_ms=0)),
    # Two flaps 100 ms apart: 1000 * 2^(-100/15000) + 1000 = 1995.4, not above 2000: only the
    # hold-down, from the second restore (1150 + 2000 = 3150 ms).
    "two quick flaps cost only the hold-down": (
        [(0, UP, S.UP, R.STARTUP), *flaps(1000, 2, 100, 50),
         (3149, TICK, S.RECOVERING, R.LINK_RESTORED), (3150, TICK, S.UP, R.HOLDDOWN_EXPIRED)],
        None),
    # Three flaps at 1000/1100/1200 ms: P = 1000 * (1 + r + r^2), r = 2^(-100/15000) = 0.99539,
    # = 2986.19 > 2000: suppressed until 1200 + 15000 * log2(2986.19 / 750) = 1200 + 29900.15 ms.
    "three quick flaps suppress for ~30 s": (
        [(0, UP, S.UP, R.STARTUP), *flaps(1000, 3, 100, 50),
         (3250, TICK, S.RECOVERING, R.LINK_RESTORED),  # hold-down alone would end here
         (31100, TICK, S.RECOVERING, R.LINK_RESTORED), (31101, TICK, S.UP, R.HOLDDOWN_EXPIRED)],
        None),
    # Ten flaps every 100 ms from 1000 ms: P = 1000 * (1 - r^10) / (1 - r) = 1000 * 9.79507
    # = 9795.07 at 1900 ms; decays to 750 after 15000 * log2(9795.07 / 750) = 55606.39 ms,
    # so the NIC stays out of UP until 1900 + 55606.39 = 57506.39 ms.
    "ten flaps stay out of UP until the penalty decays": (
        [(0, UP, S.UP, R.STARTUP), *flaps(1000, 10, 100, 50),
         (30000, TICK, S.RECOVERING, R.LINK_RESTORED),
         (57506, TICK, S.RECOVERING, R.LINK_RESTORED), (57507, TICK, S.UP, R.HOLDDOWN_EXPIRED)],
        None),
    # Twenty flaps at one instant: 20000 capped at 12000 = 750 * 2^4, so exactly 4 half-lives.
    "penalty cap bounds suppression to 60 s": (
        [(0, UP, S.UP, R.STARTUP), *flaps(1000, 20, 0, 0),
         (60999, TICK, S.RECOVERING, R.LINK_RESTORED), (61000, TICK, S.UP, R.HOLDDOWN_EXPIRED)],
        None),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario(name: str) -> None:
    steps, config = SCENARIOS[name]
    run(steps, config)


def test_epoch_increments_on_every_state_change_only() -> None:
    policy, seen = run([
        (0, UP, S.UP, R.STARTUP), (1, UP, S.UP, R.STARTUP),  # same state: no transition
        (2, LOST, S.DOWN, R.CARRIER_LOST), (3, ADMIN_DOWN, S.DOWN, R.CARRIER_LOST),
        (4, UP, S.RECOVERING, R.LINK_RESTORED), (2004, TICK, S.UP, R.HOLDDOWN_EXPIRED)])
    assert [t.epoch for t in seen] == [1, 2, 3, 4]
    assert [(t.old, t.new) for t in seen] == [
        (S.UNKNOWN, S.UP), (S.UP, S.DOWN), (S.DOWN, S.RECOVERING), (S.RECOVERING, S.UP)]
    assert [t.at_ns for t in seen] == [0, 2 * MS, 4 * MS, 2004 * MS]
    rec = policy.records[IF]
    assert (rec.epoch, rec.since_ns, rec.flaps) == (4, 2004 * MS, 1)


def test_next_deadline_is_when_tick_changes_something() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP), (100, LOST, S.DOWN, R.CARRIER_LOST)])
    assert policy.next_deadline_ns() is None  # DOWN: only a fact can change it
    policy.apply(UP(300 * MS), 300 * MS)
    assert policy.next_deadline_ns() == 2300 * MS
    assert policy.tick(2300 * MS - 1) == []
    assert [t.new for t in policy.tick(2300 * MS)] == [S.UP]
    assert policy.next_deadline_ns() is None


def test_damping_deadline_and_penalty_decay() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP), *flaps(1000, 20, 0, 0)])
    assert policy.penalty(IF, 1000 * MS) == pytest.approx(12000)
    assert policy.penalty(IF, 16000 * MS) == pytest.approx(6000)  # one half-life later
    assert policy.next_deadline_ns() == 61000 * MS
    assert "flap damping" in policy.records[IF].detail


def test_config_reload_keeps_state_of_unchanged_nics() -> None:
    policy = Policy(None, ["rail0", "rail1"])
    for name in ("rail0", "rail1"):
        policy.apply(replace(UP(0), ifname=name), 0)
    policy.apply(LOST(100 * MS), 100 * MS)
    policy.apply(UP(200 * MS), 200 * MS)  # rail0 RECOVERING, hold-down until 2200 ms
    policy.apply(replace(UP(250 * MS), ifname="rail2"), 250 * MS)  # not configured yet
    before = replace(policy.records["rail0"])
    out = policy.reconfigure(["rail0", "rail2"], PolicyConfig(hold_down_ms=500), 800 * MS)
    assert sorted(policy.records) == ["rail0", "rail2"]
    assert [(t.ifname, t.new, t.reason) for t in out] == [
        ("rail0", S.UP, R.HOLDDOWN_EXPIRED),  # new hold-down 500 ms from 200 ms has passed
        ("rail2", S.UP, R.STARTUP)]  # its link was seen while unconfigured
    after = policy.records["rail0"]
    assert after.epoch == before.epoch + 1 and after.flaps == before.flaps == 1
    assert after.penalty == before.penalty


def test_reload_re_derives_suppression_with_new_half_life() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP), *flaps(1000, 20, 0, 0)])
    policy.reconfigure([IF], PolicyConfig(flap_half_life_ms=1000), 2000 * MS)
    assert policy.next_deadline_ns() == 5000 * MS  # 12000 -> 750 in 4 half-lives of 1 s


def test_rename_moves_the_link() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP)])
    policy.apply(LinkRenamedFact(IF, "eth7", 3, 10 * MS), 10 * MS)
    assert (policy.records[IF].state, policy.records[IF].reason) == (S.DOWN, R.ABSENT)
    out = policy.apply(LinkRenamedFact("eth7", IF, 3, 20 * MS), 20 * MS)
    assert [(t.new, t.reason) for t in out] == [(S.RECOVERING, R.LINK_RESTORED)]


def test_stale_link_fact_is_ignored() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP), (100, LOST, S.DOWN, R.CARRIER_LOST)])
    assert policy.apply(UP(50 * MS), 200 * MS) == []  # observed before the loss
    assert policy.records[IF].state == S.DOWN


def test_verbs_event_with_netdev_and_other_events() -> None:
    policy, _ = run([(0, UP, S.UP, R.STARTUP)])
    assert policy.apply(VerbsEventFact("mlx5_9", "LID_CHANGE", 1, netdev=IF), 1) == []
    out = policy.apply(VerbsEventFact("mlx5_9", "PORT_ERR", 2, netdev=IF), 2)
    assert [(t.new, t.reason) for t in out] == [(S.DOWN, R.VERBS_PORT_ERR)]
    assert policy.apply(VerbsEventFact("mlx5_1", "PORT_ERR", 3), 3) == []  # unmapped device


def test_facts_of_unconfigured_nics_and_bad_operator_requests() -> None:
    policy = Policy(None, [IF])
    assert policy.apply(LinkFact("eth9", 0, carrier=False), 0) == []
    assert policy.apply(OperatorFact("eth9", "drain", 0), 0) == []
    assert policy.apply(OperatorFact(IF, "reboot", 0), 0) == []
    with pytest.raises(KeyError):
        policy.drain("eth9", 0)
    assert policy.undrain(IF, 0) == []  # not drained: nothing to do


def test_transition_detail_names_the_cause() -> None:
    _, seen = run([(0, UP, S.UP, R.STARTUP), *flaps(1000, 3, 100, 50)])
    assert "carrier 0" in seen[1].detail and "flap 1" in seen[1].detail
    assert "suppressed" in seen[-2].detail  # the third flap


def test_error_rate_detail_and_rates_name_the_counter() -> None:
    policy, seen = run([
        (0, UP, S.UP, R.STARTUP),
        (0, counters("rdma", symbol_error=0, port_rcv_errors=0), S.UP, R.STARTUP),
        (2000, counters("rdma", symbol_error=50, port_rcv_errors=4), S.DEGRADED, R.ERROR_RATE)])
    assert seen[-1].detail == "symbol_error 25.0/s > 10/s"
    rec = policy.records[IF]
    assert rec.last_rates == {("rdma", "symbol_error"): 25.0, ("rdma", "port_rcv_errors"): 2.0}
    assert policy.next_deadline_ns() == 62000 * MS  # the end of the clean window


def test_an_expired_window_on_a_down_nic_sets_no_deadline() -> None:
    """The window may end while the link is down: no timer left pointing at the past."""
    policy, _ = run([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=100), S.DEGRADED, R.ERROR_RATE),
        (2000, LOST, S.DOWN, R.CARRIER_LOST), (70000, TICK, S.DOWN, R.CARRIER_LOST)])
    assert policy.records[IF].error_rates == {}
    assert policy.next_deadline_ns() is None


def test_reload_judges_error_rates_by_the_new_limits() -> None:
    policy, _ = run([
        (0, UP, S.UP, R.STARTUP), (0, counters(rx_crc_errors=0), S.UP, R.STARTUP),
        (1000, counters(rx_crc_errors=30), S.DEGRADED, R.ERROR_RATE)])
    out = policy.reconfigure([IF], PolicyConfig(error_rate_per_s={"symbol_error": 1.0}), 1100 * MS)
    assert [(t.new, t.reason) for t in out] == [(S.RECOVERING, R.CONDITION_CLEARED)]
