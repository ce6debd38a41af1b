"""Cancelling a non-streaming request's work when its client goes away.

Streams are cancelled by Litestar when the client disconnects; a plain request
would otherwise keep generating for nobody. :func:`until_disconnect` races the
work against the ASGI ``http.disconnect`` message (the body has been read, so
the next message can only be that). Every non-streaming inference route (chat,
completions, responses, embeddings, transcriptions and translations) awaits its
model through it: cancelling the awaited coroutine is what tells the model to
stop (a text sequence is cancelled within one decode step, a micro-batched job
that has not started leaves its queue, a Whisper decode stops after its current
segment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from litestar import Request

from flexserv_core.errors import ClientDisconnected

log = logging.getLogger(__name__)
T = TypeVar("T")


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(request: Request[Any, Any, Any], work: Awaitable[T]) -> T:
    """``await work``, cancelled (raising :class:`ClientDisconnected`) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("client disconnected: cancelled %s %s", request.method, request.url.path)
        raise ClientDisconnected("The client closed the connection before the response was ready.")
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
