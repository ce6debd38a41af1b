"""Testing what ``-p no:NAME`` does: the same requests on a real server without a
plugin and on one with it.

::

    with served_with_and_without("my-plugin", ["my-plugin", "responses"]) as servers:
        base, fake = servers["off"]
        response = await post_read(base, "/v1/chat/completions", {...}, stream=True)
        assert response.status_code == 400  # refused before a stream began
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from flexserv_core.testing.app import make_app
from flexserv_core.testing.fakes import FakeBackendPlugin
from flexserv_core.testing.process import ServedApp


@contextmanager
def served_with_and_without(
    name: str,
    plugins: Sequence[object | str],
    backend: Callable[[], FakeBackendPlugin] = FakeBackendPlugin,
) -> Iterator[dict[str, tuple[str, FakeBackendPlugin]]]:
    """Two apps on loopback sockets with ``plugins`` and a fresh ``backend()`` each:
    ``"off"`` blocks ``name`` (as ``-p no:NAME`` does), ``"on"`` does not. Each value
    is ``(base_url, its backend plugin)``, whose ``requests`` show what was generated."""
    off, on = backend(), backend()
    with (
        ServedApp(make_app([off, *plugins], block=[name])) as without,
        ServedApp(make_app([on, *plugins])) as with_plugin,
    ):
        yield {"off": (without, off), "on": (with_plugin, on)}


async def post_read(
    base_url: str, path: str, body: Mapping[str, Any], *, stream: bool = False, timeout: float = 30
) -> httpx.Response:
    """POST ``body`` with ``stream`` set and return the response read to its end (a
    stream's events too): its headers say whether a refusal came before a stream began."""
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=timeout) as client,
        client.stream("POST", path, json={**body, "stream": stream}) as response,
    ):
        await response.aread()
        return response
