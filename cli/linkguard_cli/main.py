"""linkguard-cli: read and steer linkguardd over its gRPC socket.

Exit status: 0 fine; 1 `status` found a NIC that is not UP; 2 usage error, bad argument or
unknown NIC; 3 the daemon is unreachable (no socket, no permission, no answer in time); 4 the
daemon refused (drain/undrain needs root or the admin group); 5 the daemon failed otherwise (for
`health`: its heartbeat is stale).
"""
from __future__ import annotations

import json
import os
from typing import Any

import click

from linkguard.v1 import linkguard_pb2 as pb
from linkguard_cli import render
from linkguard_cli.client import (
    EXIT_DAEMON_ERROR,
    EXIT_NOT_UP,
    EXIT_OK,
    EXIT_UNREACHABLE,
    Client,
)
from linkguardd.settings import SETTINGS

DEFAULT_SOCKET = next(s.default for s in SETTINGS if s.name == "grpc_socket")
DEFAULT_TIMEOUT_S = 5.0  # a healthy daemon answers in milliseconds; 5 s covers a loaded host


def _client(ctx: click.Context) -> Client:
    client: Client = ctx.obj
    return client


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


EXIT_STATUS_HELP = """\b
Exit status: 0 fine; 1 `status` found a NIC that is not UP; 2 usage error,
bad argument or unknown NIC; 3 linkguardd unreachable; 4 not allowed
(drain/undrain need root or the admin group); 5 the daemon failed (`health`:
heartbeat stale)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_STATUS_HELP)
@click.option("--socket", "socket_path", default=DEFAULT_SOCKET, show_default=True,
              envvar="LINKGUARD_SOCKET", show_envvar=True, metavar="PATH",
              help="linkguardd's API socket.")
@click.option("--timeout", default=DEFAULT_TIMEOUT_S, show_default=True, metavar="SECONDS",
              type=click.FloatRange(min=0.1), help="Deadline of each request to the daemon.")
@click.pass_context
def cli(ctx: click.Context, socket_path: str, timeout: float) -> None:
    """Show and steer linkguardd: NIC health, optics, events, maintenance drains."""
    if os.environ.get("NO_COLOR"):  # https://no-color.org
        ctx.color = False
    ctx.obj = Client(socket_path, timeout)
    ctx.call_on_close(ctx.obj.close)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Every NIC's state at a glance. Exits 1 if a NIC is not UP."""
    resp = _client(ctx).status()
    if as_json:
        _echo_json(render.status_json(resp))
    else:
        click.echo(render.status_table(resp))
    ctx.exit(EXIT_OK if all(n.state == pb.NIC_STATE_UP for n in resp.nics) else EXIT_NOT_UP)


@cli.command()
@click.option("--since", "since", type=click.IntRange(min=0), default=None, metavar="SEQ",
              help="First replay the events after SEQ still in the daemon's history.")
@click.option("--count", type=click.IntRange(min=1), default=None, metavar="N",
              help="Exit after N events (e.g. 1: wait for the next transition).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def watch(ctx: click.Context, since: int | None, count: int | None, as_json: bool) -> None:
    """Print transitions as they happen, one line each, until Ctrl-C."""
    client = _client(ctx)
    stream, missed = client.watch(since or 0, replay=since is not None)
    if missed:
        click.echo(f"linkguard-cli: {missed} events after #{since} are no longer in the "
                   "daemon's history", err=True)
    last, seen = since or 0, 0
    try:
        for event in client.events(stream):
            last, seen = event.seq, seen + 1
            click.echo(json.dumps(render.event_json(event)) if as_json
                       else render.event_line(event))
            if count is not None and seen >= count:
                stream.cancel()
                return
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
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def events(ctx: click.Context, since: int, limit: int, as_json: bool) -> None:
    """Past transitions still in the daemon's history."""
    resp = _client(ctx).call("ListEvents", pb.ListEventsRequest(since_seq=since, limit=limit))
    if resp.missed:
        click.echo(f"linkguard-cli: {resp.missed} events after #{since} are no longer in the "
                   "daemon's history", err=True)
    for event in resp.events:
        click.echo(json.dumps(render.event_json(event)) if as_json
                   else render.event_line(event))
    if not resp.events and not as_json:
        click.echo("no events" + (f" after #{since}" if since else ""))


@cli.command()
@click.argument("nic")
@click.option("--reason", required=True, metavar="TEXT",
              help="Why (kept with the NIC and logged), e.g. 'swap optic, ticket 1234'.")
@click.pass_context
def drain(ctx: click.Context, nic: str, reason: str) -> None:
    """Move traffic off NIC until undrain (before swapping a cable or optic)."""
    result = _client(ctx).call("Drain", pb.DrainRequest(nic=nic, reason=reason))
    state = render.state_name(result.state)
    target = f"; traffic moves to {result.backup}" if result.backup else " (it has no backup NIC)"
    click.echo(f"{result.name}: {render.styled_state(state)}{target}")
    click.echo(f"undo with: linkguard-cli undrain {result.name}")


@cli.command()
@click.argument("nic")
@click.pass_context
def undrain(ctx: click.Context, nic: str) -> None:
    """Return NIC to service; it is UP again after the hold-down."""
    result = _client(ctx).call("Undrain", pb.UndrainRequest(nic=nic))
    state = render.state_name(result.state)
    click.echo(f"{result.name}: {render.styled_state(state)}"
               + ("; UP again once the link has been healthy for the hold-down"
                  if state == "RECOVERING" else ""))


@cli.command()
@click.argument("nic", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def dom(ctx: click.Context, nic: str | None, as_json: bool) -> None:
    """Optical module diagnostics of NIC, or of every NIC: like `ethtool -m`, all at once."""
    client = _client(ctx)
    names = [nic] if nic else [n.name for n in client.status().nics]
    modules = [client.call("GetModule", pb.GetModuleRequest(nic=name)) for name in names]
    if as_json:
        _echo_json([render.module_json(m) for m in modules])
        return
    click.echo("\n\n".join(render.module_text(m) for m in modules) or "no NIC is monitored")


@cli.command()
@click.option("--max-heartbeat-age", "max_age", default=render.STALE_HEARTBEAT_S,
              show_default=True, metavar="SECONDS", type=click.FloatRange(min=0),
              help="Older than this, the daemon counts as stalled.")
@click.pass_context
def health(ctx: click.Context, max_age: float) -> None:
    """Whether linkguardd answers and its heartbeat is fresh, whatever the NICs' states: a
    liveness probe. Exits 0 alive, 3 unreachable, 5 heartbeat stale."""
    d = _client(ctx).status().daemon
    age = d.heartbeat_age_seconds
    if age > max_age:
        click.echo(f"linkguardd pid {d.pid}: heartbeat {age:.3f} s old (limit {max_age:g} s): "
                   "its loop is stalled", err=True)
        ctx.exit(EXIT_DAEMON_ERROR)
    click.echo(f"linkguardd pid {d.pid}: alive, heartbeat {age * 1000:.0f} ms ago")


@cli.command()
@click.pass_context
def dump(ctx: click.Context) -> None:
    """The daemon's whole state and configuration as JSON (attach it to bug reports)."""
    click.echo(_client(ctx).call("Dump", pb.DumpRequest()).json)


def main() -> None:
    cli(prog_name="linkguard-cli")


if __name__ == "__main__":
    main()
