"""`linkguard-lab`: build a namespace cluster and inject link faults into it.

Every bad input (unknown host or rail, missing lab, not root) is one line on stderr and exit
status 2. Subcommands living in other modules register at the bottom, one line each.
"""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys

import click

from linkguard_lab.errors import LabError
from linkguard_lab.gray import parse_rate
from linkguard_lab.lab import Lab
from linkguard_lab.netns import require_root
from linkguard_lab.topology import DEFAULT_PREFIX

EXIT_USAGE = 2


def fail(message: str) -> None:
    click.echo(f"linkguard-lab: {message}", err=True)
    sys.exit(EXIT_USAGE)


def as_root(func):
    """Refuse to run a subcommand without root (--help still works for everyone)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        require_root()
        return func(*args, **kwargs)

    return wrapper


class _Group(click.Group):
    """Turns LabError, and click's usage errors of subcommands, into one stderr line and
    exit status 2."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except LabError as exc:
            fail(str(exc))
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            fail(f"{exc.format_message().rstrip('.')} (see: {where} --help)")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Network-namespace lab for linkguard: hosts a, b, ... with rails 0..M-1."""


prefix_option = click.option("--prefix", default=DEFAULT_PREFIX, show_default=True,
                             help="Lab name prefix (namespaces PREFIX-sw, PREFIX-a, ...).")


@cli.command()
@click.option("--hosts", default=2, show_default=True, help="Number of hosts (a, b, ...).")
@click.option("--rails", default=2, show_default=True, help="Rail NICs per host.")
@click.option("--routed", is_flag=True,
              help="The switch routes between the rails (cross-rail connections work); "
                   "default: rail-only, each rail its own network.")
@click.option("--police", "rate", metavar="RATE", default=None,
              help="Police every rail NIC of every host to RATE each way (the slow fault on "
                   "each port: 100MB, 100MiB, 800mbit), so rails, not the CPU, are the shared "
                   "capacity.")
@prefix_option
@as_root
def up(hosts: int, rails: int, routed: bool, rate: str | None, prefix: str) -> None:
    """Build the lab (an error if that prefix already exists)."""
    if rate is not None:
        parse_rate(rate)  # a bad rate fails before anything is built
    lab = Lab(prefix, hosts, rails, routed=routed).up()
    if rate is not None:
        try:
            lab.police(rate)
        except BaseException:
            lab.down()  # no half-policed lab left behind
            raise
    click.echo(f"lab {prefix} up: {_shape(lab)}" + (f", every rail policed to {rate}"
                                                    if rate else ""))
    for host in lab.hosts:
        addrs = " ".join(f"rail{r}={lab.address(host, r)}" for r in lab.rails)
        click.echo(f"  {host}  ns {lab.ns(host)}  {addrs}  mgmt0={lab.mgmt_address(host)}")
    if routed:
        routers = " ".join(f"rail{r}={lab.topo.router_address(r)}" for r in lab.rails)
        click.echo(f"  routers in {lab.topo.switch_ns}: {routers}")
    lab.close()


def _shape(lab: Lab) -> str:
    return (f"{len(lab.hosts)} hosts x {len(lab.rails)} rails "
            f"({'routed' if lab.routed else 'rail-only'}), switch {lab.topo.switch_ns}")


@cli.command()
@prefix_option
@as_root
def down(prefix: str) -> None:
    """Remove the lab and everything running in it (idempotent)."""
    lab = Lab(prefix)
    existing = lab.existing_namespaces()
    lab.down()
    click.echo(f"lab {prefix} down" + ("" if existing else " (nothing to remove)"))


@cli.command()
@prefix_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@as_root
def status(prefix: str, as_json: bool) -> None:
    """Hosts, rails, carrier of every NIC, active faults."""
    lab = Lab.attach(prefix)
    rows = lab.status()
    lab.close()
    if as_json:
        click.echo(json.dumps({"prefix": prefix, "hosts": lab.hosts, "rails": lab.rails,
                               "routed": lab.routed, "links": rows}, indent=2))
        return
    click.echo(f"lab {prefix}: {_shape(lab)}")
    click.echo(f"{'HOST':4} {'NIC':6} {'ADDRESS':16} {'ADMIN':5} {'CARRIER':7} "
               f"{'CHANGES':7} {'PORT':6} FAULTS")
    for r in rows:
        click.echo(f"{r['host']:4} {r['ifname']:6} {r['address']:16} "
                   f"{'up' if r['admin_up'] else 'down':5} {'yes' if r['carrier'] else 'no':7} "
                   f"{r['carrier_changes']:<7} {r['switch_port']:6} "
                   f"{','.join(r['faults']) or '-'}")


@cli.command("exec", context_settings={"ignore_unknown_options": True,
                                       "allow_interspersed_args": False})
@prefix_option
@click.argument("host")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@as_root
def exec_command(prefix: str, host: str, argv: tuple[str, ...]) -> None:
    """Run a command in HOST ('sw': the switch): exec HOST -- CMD...

    Exits with the command's status. --prefix goes before HOST."""
    lab = Lab.attach(prefix)
    if host != "sw":
        lab.topo.check_host(host)
    if argv[0] == "--":  # options stop at HOST, so click hands us the separator too
        argv = argv[1:]
    if not argv:
        raise LabError("exec needs a command: exec HOST -- CMD...")
    try:
        rc = subprocess.call(lab.argv(host, list(argv)))
    except KeyboardInterrupt:
        rc = 130
    sys.exit(rc)


# "-1" as RAIL reaches our validation ("unknown rail") instead of being taken for an option.
_ARGS_MAY_LOOK_LIKE_OPTIONS = {"ignore_unknown_options": True}


def _fault_command(name: str, doc: str) -> click.Command:
    @click.command(name=name, help=doc, context_settings=_ARGS_MAY_LOOK_LIKE_OPTIONS)
    @prefix_option
    @click.argument("host")
    @click.argument("rail")
    @as_root
    def command(prefix: str, host: str, rail: str) -> None:
        lab = Lab.attach(prefix)
        t_ns = getattr(lab, name)(host, rail)
        lab.close()
        click.echo(f"{name} {host} {rail}: done at monotonic {t_ns} ns")

    return command


_FAULTS: dict[str, str] = {
    "cut": "Switch port down: only HOST loses carrier on RAIL.",
    "restore": "Switch port of HOST's RAIL back up.",
    "nicdown": "HOST's rail NIC administratively down.",
    "nicup": "HOST's rail NIC administratively up.",
    "blackhole": "Drop HOST's RAIL silently; carrier stays up.",
    "unblackhole": "Stop dropping HOST's RAIL at the switch.",
}
for _name, _doc in _FAULTS.items():
    cli.add_command(_fault_command(_name, _doc))

# Gray faults (gray.py): carrier stays up, the traffic suffers. Each takes one more argument.
_GRAY: dict[str, tuple[str, str]] = {
    "lossy": ("PERCENT", "Drop PERCENT % of the frames through HOST's RAIL, at random."),
    "slow": ("RATE", "Police each direction of HOST's RAIL to RATE (100MB, 100MiB, 800mbit)."),
    "stall": ("TCP_PORT", "Drop the TCP flow(s) using TCP_PORT on HOST's RAIL; others pass."),
}
_GRAY_UNDO = {"unlossy": "Stop the loss on HOST's RAIL.", "unslow": "Stop policing HOST's RAIL.",
              "unstall": "Let every stalled flow on HOST's RAIL pass again."}


def _gray_command(name: str, arg: str, doc: str) -> click.Command:
    @click.command(name=name, help=doc, context_settings=_ARGS_MAY_LOOK_LIKE_OPTIONS)
    @prefix_option
    @click.argument("host")
    @click.argument("rail")
    @click.argument("value", metavar=arg)
    @as_root
    def command(prefix: str, host: str, rail: str, value: str) -> None:
        lab = Lab.attach(prefix)
        t_ns = getattr(lab, name)(host, rail, value)
        lab.close()
        click.echo(f"{name} {host} {rail} {value}: done at monotonic {t_ns} ns")

    return command


for _name, (_arg, _doc) in _GRAY.items():
    cli.add_command(_gray_command(_name, _arg, _doc))
for _name, _doc in _GRAY_UNDO.items():
    cli.add_command(_fault_command(_name, _doc))


@cli.command(context_settings=_ARGS_MAY_LOOK_LIKE_OPTIONS)
@prefix_option
@click.argument("host")
@click.argument("rail")
@click.option("--count", default=3, show_default=True, help="Cut/restore cycles.")
@click.option("--period-ms", default=200.0, show_default=True, help="Length of one cycle.")
@as_root
def flap(prefix: str, host: str, rail: str, count: int, period_ms: float) -> None:
    """Cut and restore HOST's RAIL repeatedly; ends restored."""
    lab = Lab.attach(prefix)
    stamps = lab.flap(host, rail, count=count, period_ms=period_ms)
    lab.close()
    click.echo(f"flap {host} {rail}: {len(stamps)} transitions, first at monotonic "
               f"{stamps[0]} ns, last at {stamps[-1]} ns")


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="linkguard-lab")


# Subcommands that live in other modules, "module:attribute", one line each.
EXTRA_COMMANDS = [
    "linkguard_lab.demo:demo",
]
for _spec in EXTRA_COMMANDS:
    _module, _attr = _spec.split(":")
    cli.add_command(getattr(importlib.import_module(_module), _attr))
