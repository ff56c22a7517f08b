"""SIGHUP: what a new configuration changes, and what of it only a restart can apply.

Settings declared with restart=True (settings.py: a file, socket or port opened at start) keep
their running value until the next restart; the reload says so instead of pretending.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from linkguardd.settings import SETTINGS, Settings


@dataclass(frozen=True)
class ReloadPlan:
    changed: tuple[str, ...]  # every setting whose value differs, in table order
    needs_restart: tuple[str, ...]  # those of them a reload cannot apply
    effective: Settings  # the new settings with the running value of each needs_restart one

    @property
    def applied(self) -> tuple[str, ...]:
        return tuple(n for n in self.changed if n not in self.needs_restart)


def plan_reload(running: Settings, fresh: Settings) -> ReloadPlan:
    changed = tuple(s.name for s in SETTINGS if getattr(running, s.name) != getattr(fresh, s.name))
    restart = tuple(s.name for s in SETTINGS if s.restart and s.name in changed)
    kept = {name: getattr(running, name) for name in restart}
    return ReloadPlan(changed, restart, dataclasses.replace(fresh, **kept))
