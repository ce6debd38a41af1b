"""Helpers for the bench tests: a real FlexServ app with the deterministic fake backend, served by uvicorn on a
loopback port in a thread, for ``flexserv bench`` to load."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app

#: Seconds per fake token: slow enough that concurrency visibly helps, fast enough for CI.
TOKEN_DELAY = 0.01


@dataclass
class Served:
    url: str
    fake: FakeBackendPlugin


def serve_fake(**options: Any) -> Iterator[Served]:
    fake = FakeBackendPlugin(**options)
    with ServedApp(make_app([fake])) as url:
        yield Served(url, fake)
