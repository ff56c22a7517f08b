"""linkguard-slurm-taskprolog: Slurm's TaskProlog, giving every job task the plugin.

slurmstepd runs it as the job's user, in the task's environment, before each task; each line
"export NAME=value" it prints sets a variable of the task, "print text" writes to the task's
output (slurm.conf(5), TaskProlog). It gives NCCL_NET_PLUGIN, LINKGUARD_SHM, NCCL_NET when
strict, and the configured extra variables; a variable the job already set is the job's
choice and is never replaced (NCCL_NET_PLUGIN=none in a job opts out). It always exits 0: a
bad config leaves the job without linkguard's variables and says so in the job's output, but
never fails the job.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from linkguard_slurm import settings as cfg

PROG = "linkguard-slurm-taskprolog"


def wanted(s: cfg.Settings, node: str) -> dict[str, str]:
    """Every variable the settings give a task, empty values left out."""
    values = {"NCCL_NET_PLUGIN": s.nccl_net_plugin,
              "NCCL_NET": "linkguard" if s.nccl_net_strict else "",
              "LINKGUARD_SHM": cfg.expand_node(s.shm_path, node), **s.environment}
    return {k: v for k, v in values.items() if v}


def lines(s: cfg.Settings, environ: Mapping[str, str]) -> list[str]:
    values = wanted(s, cfg.node_name(s, environ))
    return [f"export {k}={v}" for k, v in values.items() if k not in environ]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@cfg.click_options()
def cli(**params: Any) -> list[str]:
    """Print the task's NCCL and linkguard variables for Slurm (TaskProlog). Settings: flags,
    LINKGUARD_SLURM_* variables, or the TOML file."""
    return lines(cfg.from_click(params), os.environ)


def main(argv: list[str] | None = None) -> None:
    try:
        out = cli.main(argv, prog_name=PROG, standalone_mode=False)
        if not isinstance(out, list):  # --help printed its text
            sys.exit(0)
    except (cfg.ConfigError, click.ClickException) as exc:
        text = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        out = [f"print {PROG}: {text}; this task runs without linkguard's NCCL settings"]
    except Exception as exc:  # noqa: BLE001 - never fail a job for linkguard's sake
        out = [(f"print {PROG}: internal error ({exc!r}); this task runs without linkguard's "
               "NCCL settings")]
    sys.stdout.write("".join(line + "\n" for line in out))
    sys.exit(0)
