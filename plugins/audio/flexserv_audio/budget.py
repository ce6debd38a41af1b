"""The server's budget of decoded audio (``--audio-max-seconds-in-flight``).

Decoded audio is mono float32 at the model's rate (16 kHz for Whisper: 64 KB a
second, 115 MB at the default 1800 s limit), while its upload can be a few MB; a
model transcribes one request at a time, and without a budget every request
waiting for it held its decoded audio.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from flexserv_audio.schemas import TranscriptionSettings
from flexserv_core import FlexServer, StashKey


def milliseconds(seconds: float) -> int:
    """The budget's unit: whole milliseconds of audio, so that shares add up exactly."""
    return math.ceil(seconds * 1000)


class Share:
    """What one request holds of an :class:`AudioBudget`."""

    def __init__(self, budget: AudioBudget, units: int) -> None:
        self._budget = budget
        self.units = units

    def shrink(self, units: int) -> None:
        """Give back what is over ``units`` (the audio decoded shorter than reserved)."""
        if units < self.units:
            self._budget._release(self.units - units)
            self.units = units


class AudioBudget:
    """Milliseconds of audio decoded at once, all requests together. A request
    waits (first come, first served) for a share before it decodes and holds it
    until its model is done with the audio; a share larger than the whole budget
    takes all of it, so that request still runs, alone."""

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


BUDGET_KEY = StashKey[AudioBudget]("audio-seconds-in-flight")


def audio_budget(server: FlexServer) -> AudioBudget:
    """The server's budget, made on first use from its settings."""
    limit = milliseconds(server.settings.get(TranscriptionSettings).audio_max_seconds_in_flight)
    return server.state.get_or_create(BUDGET_KEY, lambda: AudioBudget(limit))
