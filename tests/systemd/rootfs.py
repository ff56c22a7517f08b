"""The root file system the systemd tier boots: Debian 12 built by mmdebstrap, cached.

Built once into CACHE_DIR/bookworm-<hash of rootfs-packages.txt> (rebuilt when the list changes
or the directory is missing), from the host's own apt sources; booted only through a volatile
overlay, so a run never changes it.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_DIR = Path(os.environ.get("LG_SYSTEMD_CACHE", "/var/cache/linkguard-test"))
PACKAGES_FILE = Path(__file__).with_name("rootfs-packages.txt")
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")  # Debian 12's deb822 default
BUILD_TIMEOUT_S = 900


def packages() -> list[str]:
    lines = PACKAGES_FILE.read_text(encoding="utf-8").splitlines()
    return [w for line in lines if (w := line.split("#", 1)[0].strip())]


def sources() -> Path:
    """The host's apt sources (mmdebstrap reads a file given as its mirror)."""
    for path in (HOST_SOURCES, Path("/etc/apt/sources.list")):
        if path.is_file() and path.stat().st_size:
            return path
    raise RuntimeError(f"no apt sources on this host ({HOST_SOURCES} or /etc/apt/sources.list)")


def cached_rootfs() -> Path:
    """The cached root file system, built first if missing (one builder at a time)."""
    key = hashlib.sha256("\n".join(packages()).encode()).hexdigest()[:16]
    target = CACHE_DIR / f"bookworm-{key}"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "sbin" / "init").exists():
            return target
        partial = CACHE_DIR / f".partial-{key}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            subprocess.run(
                ["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
                 "--include=" + ",".join(packages()), "bookworm", str(partial), str(sources())],
                check=True, timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
            partial.rename(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target
