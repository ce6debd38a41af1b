"""Request ids: taken from ``X-Request-Id`` when safe, generated otherwise.

The id lives in a context variable for the whole request, so every log line
written while serving it carries it (see :mod:`flexserv_core.edge.logs`), and
:func:`with_request_id` returns it on every response, errors included.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final

from litestar.types import Message, Scope

from flexserv_core.edge import ignored_fields

HEADER: Final = "x-request-id"
MAX_LENGTH: Final = 128
# Letters, digits and the punctuation ids commonly use (UUIDs, ULIDs, trace ids);
# never spaces or control characters, so an id cannot forge a log line or a header.
_SAFE: Final = re.compile(rf"[A-Za-z0-9._:+=@/-]{{1,{MAX_LENGTH}}}")

_current: ContextVar[str | None] = ContextVar("flexserv_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return _current.get()


def accept_or_generate(value: str | None) -> str:
    """``value`` when it is a safe id (bounded length, safe charset), else a new one."""
    if value is not None and _SAFE.fullmatch(value):
        return value
    return uuid.uuid4().hex


def _header(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == HEADER.encode():
            return value.decode("latin-1")
    return None


async def with_request_id(app: Callable[..., Awaitable[None]], scope: Any, receive: Any, send: Any) -> None:
    """Run ``app`` for one HTTP request with its id set, and add the id to the response
    (and the request fields it ignored, :mod:`.ignored_fields`)."""
    if scope["type"] != "http":
        await app(scope, receive, send)
        return
    request_id = accept_or_generate(_header(scope))
    encoded = request_id.encode()

    ignored, ignored_token = ignored_fields.collecting()

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER.encode()]
            headers.append((HEADER.encode(), encoded))
            value = ignored_fields.header_value(ignored)
            if value is not None:
                headers.append((ignored_fields.HEADER.encode(), value.encode()))
            message["headers"] = headers
        await send(message)

    token = _current.set(request_id)
    try:
        await app(scope, receive, send_with_id)
    finally:
        _current.reset(token)
        ignored_fields.stop_collecting(ignored_token)
