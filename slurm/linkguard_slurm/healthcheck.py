"""linkguard-slurm-healthcheck: Slurm's HealthCheckProgram (or an NHC check) for linkguard.

Asks linkguardd for its NICs, drains the node when a NIC pair has no healthy member (or, if
configured, when a NIC has been out of service too long), and resumes a node only when the
drain is its own (the reason starts with "linkguard:"). A node that someone else drained or
marked down is left alone. It never drains because it could not get an answer.

Exit status (distinct, so that slurmd's log and NHC can tell them apart):
  0  healthy (a drain of its own was lifted)
  1  the check itself failed (Python's status for a crash): nothing done
  2  usage or configuration error: nothing done
  3  linkguardd unreachable, or it cannot tell yet: nothing done
  4  unhealthy: the node is drained (now or before), or would be (drain = false)
  5  Slurm could not be told: scontrol failed
"""
from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import click

from linkguard.v1 import linkguard_pb2 as pb
from linkguard_cli.client import Client, CliError
from linkguard_slurm import settings as cfg
from linkguard_slurm.scontrol import Scontrol, SlurmError
from linkguard_slurm.verdict import REASON_PREFIX, Verdict, judge, off_service_since

EXIT_HEALTHY = 0
EXIT_CRASHED = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3
EXIT_UNHEALTHY = 4
EXIT_SLURM_FAILED = 5
PROG = "linkguard-slurm-healthcheck"


class NoAnswer(Exception):
    """linkguardd did not answer (after every attempt)."""


def ask_daemon(s: cfg.Settings, node: str) -> tuple[list[pb.Nic], list[pb.Event]]:
    """The NICs, and the event history when the off-service bound needs it."""
    client = Client(cfg.expand_node(s.socket, node), s.timeout_s)
    try:
        for attempt in range(1, s.attempts + 1):
            try:
                nics = list(client.status().nics)
                needs_history = s.max_off_service_s > 0 and any(
                    n.state != pb.NIC_STATE_UP for n in nics)
                events = list(client.call("ListEvents", pb.ListEventsRequest()).events
                              ) if needs_history else []
                return nics, events
            except CliError as exc:
                why = exc.format_message().splitlines()[0]
                client.close()  # a fresh channel next time: the daemon may have restarted
                if attempt == s.attempts:
                    raise NoAnswer(f"{why} (after {s.attempts} attempt(s))") from None
                time.sleep(s.retry_interval_s)
    finally:
        client.close()
    raise AssertionError("unreachable")  # the loop returns or raises


def apply(verdict: Verdict, node: str, slurm: Scontrol) -> tuple[int, str]:
    """Drain or resume `node` as the verdict says, touching only what is ours."""
    info = slurm.show_node(node)
    ours = info.reason.startswith(REASON_PREFIX)
    if verdict.healthy:
        if info.drained and ours:
            slurm.resume(node)
            return EXIT_HEALTHY, (f"node {node}: healthy ({verdict.summary}); resumed the node "
                                 f"(was drained by this check: {info.reason})")
        return EXIT_HEALTHY, f"node {node}: healthy ({verdict.summary})"
    if info.reason and not ours:
        return EXIT_UNHEALTHY, (f"node {node}: {verdict.reason}; left as it is: Slurm already "
                                f"has it {info.state} with someone else's reason: {info.reason}")
    if info.drained and info.reason == verdict.reason:
        return EXIT_UNHEALTHY, f"node {node}: still drained: {verdict.reason}"
    slurm.drain(node, verdict.reason)
    return EXIT_UNHEALTHY, f"node {node}: drained: {verdict.reason}"


def check(s: cfg.Settings) -> int:
    node = cfg.node_name(s)
    try:
        nics, events = ask_daemon(s, node)
    except NoAnswer as exc:
        click.echo(f"{PROG}: node {node} left as it is: {exc}", err=True)
        return EXIT_NO_ANSWER
    off_since = {n.name: off_service_since(n, events) for n in nics}
    verdict = judge(nics, s, time.time(), off_since)
    if not verdict.known:
        click.echo(f"{PROG}: node {node} left as it is: linkguardd cannot tell yet: "
                   f"{verdict.summary}", err=True)
        return EXIT_NO_ANSWER
    if not s.drain:
        click.echo(f"node {node}: healthy ({verdict.summary})" if verdict.healthy
                   else verdict.reason)
        return EXIT_HEALTHY if verdict.healthy else EXIT_UNHEALTHY
    try:
        code, line = apply(verdict, node, Scontrol(s.scontrol, s.scontrol_timeout_s))
    except SlurmError as exc:
        click.echo(f"{PROG}: node {node}: {'healthy' if verdict.healthy else verdict.reason}; "
                   f"Slurm not updated: {exc}", err=True)
        return EXIT_SLURM_FAILED
    click.echo(line)
    return code


@click.command(context_settings={"help_option_names": ["-h", "--help"]},
               epilog="\b\n" + __doc__.split("\n\n", 2)[2])
@cfg.click_options()
def cli(**params: Any) -> None:
    """Drain this Slurm node when linkguard says a NIC pair has no healthy member; resume it
    when that is over. Settings: flags, LINKGUARD_SLURM_* variables, or the TOML file."""
    try:
        settings = cfg.from_click(params)
    except cfg.ConfigError as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(check(settings))


def main() -> None:
    try:
        cli.main(prog_name=PROG)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - a crash must never look like a verdict
        traceback.print_exc()
        click.echo(f"{PROG}: internal error: nothing done", err=True)
        sys.exit(EXIT_CRASHED)
