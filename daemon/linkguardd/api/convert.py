"""DaemonView objects -> linkguard.v1 protobuf messages (the only place that knows both)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from linkguard.v1 import linkguard_pb2 as pb
from linkguardd.census.store import JobTraffic, NicTraffic
from linkguardd.states import REASON_TEXT, STATE_TEXT, NicState, Reason
from linkguardd.view import EventView, NicView, PluginVerdictView

LEVELS = ("high_alarm", "low_alarm", "high_warning", "low_warning")


def reason_name(value: int) -> str:
    try:
        return Reason(value).name
    except ValueError:
        return f"REASON_{value}"  # a newer engine than this API: still say something


def state_name(value: int) -> str:
    try:
        return NicState(value).name
    except ValueError:
        return f"STATE_{value}"


def reason_text(value: int) -> str:
    try:
        return REASON_TEXT[Reason(value)]
    except (ValueError, KeyError):
        return ""


def state_text(value: int) -> str:
    try:
        return STATE_TEXT[NicState(value)]
    except (ValueError, KeyError):
        return ""


def _state(value: int) -> pb.NicState:
    """view states are NicState ints; the proto enum uses the same numbers (the shm ABI)."""
    return cast(pb.NicState, value)


def _w_to_dbm(watts: float) -> float:
    return 10.0 * math.log10(watts * 1000.0) if watts > 0 else -math.inf


def dom_summary(nic: NicView) -> pb.DomSummary:
    summary = pb.DomSummary(
        status=nic.dom_status, warnings=list(nic.dom_warnings), alarms=list(nic.dom_alarms)
    )
    diag = nic.dom
    if diag is not None:
        if diag.temperature_c is not None:
            summary.temperature_celsius = diag.temperature_c
        summary.rx_power_dbm.extend(_w_to_dbm(w) for w in diag.rx_power_w or ())
    return summary


def nic_message(nic: NicView, now_monotonic_ns: int,
                verdict_message: Callable[[PluginVerdictView], pb.PluginVerdict] | None = None
                ) -> pb.Nic:
    """`verdict_message` converts each verdict (a VerdictMessages round; default: anew)."""
    verdict_message = verdict_message or plugin_verdict_message
    msg = pb.Nic(
        name=nic.name,
        state=_state(nic.state),
        reason=reason_name(nic.reason),
        reason_text=reason_text(nic.reason),
        backup=nic.backup,
        backup_set=list(nic.backup_set),
        carrier=nic.carrier,
        present=nic.present,
        operstate=nic.operstate,
        epoch=nic.epoch,
        seconds_in_state=max(0.0, (now_monotonic_ns - nic.since_monotonic_ns) / 1e9),
        counters={k: v for k, v in nic.counters.items() if v >= 0},
        dom=dom_summary(nic),
        rdma_device=nic.rdma_device,
        flap_penalty=nic.flap_penalty,
        drain_reason=nic.drain_reason,
        since_unix=nic.since_unix,
        state_text=state_text(nic.state),
        counter_rates=nic.counter_rates,
        counters_over=nic.counters_over,
        plugin_verdicts=[verdict_message(v) for v in nic.plugin_verdicts],
        traffic=traffic_message(nic.traffic),
    )
    if nic.speed_mbps is not None and nic.speed_mbps >= 0:
        msg.speed_mbps = nic.speed_mbps
    return msg


def plugin_verdict_message(v: PluginVerdictView) -> pb.PluginVerdict:
    f = v.fact
    return pb.PluginVerdict(
        verdict=f.verdict, pid=f.pid, uid=f.uid, path="backup" if f.path else "primary",
        peer=f.peer, conn=f.conn, for_ms=f.for_ms, loss_ppm=f.loss_ppm,
        rate_bytes_per_second=f.rate_bps, expected_bytes_per_second=f.expected_bps,
        reports=v.reports, first_unix=v.first_unix, last_unix=v.last_unix,
        expires_unix=v.expires_unix, detail=v.detail)


class VerdictMessages:
    """Each verdict view's message built once while the view is the same object (the daemon's
    view keeps a report's from one status to the next): one per servicer, a round per status."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[PluginVerdictView, pb.PluginVerdict]] = {}
        self.built = 0  # messages built since start (the rest came from the last round)

    def round(self) -> Callable[[PluginVerdictView], pb.PluginVerdict]:
        """A converter for one status; what it does not convert is forgotten."""
        kept: dict[int, tuple[PluginVerdictView, pb.PluginVerdict]] = {}
        last, self._kept = self._kept, kept

        def message(v: PluginVerdictView) -> pb.PluginVerdict:
            entry = last.get(id(v))
            if entry is None or entry[0] is not v:
                entry = (v, plugin_verdict_message(v))
                self.built += 1
            kept[id(v)] = entry
            return entry[1]

        return message


def traffic_message(t: NicTraffic) -> pb.Traffic:
    return pb.Traffic(processes=t.processes, primary=t.primary, backup=t.backup, away=t.away,
                      standing=t.standing, silent=t.silent, failovers=t.failovers,
                      reintegrations=t.reintegrations, failures=dict(t.failures))


def job_message(j: JobTraffic) -> pb.Job:
    return pb.Job(
        job=j.job, uids=j.uids, pids=j.pids, connections=j.connections, on_backup=j.on_backup,
        failovers=j.failovers, failures=j.failures, silent_seconds=j.silent_s,
        nics=[pb.JobNic(nic=n.ifname, primary=n.primary, backup=n.backup, away=n.away,
                        standing=n.standing) for n in j.nics])


def event_message(event: EventView) -> pb.Event:
    return pb.Event(
        seq=event.seq,
        nic=event.nic,
        old_state=_state(event.old_state),
        new_state=_state(event.new_state),
        reason=reason_name(event.reason),
        reason_text=reason_text(event.reason),
        detail=event.detail,
        epoch=event.epoch,
        time_unix=event.time_unix,
        detection_seconds=max(0, event.detection_ns) / 1e9,
    )


def module_message(nic: NicView) -> pb.ModuleDiagnostics:
    """The whole module read of one NIC; `nic.dom` is a dom.common.ModuleDiagnostics or None."""
    msg = pb.ModuleDiagnostics(
        nic=nic.name,
        status=nic.dom_status,
        warnings=list(nic.dom_warnings),
        alarms=list(nic.dom_alarms),
    )
    diag: Any = nic.dom
    if diag is None:
        msg.detail = {
            "no_module": "nothing plugged in, or a NIC without a module cage (veth, virtio)",
            "undecodable": "the module's memory map could not be decoded (see the daemon log)",
        }.get(nic.dom_status, "")
        return msg
    msg.identifier = diag.identifier_name
    msg.identifier_code = diag.identifier
    msg.spec = diag.spec
    msg.vendor = diag.vendor
    msg.part_number = diag.part_number
    msg.serial = diag.serial_number
    msg.rx_power_type = diag.rx_power_type or ""
    msg.calibration = diag.calibration
    if diag.temperature_c is not None:
        msg.temperature_celsius = diag.temperature_c
    if diag.supply_voltage_v is not None:
        msg.supply_voltage_volts = diag.supply_voltage_v
    per_lane = {
        "tx_bias_amperes": diag.tx_bias_a or (),
        "tx_power_watts": diag.tx_power_w or (),
        "rx_power_watts": diag.rx_power_w or (),
    }
    for index in range(max(len(v) for v in per_lane.values())):
        lane = msg.lanes.add(lane=index + 1)
        for field, values in per_lane.items():
            if index < len(values):
                setattr(lane, field, values[index])
    for quantity, limits in diag.thresholds.items():
        entry = msg.thresholds[quantity]
        for level in LEVELS:
            if limits.get(level) is not None:
                setattr(entry, level, limits[level])
    msg.flags.extend(sorted(diag.flags))
    return msg
