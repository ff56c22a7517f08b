"""Exporter "log": one structured line per transition (logs.py writes it off the loop).

A NIC that stops carrying traffic (DOWN, DEGRADED) is a warning, so `journalctl -p warning`
lists every failure; everything else is info.
"""
from __future__ import annotations

import logging

from linkguardd.exporters.base import EngineState, Update
from linkguardd.logs import kv
from linkguardd.states import NOTE_REASONS, NicState, Reason
from linkguardd.view import EventView

log = logging.getLogger("linkguardd.transition")
WARNING_STATES = frozenset({NicState.DOWN, NicState.DEGRADED})


def transition_fields(ev: EventView) -> dict[str, object]:
    return {
        "nic": ev.nic,
        "from": NicState(ev.old_state).name,
        "to": NicState(ev.new_state).name,
        "reason": Reason(ev.reason).name,
        "epoch": ev.epoch,
        "seq": ev.seq,
        "detect_us": round(ev.detection_ns / 1000, 1),
        "detail": ev.detail,
    }


class LogExporter:
    name = "log"

    async def start(self, state: EngineState) -> None:
        pass

    async def stop(self) -> None:
        pass

    def export(self, update: Update) -> None:
        for ev in update.events():
            if ev.reason in NOTE_REASONS:  # a job's plugin reported the NIC gray, or no more
                level = logging.WARNING if ev.reason == Reason.PLUGIN_VERDICT else logging.INFO
                log.log(level, "plugin verdict", extra=kv(**transition_fields(ev)))
                continue
            level = logging.WARNING if ev.new_state in WARNING_STATES else logging.INFO
            log.log(level, "transition", extra=kv(**transition_fields(ev)))
