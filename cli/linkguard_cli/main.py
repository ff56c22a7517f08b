"""linkguard-cli: read and steer linkguardd over its gRPC sockets.

Reads go to the read-only socket, drain/undrain to the admin socket; `health --shm` reads the
control file instead (heartbeat.py). Exit statuses are in client.py (EXIT_*) and
EXIT_STATUS_HELP; a crash of the CLI itself is 70, never 1.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem

from linkguard.v1 import linkguard_pb2 as pb
from linkguard_cli import heartbeat, render
from linkguard_cli.client import (
    EXIT_DAEMON_ERROR,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_NICS,
    EXIT_NOT_EMPTY,
    EXIT_NOT_UP,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Client,
    CliError,
    FellBehind,
    usable,
)
from linkguardd.settings import SETTINGS

DEFAULT_SOCKET = next(s.default for s in SETTINGS if s.name == "grpc_socket")
DEFAULT_RO_SOCKET = next(s.default for s in SETTINGS if s.name == "grpc_ro_socket")
DEFAULT_TIMEOUT_S = 5.0  # a healthy daemon answers in milliseconds; 5 s covers a loaded host
COMPLETION_TIMEOUT_S = 1.0  # a tab press must not hang on a stuck daemon
# drain --wait: plugins report a change within 100 ms (LG_CENSUS_MIN_INTERVAL_MS, census.h),
# so polling at twice that rate sees the NIC empty soon after; a minute covers a slow failover.
DRAIN_POLL_S = 0.2
DEFAULT_DRAIN_WAIT_S = 60.0
F = TypeVar("F", bound=Callable[..., Any])


def _client(ctx: click.Context) -> Client:
    client: Client = ctx.find_root().obj
    return client


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


EXIT_STATUS_HELP = """\b
Exit status (health checks may rely on it):
  0   fine; for status: every NIC asked about is UP
  1   status: a NIC is not UP
  2   usage error, bad argument, unknown NIC, --since beyond the newest event
  3   linkguardd unreachable (no socket, no permission, no answer in time;
      health --shm: no control file there)
  4   not allowed (drain/undrain on the read-only socket)
  5   the daemon failed the request; for health: its heartbeat is stale
  6   drain refused: the backup NIC is not UP (--force overrides)
  7   status: the daemon monitors no NIC at all
  8   drain --wait: connections still on the NIC at the timeout
  70  linkguard-cli itself failed (a bug: never a NIC state)
  130 interrupted"""


def read_socket(ctx: click.Context, socket_path: str, ro_socket: str) -> str:
    """The socket for reads: --ro-socket if given; else an explicitly given --socket (one
    socket for everything, as tests and old scripts pass it); else the default read-only
    socket, or the admin socket for an admin who is not in the reader group."""
    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)

    if given("ro_socket"):
        return ro_socket
    if given("socket_path"):
        return socket_path
    if not usable(ro_socket) and usable(socket_path):
        return socket_path
    return ro_socket


def complete_nic(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """NIC names from the daemon, for shell completion; nothing when it cannot answer."""
    root = ctx.find_root()
    params = root.params
    try:
        client = Client(params.get("socket_path") or DEFAULT_SOCKET, COMPLETION_TIMEOUT_S,
                        read_socket(root, params.get("socket_path") or DEFAULT_SOCKET,
                                    params.get("ro_socket") or DEFAULT_RO_SOCKET))
        try:
            names = [n.name for n in client.status().nics]
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - completion must never print a traceback into a shell
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def output_option(*formats: str) -> Callable[[F], F]:
    """-o/--output FORMAT (first one the default), and --json kept as a shorthand."""
    def decorate(f: F) -> F:
        f = click.option("--json", "as_json", is_flag=True, hidden=True,
                         help="Same as -o json.")(f)
        return click.option("-o", "--output", "output", type=click.Choice(formats),
                            default=formats[0], show_default=True,
                            help="Output format.")(f)
    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_STATUS_HELP)
@click.version_option(package_name="linkguard", prog_name="linkguard-cli",
                      message="%(prog)s %(version)s")
@click.option("--socket", "socket_path", default=DEFAULT_SOCKET, show_default=True,
              envvar="LINKGUARD_SOCKET", show_envvar=True, metavar="PATH",
              help="linkguardd's admin socket: drain and undrain (and every command, when "
                   "given without --ro-socket).")
@click.option("--ro-socket", "ro_socket", default=DEFAULT_RO_SOCKET, show_default=True,
              envvar="LINKGUARD_RO_SOCKET", show_envvar=True, metavar="PATH",
              help="linkguardd's read-only socket (status, watch, events, dom, dump).")
@click.option("--timeout", default=DEFAULT_TIMEOUT_S, show_default=True, metavar="SECONDS",
              type=click.FloatRange(min=0.1), help="Deadline of each request to the daemon.")
@click.pass_context
def cli(ctx: click.Context, socket_path: str, ro_socket: str, timeout: float) -> None:
    """Show and steer linkguardd: NIC health, optics, events, maintenance drains."""
    if os.environ.get("NO_COLOR"):  # https://no-color.org
        ctx.color = False
    ctx.obj = Client(socket_path, timeout, read_socket(ctx, socket_path, ro_socket))
    ctx.call_on_close(ctx.obj.close)


@cli.command()
@click.argument("nics", nargs=-1, metavar="[NIC]...", shell_complete=complete_nic)
@output_option("table", "wide", "json")
@click.pass_context
def status(ctx: click.Context, nics: tuple[str, ...], output: str, as_json: bool) -> None:
    """The state of every NIC, or of the NICs named. Exits 1 if one is not UP."""
    resp = _client(ctx).status()
    if nics:
        known = [n.name for n in resp.nics]
        unknown = [n for n in nics if n not in known]
        if unknown:
            raise CliError(f"no NIC named {', '.join(map(repr, unknown))}; monitored NICs: "
                           f"{', '.join(known) or 'none'}", EXIT_USAGE)
        chosen = [n for n in resp.nics if n.name in nics]
        del resp.nics[:]
        resp.nics.extend(chosen)
    if as_json or output == "json":
        _echo_json(render.status_json(resp))
    else:
        click.echo(render.status_table(resp, wide=output == "wide"))
        for nic in resp.nics if nics else ():  # NICs named: their counters too
            click.echo(render.counters_text(nic))
    if not resp.nics:  # "all UP" of nothing: a health check must not read it as fine
        click.echo("linkguard-cli: linkguardd monitors no NIC (check `interfaces`: "
                   "linkguard-cli dump)", err=True)
        ctx.exit(EXIT_NO_NICS)
    ctx.exit(EXIT_OK if all(n.state == pb.NIC_STATE_UP for n in resp.nics) else EXIT_NOT_UP)


def _print_event(event: pb.Event, output: str) -> None:
    click.echo(json.dumps(render.event_json(event)) if output == "json"
               else render.event_line(event, wide=output == "wide"))


@cli.command()
@click.option("--since", "since", type=click.IntRange(min=0), default=None, metavar="SEQ",
              help="First replay the events after SEQ still in the daemon's history.")
@click.option("--count", type=click.IntRange(min=1), default=None, metavar="N",
              help="Exit after N events (e.g. 1: wait for the next transition).")
@output_option("table", "wide", "json")
@click.pass_context
def watch(ctx: click.Context, since: int | None, count: int | None, output: str,
          as_json: bool) -> None:
    """Print transitions as they happen, one line each, until Ctrl-C."""
    output = "json" if as_json else output
    client = _client(ctx)
    last, seen, replay = since or 0, 0, since is not None
    while True:
        stream, missed = client.watch(last, replay=replay)
        if missed:
            click.echo(f"linkguard-cli: {missed} events after #{last} are no longer in the "
                       "daemon's history", err=True)
        try:
            for event in client.events(stream):
                last, seen = event.seq, seen + 1
                _print_event(event, output)
                if count is not None and seen >= count:
                    stream.cancel()
                    return
            break
        except FellBehind as behind:
            # We (or whatever reads our output) were too slow: pick up where we were.
            click.echo(f"linkguard-cli: fell behind the daemon's events; resuming after "
                       f"#{behind.since}", err=True)
            last, replay = behind.since, True
        except KeyboardInterrupt:
            stream.cancel()
            return
    # The daemon ended the stream: it is stopping or restarting.
    click.echo(f"linkguard-cli: linkguardd closed the stream; resume with "
               f"`linkguard-cli watch --since {last}`", err=True)
    ctx.exit(EXIT_UNREACHABLE)


@cli.command()
@click.option("--since", type=click.IntRange(min=0), default=0, metavar="SEQ",
              help="Only events after SEQ.")
@click.option("--limit", type=click.IntRange(min=0), default=0, metavar="N",
              help="Only the newest N events (0: all).")
@output_option("table", "wide", "json")
@click.pass_context
def events(ctx: click.Context, since: int, limit: int, output: str, as_json: bool) -> None:
    """Past transitions still in the daemon's history."""
    output = "json" if as_json else output
    resp = _client(ctx).call("ListEvents", pb.ListEventsRequest(since_seq=since, limit=limit))
    if resp.missed:
        click.echo(f"linkguard-cli: {resp.missed} events after #{since} are no longer in the "
                   "daemon's history", err=True)
    for event in resp.events:
        _print_event(event, output)
    if not resp.events and output != "json":
        click.echo("no events" + (f" after #{since}" if since else ""))


@cli.command()
@click.argument("nic", shell_complete=complete_nic)
@click.option("--reason", required=True, metavar="TEXT",
              help="Why (kept with the NIC and logged), e.g. 'swap optic, ticket 1234'.")
@click.option("--force", is_flag=True,
              help="Drain even when the backup NIC is not UP (its traffic has nowhere to go).")
@click.option("--wait", "wait", is_flag=True,
              help="Then wait until jobs' plugins report no connection on NIC (exit 8 if some "
                   "remain at the timeout).")
@click.option("--wait-timeout", default=DEFAULT_DRAIN_WAIT_S, show_default=True,
              metavar="SECONDS", type=click.FloatRange(min=0), help="How long --wait waits.")
@click.pass_context
def drain(ctx: click.Context, nic: str, reason: str, force: bool, wait: bool,
          wait_timeout: float) -> None:
    """Move traffic off NIC until undrain (before swapping a cable or optic). The drain
    survives daemon restarts. Refused (exit 6) when the backup NIC is not UP. Says how many
    connections will move, as jobs' NCCL plugins report them; with --wait, returns once none
    is left on NIC."""
    client = _client(ctx)
    result = client.call("Drain", pb.DrainRequest(nic=nic, reason=reason, force=force))
    state = render.state_name(result.state)
    target = f"; traffic moves to {result.backup}" if result.backup else " (it has no backup NIC)"
    click.echo(f"{result.name}: {render.styled_state(state)}{target}")
    click.echo(render.moving_line(result))
    if wait:
        _wait_until_empty(ctx, client, result.name, wait_timeout)
    click.echo(f"undo with: linkguard-cli undrain {result.name}")


def _wait_until_empty(ctx: click.Context, client: Client, name: str, timeout_s: float) -> None:
    """Polls the NIC's census until no connection is on it, or exits EXIT_NOT_EMPTY."""
    start = time.monotonic()
    while True:
        nic = next((n for n in client.status().nics if n.name == name), None)
        if nic is None:
            raise CliError(f"{name} is no longer monitored: cannot tell what is on it",
                           EXIT_DAEMON_ERROR)
        left = nic.traffic.primary + nic.traffic.backup
        waited = time.monotonic() - start
        if not left:
            click.echo(f"{name}: no connection left on it after {waited:.1f} s")
            return
        if waited >= timeout_s:
            click.echo(f"linkguard-cli: {name}: {render.still_on(nic)} after {waited:.1f} s "
                       "(--wait-timeout); `linkguard-cli jobs` names the jobs", err=True)
            ctx.exit(EXIT_NOT_EMPTY)
        time.sleep(DRAIN_POLL_S)


@cli.command()
@output_option("table", "json")
@click.pass_context
def jobs(ctx: click.Context, output: str, as_json: bool) -> None:
    """Each job (or process without a job id) whose NCCL plugin reports its connections: its
    NICs, connections on the backup, failovers."""
    resp = _client(ctx).call("ListJobs", pb.ListJobsRequest())
    if as_json or output == "json":
        _echo_json([render.job_json(j) for j in resp.jobs])
        return
    click.echo(render.jobs_table(resp.jobs))


@cli.command()
@click.argument("nic", shell_complete=complete_nic)
@click.pass_context
def undrain(ctx: click.Context, nic: str) -> None:
    """Return NIC to service; it is UP again after the hold-down."""
    result = _client(ctx).call("Undrain", pb.UndrainRequest(nic=nic))
    state = render.state_name(result.state)
    click.echo(f"{result.name}: {render.styled_state(state)}"
               + ("; UP again once the link has been healthy for the hold-down"
                  if state == "RECOVERING" else ""))


@cli.command()
@click.argument("nic", required=False, shell_complete=complete_nic)
@output_option("table", "json")
@click.pass_context
def dom(ctx: click.Context, nic: str | None, output: str, as_json: bool) -> None:
    """Optical module diagnostics of NIC, or of every NIC: like `ethtool -m`, all at once."""
    client = _client(ctx)
    names = [nic] if nic else [n.name for n in client.status().nics]
    modules = [client.call("GetModule", pb.GetModuleRequest(nic=name)) for name in names]
    if as_json or output == "json":
        _echo_json([render.module_json(m) for m in modules])
        return
    click.echo("\n\n".join(render.module_text(m) for m in modules) or "no NIC is monitored")


@cli.command()
@click.option("--max-heartbeat-age", "max_age", default=render.STALE_HEARTBEAT_S,
              show_default=True, metavar="SECONDS", type=click.FloatRange(min=0),
              help="Older than this, the daemon counts as stalled.")
@click.option("--shm", "shm_path", default=None, metavar="PATH",
              help="Read the heartbeat from the daemon's control file (its shm_path) instead "
                   "of asking the read-only socket: a file read no other user can saturate, "
                   "for liveness probes.")
@click.pass_context
def health(ctx: click.Context, max_age: float, shm_path: str | None) -> None:
    """Whether linkguardd answers and its heartbeat is fresh, whatever the NICs' states: a
    liveness probe. With --shm, whether its control file holds a fresh heartbeat. Exits 0
    alive, 3 unreachable (no such file, not a control file), 5 heartbeat stale."""
    if shm_path is not None:
        beat = heartbeat.read_heartbeat(shm_path)
        stalled = heartbeat.verdict(beat, max_age)
        if stalled:
            click.echo(f"{heartbeat.who(beat)}: {stalled}", err=True)
            ctx.exit(EXIT_DAEMON_ERROR)
        click.echo(f"{heartbeat.who(beat)}: alive, heartbeat {beat.age_s * 1000:.0f} ms ago")
        return
    d = _client(ctx).status().daemon
    age = d.heartbeat_age_seconds
    if not math.isfinite(age) or age < 0 or age > max_age:  # nonsense is no proof of life
        click.echo(f"linkguardd pid {d.pid}: heartbeat {age:.3f} s old (limit {max_age:g} s): "
                   "its loop is stalled", err=True)
        ctx.exit(EXIT_DAEMON_ERROR)
    click.echo(f"linkguardd pid {d.pid}: alive, heartbeat {age * 1000:.0f} ms ago")


@cli.command()
@click.pass_context
def dump(ctx: click.Context) -> None:
    """The daemon's whole state and configuration as JSON (attach it to bug reports)."""
    click.echo(_client(ctx).call("Dump", pb.DumpRequest()).json)


def run(args: list[str] | None = None) -> int:
    """The CLI with the exit statuses a health check may trust: an exception inside the CLI is
    EXIT_INTERNAL, never the 1 that Python (or click's Abort) would give it."""
    try:
        code = cli.main(args, prog_name="linkguard-cli", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("linkguard-cli: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `linkguard-cli events | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the point: a crash is reported as one
        traceback.print_exc()
        click.echo(f"linkguard-cli: internal error ({type(exc).__name__}: {exc}); this is a "
                   "bug in linkguard-cli, not a NIC state: please report it with the "
                   "traceback above", err=True)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else EXIT_OK


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
