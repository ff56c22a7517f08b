"""pytest fixtures for tests that need a lab. Register them from a conftest.py:

    from linkguard_lab.pytest_fixture import lab, lab_factory  # noqa: F401

`lab` is a fresh 2x2 lab; `lab_factory(hosts=, rails=, routed=)` makes more (other shapes, a
routed fabric, or two labs at once). Each lab gets a unique prefix (lgt + 4 hex digits), so tests may run in parallel,
and is always torn down, also when the test fails. Without root the tests are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from linkguard_lab.lab import Lab, unique_prefix

TEST_STEM = "lgt"


@pytest.fixture
def lab_factory() -> Iterator[Callable[..., Lab]]:
    if os.geteuid() != 0:
        pytest.skip("lab tests need root (network namespaces)")
    made: list[Lab] = []

    def make(hosts: int = 2, rails: int = 2, prefix: str | None = None,
             routed: bool = False) -> Lab:
        lab = Lab(prefix or unique_prefix(TEST_STEM), hosts, rails, routed=routed)
        made.append(lab)  # before up(): a failed up() is cleaned up here too
        return lab.up()

    try:
        yield make
    finally:
        errors = []
        for lab in reversed(made):
            try:
                lab.down()
            except Exception as exc:  # noqa: BLE001 - tear down the others, then report
                errors.append(f"{lab.prefix}: {exc}")
        if errors:
            pytest.fail("lab teardown failed: " + "; ".join(errors))


@pytest.fixture
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    return lab_factory()
