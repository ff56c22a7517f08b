"""linkguardd: the per-host NIC health daemon (entry point).

Loads and validates the configuration (exit 2 with one clear message before anything starts),
runs the engine with its monitors, the gRPC API and /metrics, and handles SIGTERM (clean
shutdown, shm file removed), SIGINT and SIGHUP (reload without resetting unchanged NICs).
"""
from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import sys
from typing import Any

import click

from linkguardd import settings as settings_mod
from linkguardd.api import ApiError, ApiServer
from linkguardd.core import build_core
from linkguardd.engine import Engine
from linkguardd.logs import DaemonLog, kv
from linkguardd.monitors import build_monitors
from linkguardd.pairing import (
    PairingError,
    backup_sets_by_name,
    format_set,
    list_pci_netdevs,
    read_topology,
)
from linkguardd.reload import plan_reload
from linkguardd.sdnotify import SdNotifier
from linkguardd.settings import ConfigError, Settings
from linkguardd.shm.layout import LG_SHM_COMPAT_VERSION, LG_SHM_VERSION
from linkguardd.state_file import state_dir_problem
from linkguardd.view import DaemonView

log = logging.getLogger("linkguardd")

SURFACE_STOP_TIMEOUT_S = 3.0  # the API; the engine bounds its monitors itself
# Open files the daemon asks for: both API sockets' connection caps (api/server.py) and ample
# room for netlink, sysfs and /proc. The unit's LimitNOFILE gives as much; elsewhere (a
# container, a shell) the soft limit may be 1024, and the daemon raises it up to the hard one.
OPEN_FILES = 4096


def raise_open_file_limit(wanted: int = OPEN_FILES) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        log.warning("open files limited to %d (hard limit); %d wanted: raise LimitNOFILE or "
                    "the container's nofile limit", target, wanted)


def resolve_nics(s: Settings) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The monitored NICs in rail order and each one's backup set, nearest first (raises
    PairingError)."""
    ifnames = list(s.interfaces) or list_pci_netdevs(s.sysfs_root)
    sets = backup_sets_by_name(read_topology(ifnames, s.sysfs_root), s.pairs, s.locality)
    return ifnames, {k: v for k, v in sets.items() if v}


def backups_text(backups: dict[str, tuple[str, ...]]) -> str:
    """rail0:rail1+rail2,rail1:rail0, as --pairs spells it."""
    return ",".join(f"{k}:{format_set(v)}" for k, v in backups.items())


async def run(s: Settings, params: dict[str, Any], logs: DaemonLog) -> int:
    """Runs until SIGTERM/SIGINT; `params` (flags and --config) are re-read on SIGHUP."""
    ifnames, backups = resolve_nics(s)
    if not ifnames:
        log.warning("no NIC to monitor: set `interfaces` (no PCI netdev found under %s)",
                    s.sysfs_root)
    core = build_core(s, ifnames, backups, build_monitors(s, ifnames))
    engine, view = core.engine, core.view
    surfaces = _operator_surfaces(view, s)
    notifier = SdNotifier()  # a no-op outside systemd
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reload_requested = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload_requested.set)
    await engine.start()
    started = []
    try:
        for start, stop_surface in surfaces:
            await start()
            started.append(stop_surface)
    except (ApiError, OSError) as exc:
        log.error("cannot serve the API: %s", exc)
        for stop_surface in reversed(started):
            await stop_surface()
        await engine.stop()
        return 1
    notifier.ready(f"watching {len(ifnames)} NICs")
    watchdog = loop.create_task(notifier.run_watchdog(lambda: view.heartbeat_age_s() < 1.0))
    log.info("started", extra=kv(nics=",".join(ifnames), shm=s.shm_path,
                                 backups=backups_text(backups), locality=s.locality))
    try:
        while not stop.is_set():
            waiter = asyncio.ensure_future(reload_requested.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if reload_requested.is_set():
                reload_requested.clear()
                notifier.reloading()
                await reload(engine, params, logs)
                notifier.ready(f"watching {len(engine.ifnames)} NICs")
    finally:
        notifier.stopping()
        watchdog.cancel()
        for stop_surface in reversed(started):
            try:
                await asyncio.wait_for(stop_surface(), SURFACE_STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("an operator surface did not stop within %g s",
                            SURFACE_STOP_TIMEOUT_S)
        await engine.stop()
        log.info("stopped")
    return 0


async def reload(engine: Engine, params: dict[str, Any], logs: DaemonLog) -> bool:
    """SIGHUP: apply the configuration again, or refuse it whole and keep everything running."""
    try:
        fresh = settings_mod.settings_from_click(params)
        ifnames, backups = resolve_nics(fresh)
    except (ConfigError, PairingError) as exc:
        log.error("reload refused, keeping the running configuration and state",
                  extra=kv(error=str(exc)))
        return False
    plan = plan_reload(engine.settings, fresh)
    if plan.needs_restart:
        log.warning("reload: these settings change only with a restart; their running values "
                    "stay", extra=kv(needs_restart=",".join(plan.needs_restart)))
    logs.reconfigure(plan.effective.log_level, plan.effective.log_format)
    await engine.reload(plan.effective, ifnames, backups,
                        build_monitors(plan.effective, ifnames))
    log.info("reloaded", extra=kv(nics=",".join(ifnames), changed=",".join(plan.changed),
                                  applied=",".join(plan.applied),
                                  needs_restart=",".join(plan.needs_restart)))
    return True


def _operator_surfaces(view: DaemonView, s: Settings) -> list[tuple[Any, Any]]:
    """(start, stop) coroutine pairs of the gRPC API, when configured (/metrics is an
    exporter: the engine starts it)."""
    out: list[tuple[Any, Any]] = []
    if s.grpc_socket and (exposure := settings_mod.admin_socket_exposure(s)):
        log.warning("api: %s", exposure)
    if s.grpc_socket:
        api = ApiServer(view, s.grpc_socket, ro_socket_path=s.grpc_ro_socket,
                        admin_group=s.admin_group, reader_group=s.reader_group)
        out.append((api.start, api.stop))
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="linkguard", prog_name="linkguardd",
                      message=f"%(prog)s %(version)s (shm layout {LG_SHM_VERSION}, readers "
                              f"of layout {LG_SHM_COMPAT_VERSION} and later compatible)")
@settings_mod.click_options()
@click.option("--check-config", is_flag=True, help="Validate the configuration and exit.")
def main(check_config: bool, **params: Any) -> None:
    """Watch NIC links, RDMA ports and optics; publish each NIC's health for NCCL."""
    try:
        s = settings_mod.settings_from_click(params)
        ifnames, backups = resolve_nics(s)
        if problem := state_dir_problem(s.state_dir):
            raise ConfigError(problem)
    except (ConfigError, PairingError) as exc:
        click.echo(f"linkguardd: {exc}", err=True)
        sys.exit(2)
    if check_config:
        click.echo(f"configuration ok: nics={','.join(ifnames) or '(none)'} "
                   f"backups={backups_text(backups) or '(none)'} locality={s.locality}")
        return
    logs = DaemonLog(sys.stderr)
    logs.setup(s.log_level, s.log_format)
    raise_open_file_limit()
    loop = asyncio.new_event_loop()
    code = loop.run_until_complete(run(s, params, logs))
    # Everything the daemon owns (shm file, sockets) is released by now. A worker thread
    # stuck in a kernel read (module EEPROM, netlink) must not keep the process alive, so the
    # executor's threads are not joined.
    logs.stop()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
