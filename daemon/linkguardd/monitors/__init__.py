"""The monitors the daemon runs, as an explicit table (one line each; a test checks that every
module in this package that defines a monitor appears here)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from linkguardd.monitors.base import Monitor
from linkguardd.settings import Settings


def _netlink(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.netlink import NetlinkMonitor

    return NetlinkMonitor(list(nics), netns=s.netns or None, stats_interval_s=s.stats_interval_s,
                          sysfs_root=s.sysfs_root)


def _rdma(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.rdma import RdmaMonitor

    return RdmaMonitor(sysfs_root=s.sysfs_root, interfaces=list(nics),
                       poll_interval_s=s.stats_interval_s)


def _rdma_counters(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.rdma_counters import RdmaCountersMonitor

    return RdmaCountersMonitor(sysfs_root=s.sysfs_root, interfaces=list(nics),
                               poll_interval_s=s.stats_interval_s)


def _phy(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.phy import PhyMonitor

    return PhyMonitor(list(nics), netns=s.netns or None, interval_s=s.stats_interval_s)


def _dom(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.dom import DomMonitor

    return DomMonitor(list(nics), netns=s.netns or None, interval_s=s.dom_interval_s)


def _plugin_verdicts(s: Settings, nics: Sequence[str]) -> Monitor:
    from linkguardd.monitors.plugin_verdicts import PluginVerdictMonitor

    return PluginVerdictMonitor(s.plugin_verdict_socket, nics)


# (module name, factory): the engine starts them in this order and stops them in reverse.
MONITORS: tuple[tuple[str, Callable[[Settings, Sequence[str]], Monitor]], ...] = (
    ("netlink", _netlink),
    ("rdma", _rdma),
    ("rdma_counters", _rdma_counters),
    ("phy", _phy),
    ("dom", _dom),
    ("plugin_verdicts", _plugin_verdicts),
)


def build_monitors(s: Settings, nics: Sequence[str]) -> list[Monitor]:
    return [factory(s, nics) for _, factory in MONITORS]
