"""Fixtures shared by the unit tests of the plugin socket (verdicts and census)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[str]:
    """A short path for a unix socket (sun_path holds 107 bytes; tmp_path may be longer)."""
    path = f"/tmp/lgv-{os.getpid()}-{tmp_path.name[-20:]}.sock"
    yield path
    if os.path.exists(path):
        os.unlink(path)
