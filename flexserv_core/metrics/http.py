"""Per-route HTTP request counts and durations, as an ASGI middleware.

Litestar runs app middleware after routing, so ``scope["path_template"]`` names
the route (``/v1/chat/completions``), never the raw path: label values stay few
whatever clients send. A streamed response counts when its body ends, so its
duration covers the whole stream; a client that disconnects first is counted
with the status already sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from litestar.enums import ScopeType

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

    from flexserv_core.metrics.core import ServerMetrics


def http_metrics_middleware(metrics: ServerMetrics) -> Callable[[ASGIApp], ASGIApp]:
    """A Litestar middleware factory recording into ``metrics``."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def record(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500  # what the server answers if the handler dies before sending

            async def send_wrapper(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, send_wrapper)
            finally:
                route = scope.get("path_template") or "unmatched"
                method = scope.get("method", "")
                metrics.http_requests.labels(route, method, str(status)).inc()
                metrics.http_request_duration.labels(route, method).observe(time.perf_counter() - started)

        return record

    return middleware
