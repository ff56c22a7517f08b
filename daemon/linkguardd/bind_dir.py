"""Where the daemon binds a unix socket before anyone may reach it.

A socket bound at its public path is reachable, with the umask's mode, until chmod() runs, and
chmod() by path follows whatever is at that path by then. So each socket is bound inside a
fresh 0700 directory next to its public path, given its mode there, and renamed into place.
"""
from __future__ import annotations

import os
import shutil


def private_bind_dir(public_path: str) -> str:
    """(Re)create the 0700 directory, next to `public_path`, to bind its socket in."""
    parent, base = os.path.split(os.path.abspath(public_path))
    path = os.path.join(parent, f".{base}.bind")
    shutil.rmtree(path, ignore_errors=True)  # a leftover from a killed daemon
    os.mkdir(path, 0o700)
    return path
