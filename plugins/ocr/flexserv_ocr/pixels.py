"""The server's budget of decoded page pixels (``--ocr-max-pixels-in-flight``).

A page costs its pixels many times over once decoded (the RGB image, the engine's
arrays: about 14-18 bytes a pixel with RapidOCR), while its upload can be a few
hundred KiB of PNG; without a budget, N concurrent requests hold N such pages.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from flexserv_core import FlexServer, StashKey
from flexserv_ocr.settings import OcrSettings


class PixelBudget:
    """Pixels of page images decoded at once, all requests together. A page waits
    (first come, first served) for its pixels before it is decoded or rendered and
    gives them back once it is read; a page larger than the whole budget takes all
    of it, so it still runs, alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @asynccontextmanager
    async def hold(self, pixels: int) -> AsyncIterator[None]:
        share = min(pixels, self.limit)
        await self._acquire(share)
        try:
            yield
        finally:
            self._release(share)

    async def _acquire(self, share: int) -> None:
        if not self._waiting and self.held + share <= self.limit:
            self.held += share
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (share, granted)
        self._waiting.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(share)  # granted as the waiter was cancelled: give it back
            else:
                self._waiting.remove(entry)
                self._grant()  # a smaller page behind this one may fit now
            raise

    def _release(self, share: int) -> None:
        self.held -= share
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.held + self._waiting[0][0] <= self.limit:
            share, granted = self._waiting.popleft()
            if granted.done():
                continue
            self.held += share
            granted.set_result(None)


PIXELS_KEY = StashKey[PixelBudget]("ocr-pixels-in-flight")


def pixel_budget(server: FlexServer) -> PixelBudget:
    """The server's budget, made on first use from its settings."""
    limit = server.settings.get(OcrSettings).ocr_max_pixels_in_flight
    return server.state.get_or_create(PIXELS_KEY, lambda: PixelBudget(limit))
