"""`linkguard-lab demo`: a cable cut and its repair, seen as kernel carrier events.

Builds a 2x2 lab under a fresh prefix, cuts host a's rail0 at the switch, shows that only
a's rail0 lost carrier (read from /sys inside each host's namespace), restores it, and always
tears the lab down. It will grow into the daemon + plugin failover demo.
"""

from __future__ import annotations

import signal
import sys
import time

import click

from linkguard_lab.errors import LabError
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.netns import require_root


class Timeline:
    def __init__(self, echo=click.echo) -> None:
        self.t0 = time.monotonic_ns()
        self.echo = echo

    def at(self, t_ns: int, text: str) -> None:
        self.echo(f"[{(t_ns - self.t0) / 1e6:9.3f} ms] {text}")

    def __call__(self, text: str) -> None:
        self.at(time.monotonic_ns(), text)


def show_carriers(lab: Lab, say: Timeline) -> None:
    for host in lab.hosts:
        cells = []
        for rail in lab.rails:
            nic = lab.topo.rail_ifname(rail)
            carrier = lab.sysfs(host, nic, "carrier")
            changes = lab.sysfs(host, nic, "carrier_changes")
            state = {"1": "UP", "0": "DOWN"}.get(carrier or "", "unreadable")
            cells.append(f"{nic} carrier {state:4} (changes {changes})")
        say(f"  host {host}: " + "   ".join(cells))


def run_demo(prefix: str | None = None, echo=click.echo) -> None:
    lab = Lab(prefix or unique_prefix("lgd"), hosts=2, rails=2)
    say = Timeline(echo)
    say(f"building lab {lab.prefix}: hosts a, b; rails 0, 1; one bridge per rail")
    try:
        lab.up()
        say("lab up; carrier as the kernel reports it in /sys inside each host:")
        show_carriers(lab, say)
        say(f"ping a -> b over rail0 ({lab.address('b', 0)}): "
            f"{'ok' if lab.ping('a', 'b', 0) else 'FAILED'}")

        t = lab.cut("a", 0)
        say.at(t, f"FAULT cut a 0: switch port {lab.topo.port('a', 0)} down "
                  "(like a pulled cable at the switch)")
        show_carriers(lab, say)
        lost_a, kept_b = not lab.carrier("a", 0), lab.carrier("b", 0)
        say(f"  -> a rail0 lost carrier: {lost_a}; b rail0 kept carrier: {kept_b}")

        t = lab.restore("a", 0)
        say.at(t, f"REPAIR restore a 0: switch port {lab.topo.port('a', 0)} up")
        show_carriers(lab, say)
        say(f"ping a -> b over rail0: {'ok' if lab.ping('a', 'b', 0) else 'FAILED'}")
        if not (lost_a and kept_b and lab.carrier("a", 0)):
            raise LabError("the cut was not seen as expected (see above)")
    finally:
        lab.down()
        say(f"lab {lab.prefix} torn down")


def _sigterm(signum: int, frame: object) -> None:
    # Turn SIGTERM into an exception so run_demo's finally still tears the lab down.
    raise SystemExit(128 + signum)


@click.command()
@click.option("--prefix", default=None, help="Lab prefix (default: a fresh lgdXXXX).")
def demo(prefix: str | None) -> None:
    """Cut and restore a rail on a throw-away lab."""
    require_root()
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        run_demo(prefix)
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.flush()
