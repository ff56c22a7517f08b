"""A node's state in Slurm, and draining and resuming it, through scontrol (slurm-client).

`scontrol -o show node NAME` prints one line of KEY=VALUE fields; Reason comes last and may
hold spaces, followed by " [user@time]" (Slurm 22.05, scontrol(1)). Every call has a deadline.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass


class SlurmError(Exception):
    """scontrol is missing, failed, or said something this module cannot read."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # e.g. IDLE+DRAIN, MIXED, DOWN+NOT_RESPONDING
    reason: str  # "" when none

    @property
    def drained(self) -> bool:
        """DRAIN set (DRAINING or DRAINED: jobs may still be finishing)."""
        return "DRAIN" in self.state.split("+")


_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[[^\[\]\s]*@[^\[\]\s]*\])?\s*$")


def parse_node(name: str, line: str) -> NodeInfo:
    state = _STATE.search(line)
    if not line.startswith(f"NodeName={name} ") or state is None:
        raise SlurmError(f"scontrol show node {name}: unexpected output {line[:200]!r}")
    reason = _REASON.search(line)
    return NodeInfo(name, state.group(1), reason.group(1).strip() if reason else "")


class Scontrol:
    def __init__(self, program: str, timeout_s: float) -> None:
        self.program = program
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        argv = [self.program, *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(f"{self.program}: not found (setting scontrol)") from None
        except PermissionError:
            raise SlurmError(f"{self.program}: not executable") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv)}: no answer within {self.timeout_s:g} s") from None
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().replace("\n", "; ")
            raise SlurmError(f"{' '.join(argv)}: exit {proc.returncode}: {detail[:300]}")
        return proc.stdout

    def show_node(self, name: str) -> NodeInfo:
        lines = [ln for ln in self._run("-o", "show", "node", name).splitlines() if ln.strip()]
        if not lines:
            raise SlurmError(f"scontrol show node {name}: no output")
        return parse_node(name, lines[0])

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"nodename={name}", "state=drain", f"reason={reason}")

    def resume(self, name: str) -> None:
        self._run("update", f"nodename={name}", "state=resume")
