"""Server-sent events for the OpenAI streaming routes.

A route builds an async generator that acquires the model, plans the request,
then yields :data:`READY` before producing any event. :func:`sse_response`
runs it up to that point *before* the response starts, so an unknown model, a
too-long prompt or a bad parameter is still a JSON error with its 4xx status;
afterwards the generator (and the model lease it holds) lives exactly as long as
the stream. When the client disconnects, Litestar cancels the stream and the
response's background task closes the generator, which closes the model's token
iterators.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Final, cast

import msgspec
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from flexserv_core.errors import FlexServError

log = logging.getLogger(__name__)

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_MEDIA_TYPE: Final = "text/event-stream"
DONE: Final = b"data: [DONE]\n\n"


class _Ready:
    """Yielded once by a stream generator when validation is over."""


READY: Final = _Ready()

SSEGenerator = AsyncGenerator[bytes | _Ready, None]


def sse_event(payload: bytes) -> bytes:
    """One ``data:`` event holding a JSON payload."""
    return b"data: " + payload + b"\n\n"


def error_event(exc: BaseException) -> bytes:
    """An OpenAI-shaped error as an event (the official SDK raises it as ``APIError``)."""
    if isinstance(exc, FlexServError):
        body = exc.to_dict()
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


async def sse_response(events: SSEGenerator) -> Stream:
    """Run ``events`` to :data:`READY` (errors propagate as JSON errors), then stream it."""
    first = await events.__anext__()
    if first is not READY:
        await events.aclose()
        raise RuntimeError("a stream generator must yield READY first")
    # After READY the generator yields bytes only.
    body = cast("AsyncGenerator[bytes, None]", events)
    return Stream(body, media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS, background=BackgroundTask(events.aclose))
