"""Helpers for the bench tests: a real FlexServ app with the deterministic fake backend, served by uvicorn on a
loopback port in a thread, for ``flexserv bench`` to load."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from flexserv_core.testing.app import make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

#: Seconds per fake token: slow enough that concurrency visibly helps, fast enough for CI.
TOKEN_DELAY = 0.01


@dataclass
class Served:
    url: str
    fake: FakeBackendPlugin


class ThreadedServer:
    """uvicorn serving an app on a free loopback port, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-bench", daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def serve_fake(**options: Any) -> Iterator[Served]:
    fake = FakeBackendPlugin(**options)
    with ThreadedServer(make_app([fake])) as url:
        yield Served(url, fake)
