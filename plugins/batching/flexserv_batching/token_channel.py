"""How a text backend's engine thread hands sampled tokens to the request's coroutine.

A batching engine runs its decode loop on a thread of its own, while each request
iterates its tokens on the event loop. :class:`TokenChannel` is that hand-off for one
request: the engine thread :meth:`~TokenChannel.put`\\ s tokens (or the exception that
ends the request), the request's coroutine iterates :meth:`~TokenChannel.tokens`, and a
consumer that stops early (the client went away, a stop string matched) runs the
engine's ``on_abandon`` so the engine can drop the sequence before its next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

import msgspec

from flexserv_core import FinishReason

__all__ = ["EngineToken", "TokenChannel"]


class EngineToken(msgspec.Struct, kw_only=True):
    """One sampled token, before detokenization.

    Attributes:
        token_id: the sampled id.
        logprob: its log-probability; ``None`` unless the request asked for logprobs.
        top_logprobs: the ``params.top_logprobs`` most likely ``(token_id, logprob)``
            pairs, most likely first; ``None`` unless asked for.
        finish_reason: ``"stop"`` or ``"length"`` on the request's last token, else ``None``.
    """

    token_id: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None
    finish_reason: FinishReason | None = None


class TokenChannel:
    """One request's tokens, from the engine thread to the coroutine that created it.

    Create it on the event loop (it binds the running loop, or ``loop`` when given).
    ``put`` is safe from any thread; ``tokens`` is iterated once, on the loop.
    """

    __slots__ = ("_loop", "_queue")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._queue: asyncio.Queue[EngineToken | BaseException] = asyncio.Queue()

    def put(self, item: EngineToken | BaseException) -> bool:
        """Hand ``item`` over; an exception ends the iteration by being raised in it.
        Returns ``False`` when the request's loop is closed: nobody will read this
        sequence any more, so the engine should drop it."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:
            return False
        return True

    async def tokens(self, on_abandon: Callable[[], None]) -> AsyncGenerator[EngineToken, None]:
        """The tokens up to and including the one with a ``finish_reason``.

        ``on_abandon`` runs (on the loop) when the iteration ends before that token,
        by the consumer closing it or being cancelled, never after a normal end or an
        error the engine put."""
        ended = False
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, BaseException):
                    ended = True
                    raise item
                ended = item.finish_reason is not None
                yield item
                if ended:
                    return
        finally:
            if not ended:
                on_abandon()
