"""The shutdown notice: when the server started draining, and when streams are cut.

``flexserv run`` begins the notice as soon as it receives SIGTERM/SIGINT; streams
still running ``--shutdown-timeout`` seconds later end with an OpenAI error event
and ``data: [DONE]`` (see :mod:`flexserv_core.api.streaming`) instead of being
dropped mid-event when uvicorn closes the connections.
"""

from __future__ import annotations

import asyncio

from flexserv_core.server import FlexServer
from flexserv_core.stash import StashKey


class ShutdownNotice:
    def __init__(self) -> None:
        self._cut = asyncio.Event()
        self.draining = False

    def begin(self, grace: float) -> None:
        """Start draining (in the event loop); cut streams after ``grace`` seconds."""
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(grace, self._cut.set)

    @property
    def cut(self) -> bool:
        return self._cut.is_set()

    async def wait_cut(self) -> None:
        await self._cut.wait()


SHUTDOWN: StashKey[ShutdownNotice] = StashKey()


def shutdown_notice(server: FlexServer) -> ShutdownNotice:
    """The server's notice, made on first use."""
    return server.state.get_or_create(SHUTDOWN, ShutdownNotice)
