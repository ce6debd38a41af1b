"""A budget of some resource (decoded pixels, seconds of audio, bytes) that all of a
server's requests draw on at once, first come, first served.

A request waits for its share before it makes the costly thing (decodes a page or
an upload) and gives it back when done. A share larger than the whole budget takes
all of it, so that request still runs, alone; a waiter cancelled (its client went
away) leaves the queue, and one behind it that fits now goes ahead. Event-loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Share:
    """What one request holds of a :class:`Budget`."""

    def __init__(self, budget: Budget, units: int) -> None:
        self._budget = budget
        self.units = units

    def shrink(self, units: int) -> None:
        """Give back what is over ``units`` (the thing came out smaller than reserved)."""
        if units < self.units:
            self._budget._release(self.units - units)
            self.units = units


class Budget:
    """``limit`` units in all; :meth:`hold` a share of them for as long as it is used."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @asynccontextmanager
    async def hold(self, units: int) -> AsyncIterator[Share]:
        share = Share(self, min(units, self.limit))
        await self._acquire(share.units)
        try:
            yield share
        finally:
            self._release(share.units)

    async def _acquire(self, units: int) -> None:
        if not self._waiting and self.held + units <= self.limit:
            self.held += units
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (units, granted)
        self._waiting.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(units)  # granted as the waiter was cancelled: give it back
            else:
                self._waiting.remove(entry)
                self._grant()  # a smaller share behind this one may fit now
            raise

    def _release(self, units: int) -> None:
        self.held -= units
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.held + self._waiting[0][0] <= self.limit:
            units, granted = self._waiting.popleft()
            if granted.done():
                continue
            self.held += units
            granted.set_result(None)
