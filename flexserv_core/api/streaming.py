"""Server-sent events for the OpenAI streaming routes.

A route builds an async generator that acquires the model, plans the request,
admits its sequences (each choice runs to its first token, so a full queue's 429
is still a 429), then yields :data:`READY` before producing any event. :func:`sse_response`
runs it up to that point *before* the response starts, so an unknown model, a
too-long prompt or a bad parameter is still a JSON error with its 4xx status;
afterwards the generator (and the model lease it holds) lives exactly as long as
the stream. When the client disconnects, Litestar cancels the stream and the
response's background task closes the generator, which closes the model's token
iterators.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any, Final, cast

import msgspec
from litestar import Request
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from flexserv_core.api.disconnect import until_disconnect
from flexserv_core.errors import ClientDisconnected, FlexServError, ServiceUnavailable
from flexserv_core.server import FlexServer
from flexserv_core.shutdown import ShutdownNotice, shutdown_notice

log = logging.getLogger(__name__)

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_MEDIA_TYPE: Final = "text/event-stream"
DONE: Final = b"data: [DONE]\n\n"
SHUTDOWN_MESSAGE: Final = "The server is shutting down; this stream was ended at its shutdown timeout."


class _Ready:
    """Yielded once by a stream generator when validation is over."""


READY: Final = _Ready()

SSEGenerator = AsyncGenerator[bytes | _Ready, None]


def sse_event(payload: bytes) -> bytes:
    """One ``data:`` event holding a JSON payload."""
    return b"data: " + payload + b"\n\n"


#: Bound of an error event's message (streams carry no request to read settings from).
MAX_EVENT_ERROR_CHARS: Final = 1024


def error_event(exc: BaseException) -> bytes:
    """An OpenAI-shaped error as an event (the official SDK raises it as ``APIError``)."""
    if isinstance(exc, FlexServError):
        body = exc.to_dict(MAX_EVENT_ERROR_CHARS)
    else:
        log.error("streaming generation failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
        body = {
            "error": {
                "message": "The server had an error while generating.",
                "type": "server_error",
                "param": None,
                "code": "internal_error",
            }
        }
    return sse_event(msgspec.json.encode(body))


async def sse_response(
    events: SSEGenerator, server: FlexServer | None = None, request: Request[Any, Any, Any] | None = None
) -> Stream:
    """Run ``events`` to :data:`READY` (errors propagate as JSON errors), then stream it.

    With ``server``, the stream ends with an error event and ``[DONE]`` if the
    server's shutdown timeout passes while it runs.
    """
    if request is None:
        first = await events.__anext__()
    else:  # a client gone while its stream waits for admission (a queue slot) frees its place
        try:
            first = await until_disconnect(request, events.__anext__())
        except ClientDisconnected:
            await events.aclose()
            raise
    if first is not READY:
        await events.aclose()
        raise RuntimeError("a stream generator must yield READY first")
    # After READY the generator yields bytes only.
    body = cast("AsyncGenerator[bytes, None]", events)
    if server is not None:
        body = _until_cut(body, shutdown_notice(server))
    return Stream(body, media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS, background=BackgroundTask(body.aclose))


async def _until_cut(events: AsyncGenerator[bytes, None], notice: ShutdownNotice) -> AsyncGenerator[bytes, None]:
    """``events`` until the shutdown notice cuts streams; then an error event and ``[DONE]``.

    Each step of ``events`` runs in a task raced against the cut; whatever ends
    this generator (the cut, a disconnect, the end) stops that task before
    ``events`` is closed, so the model's lease and token iterators close with it.
    """
    cut = asyncio.ensure_future(notice.wait_cut())
    step: asyncio.Future[bytes] | None = None
    try:
        while True:
            step = asyncio.ensure_future(events.__anext__())
            await asyncio.wait({step, cut}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                break
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
        await _stop(step)
        log.warning("shutdown timeout reached: ending a stream with an error event")
        yield error_event(ServiceUnavailable(SHUTDOWN_MESSAGE, code="server_shutting_down"))
        yield DONE
    finally:
        cut.cancel()
        if step is not None:
            await _stop(step)
        await events.aclose()


async def _stop(step: asyncio.Future[bytes]) -> None:
    if not step.done():
        step.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
        await step
