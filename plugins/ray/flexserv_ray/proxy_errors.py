"""OpenAI-shaped errors for what Ray's HTTP proxy answers itself.

Two answers come from Ray's proxy, not from the FlexServ app in a replica:

* back-pressure (``max_queued_requests`` reached), a request timeout, a path with
  no application: a plain-text body (``Request dropped due to backpressure...``);
* a replica that dies: before it answered, the proxy's ASGI call returns without
  a response (uvicorn then sends a bare 500); while it streamed, the call returns
  without the final body message, so the client sees the connection cut mid-stream
  instead of the end of an event stream.

Ray runs the ASGI middlewares that the function named by
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` returns around its proxy app, in
every proxy process. :class:`OpenAIErrors` is such a middleware: it rewrites the
proxy's own error bodies as ``{"error": {...}}`` (status and ``Retry-After`` kept),
answers a request whose replica died before answering with a 503 and
``Retry-After``, and ends a stream cut by a dead replica with an error event and
``data: [DONE]``. Responses of the app itself (JSON errors, complete streams) pass
through untouched, as do Ray's own routes under ``/-/``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

#: Ray reads this in each proxy process (at start) and applies what the function returns.
PROXY_CALLBACK_ENV: Final = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK: Final = "flexserv_ray.proxy_errors:proxy_middlewares"
#: ``Retry-After`` (seconds) of the 503 sent when a replica died before answering.
RETRY_AFTER_ENV: Final = "FLEXSERV_RAY_RETRY_AFTER"

#: (type, code) of the error body by status; others: invalid_request_error / server_error.
ERROR_KINDS: Final[dict[int, tuple[str, str]]] = {
    404: ("invalid_request_error", "not_found"),
    408: ("timeout_error", "timeout"),
    429: ("rate_limit_error", "too_many_requests"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "service_unavailable"),
}
MAX_MESSAGE_CHARS: Final = 1024
REPLICA_LOST: Final = (
    "The replica serving this request stopped before it answered (Ray Serve replaces it); retry the request."
)
STREAM_CUT: Final = (
    "The replica serving this stream stopped mid-stream (Ray Serve replaces it); the output above is "
    "incomplete, retry the request."
)
DONE: Final = b"data: [DONE]\n\n"


def proxy_env(retry_after: float) -> dict[str, str]:
    """Environment that makes Ray's proxies run :class:`OpenAIErrors` (set it on every node)."""
    return {PROXY_CALLBACK_ENV: PROXY_CALLBACK, RETRY_AFTER_ENV: f"{retry_after:g}"}


def proxy_middlewares() -> list[Any]:
    """The ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` target: Ray wants Starlette ``Middleware``."""
    from starlette.middleware import Middleware

    return [Middleware(OpenAIErrors, retry_after=float(os.environ.get(RETRY_AFTER_ENV) or 1.0))]


def error_body(status: int, message: str, *, code: str | None = None) -> bytes:
    default_type = "invalid_request_error" if status < 500 else "server_error"
    error_type, default_code = ERROR_KINDS.get(
        status, (default_type, "invalid_request" if status < 500 else "server_error")
    )
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    error = {"message": message, "type": error_type, "param": None, "code": code or default_code}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def _header(headers: list[Any], name: bytes) -> bytes:
    return next((bytes(v) for k, v in headers if bytes(k).lower() == name), b"")


class _Response:
    """What the wrapped app has sent of one HTTP response, and the rewriting of Ray's errors."""

    def __init__(self, send: Send) -> None:
        self.downstream = send
        self.started = False  # http.response.start went to the client
        self.complete = False  # the final body message went to the client
        self.event_stream = False
        self.held_start: Message | None = None  # a Ray error's start, held while its body arrives
        self.held_body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            content_type = _header(headers, b"content-type")
            if message["status"] >= 400 and not content_type.startswith(b"application/json"):
                self.held_start = message  # Ray's plain-text error: rewritten once its body is in
                return
            self.event_stream = content_type.startswith(b"text/event-stream")
            self.started = True
        elif message["type"] == "http.response.body":
            if self.held_start is not None:
                self.held_body += message.get("body", b"")
                if not message.get("more_body", False):
                    await self.flush_held()
                return
            if not message.get("more_body", False):
                self.complete = True
        await self.downstream(message)

    async def flush_held(self) -> None:
        start, text = self.held_start, self.held_body.decode("utf-8", "replace").strip()
        assert start is not None
        self.held_start, self.held_body = None, b""
        status = int(start["status"])
        await self.send_error(status, text or f"HTTP {status}", headers=list(start.get("headers", [])))

    async def send_error(self, status: int, message: str, *, headers: list[Any], code: str | None = None) -> None:
        body = error_body(status, message, code=code)
        kept = [(k, v) for k, v in headers if bytes(k).lower() not in (b"content-type", b"content-length")]
        await self.downstream(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *kept,
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await self.downstream({"type": "http.response.body", "body": body, "more_body": False})
        self.started = self.complete = True

    async def end_cut_stream(self) -> None:
        event = b"data: " + error_body(503, STREAM_CUT, code="replica_failed") + b"\n\n"
        await self.downstream({"type": "http.response.body", "body": event + DONE, "more_body": False})
        self.complete = True


class OpenAIErrors:
    """ASGI middleware around Ray's HTTP proxy app (see the module docstring)."""

    def __init__(self, app: ASGIApp, retry_after: float = 1.0) -> None:
        self.app = app
        self.retry_after = retry_after

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or str(scope.get("path", "")).startswith("/-/"):
            await self.app(scope, receive, send)
            return
        response = _Response(send)
        client_gone = False

        async def watched_receive() -> Message:
            nonlocal client_gone
            message = await receive()
            if message["type"] == "http.disconnect":
                client_gone = True
            return message

        failure: Exception | None = None
        try:
            await self.app(scope, watched_receive, response.send)
        except Exception as exc:  # the proxy's own failure: answered like a lost replica, then re-raised
            failure = exc
        try:
            if client_gone or response.complete:
                pass
            elif response.held_start is not None:
                await response.flush_held()
            elif not response.started:
                log.warning("a replica stopped before answering %s %s", scope.get("method"), scope.get("path"))
                retry = [(b"retry-after", str(max(0, math.ceil(self.retry_after))).encode())]
                await response.send_error(503, REPLICA_LOST, headers=retry, code="replica_failed")
            elif response.event_stream:
                log.warning("a replica stopped mid-stream on %s: ending the stream with an error event", scope["path"])
                await response.end_cut_stream()
        except OSError:
            pass  # the client went away meanwhile: nothing left to tell it
        if failure is not None:
            raise failure
