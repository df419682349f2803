"""Fixtures shared by the unit tests: a real hand-off region (a sealed memfd, as a shim makes
it) and that region mapped as the daemon maps it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lazyd.handoff import region as hs
from lazyd.handoff.region import Region, map_region, unmap


@pytest.fixture
def fd() -> Iterator[int]:
    region = hs.create_region()
    yield region
    os.close(region)


@pytest.fixture
def mapped(fd: int) -> Iterator[Region]:
    buf = map_region(fd)
    yield Region(buf)
    unmap(buf)
