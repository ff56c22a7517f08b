"""One structured log line per transition on stdout (journald under systemd)."""
from __future__ import annotations

import json

from linkguardd.states import NicState, Reason
from linkguardd.view import EventView


def transition_fields(ev: EventView) -> dict[str, object]:
    return {
        "msg": "transition",
        "nic": ev.nic,
        "from": NicState(ev.old_state).name,
        "to": NicState(ev.new_state).name,
        "reason": Reason(ev.reason).name,
        "epoch": ev.epoch,
        "seq": ev.seq,
        "detect_us": round(ev.detection_ns / 1000, 1),
        "detail": ev.detail,
    }


def format_transition(ev: EventView, fmt: str = "logfmt") -> str:
    fields = transition_fields(ev)
    if fmt == "json":
        return json.dumps(fields, separators=(",", ":"))
    return " ".join(f"{k}={_logfmt(v)}" for k, v in fields.items())


def _logfmt(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\\'):
        return json.dumps(text)
    return text
