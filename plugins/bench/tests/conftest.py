"""Fixtures: a real FlexServ app with the fake backend on a loopback port, for ``flexserv bench`` to load."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench_server import TOKEN_DELAY, Served, serve_fake


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve_fake(token_delay=TOKEN_DELAY)


@pytest.fixture(scope="module")
def failing_server() -> Iterator[Served]:
    """Every stream fails after three tokens (a backend bug mid-stream)."""
    yield from serve_fake(fail_after=3)
