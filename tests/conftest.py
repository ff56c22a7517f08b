"""Shared pytest options: `--update-golden` rewrites the golden files instead of comparing."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files (tests/unit/golden/*, and systemd/ files "
                          "generated from settings.py) from the current output")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """golden(name, text): compare `text` with tests/unit/golden/<name> (or rewrite it)."""
    directory = Path(__file__).parent / "unit" / "golden"

    def check(name: str, text: str) -> None:
        path = directory / name
        if request.config.getoption("--update-golden"):
            directory.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"{path} missing: run pytest --update-golden"
        assert text == path.read_text(encoding="utf-8"), (
            f"output differs from {path}; if the change is intended, run pytest --update-golden")

    return check
