"""sd_notify(3) in pure Python: READY=1, WATCHDOG=1, RELOADING=1, STOPPING=1 and STATUS=.

The protocol is one datagram of newline-separated KEY=VALUE lines to the unix socket named by
$NOTIFY_SOCKET; a name starting with "@" is in the abstract namespace (sd_notify(3), "NOTES").
Outside systemd (no $NOTIFY_SOCKET) every call is a no-op, so the daemon needs no flag for it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class SdNotifier:
    """Talks to systemd's notification socket; all methods are cheap and never raise."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.address = _socket_address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_s = watchdog_interval_s(env)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        """Send one message; True if it was delivered (False outside systemd, or on error)."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(lines).encode(), self.address)
            return True
        except OSError as exc:  # systemd gone or socket full: not a reason to stop the daemon
            log.debug("sd_notify %s failed: %s", lines, exc)
            return False

    def ready(self, status: str = "") -> bool:
        """Start-up finished (Type=notify: `systemctl start` returns now)."""
        return self.notify("READY=1", *_status(status))

    def reloading(self) -> bool:
        """A reload began; call ready() when it is done. MONOTONIC_USEC is what systemd >= 253
        requires for Type=notify-reload; older versions ignore it."""
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        """A one-line status shown by `systemctl status`."""
        return self.notify(*_status(text))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    async def run_watchdog(self, healthy: Callable[[], bool]) -> None:
        """Ping the watchdog at half its interval while `healthy()` holds, until cancelled.

        A wedged daemon must *stop* pinging so systemd restarts it: pass a check of real
        progress (e.g. the shm heartbeat is fresh), not `lambda: True`.
        """
        if self.watchdog_s is None or self.address is None:
            return
        period = self.watchdog_s / 2  # sd_watchdog_enabled(3): notify at half the interval
        while True:
            if healthy():
                self.watchdog()
            else:
                log.warning("watchdog: not healthy, withholding WATCHDOG=1")
            await asyncio.sleep(period)


def watchdog_interval_s(env: Mapping[str, str]) -> float | None:
    """$WATCHDOG_USEC in seconds if the watchdog is meant for this process (sd_watchdog_enabled)."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6


def _socket_address(name: str) -> str | None:
    if not name:
        return None
    if name.startswith("@"):
        return "\0" + name[1:]  # abstract namespace (unix(7))
    if name.startswith("/"):
        return name
    return None  # systemd also allows vsock: addresses, which a host daemon never gets


def _status(text: str) -> list[str]:
    return [f"STATUS={' '.join(text.split())}"] if text else []
