"""Bounds on what one connection may cost before the app sees a request.

uvicorn's httptools protocol reads request heads of any size (llhttp buffers a
header value whole before handing it over), waits forever for a head or a body
that trickles in, and accepts any number of connections. This protocol, a small
subclass, adds what a server facing untrusted clients needs, all enforced before
the API-key check and the app:

- a request head (request line and headers) over ``--max-header-bytes`` or with
  more than ``--max-headers`` headers is answered 431 and the connection closed;
  at most one read past the limit is ever buffered;
- a head must be complete within ``--header-timeout`` seconds of the connection
  opening (or of the previous response ending), a body within
  ``--body-timeout`` seconds of its head; then the connection is closed (408 when
  nothing was answered yet), and a handler waiting for the body sees a disconnect;
- beyond ``--max-connections`` open connections a new one is answered 503 and
  closed at once;
- a request llhttp cannot parse (bad framing, an unknown method) is answered 400
  ``invalid_http_request``, where uvicorn answers in plain text.

Refusals are OpenAI-shaped JSON like every other error. After a refusal the
connection reads and drops what the client still sends for a moment before
closing (a "lingering close"), so the client reads the answer instead of a reset.
"""

from __future__ import annotations

import asyncio
import json
import logging
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from flexserv_core.errors import quote
from flexserv_core.settings import CoreSettings

log = logging.getLogger("flexserv.edge")

#: Seconds a refused connection keeps reading (and dropping) before it closes.
LINGER_SECONDS: Final = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int
    max_headers: int
    header_timeout: float  # 0: no limit
    body_timeout: float  # 0: no limit
    max_connections: int

    @classmethod
    def from_settings(cls, core: CoreSettings) -> ConnectionLimits:
        return cls(
            max_header_bytes=core.max_header_bytes,
            max_headers=core.max_headers,
            header_timeout=core.header_timeout,
            body_timeout=core.body_timeout,
            max_connections=core.max_connections,
        )


#: uvicorn's internals the protocol below overrides or calls. They are private, so
#: pyproject.toml pins the uvicorn releases it was tested with, and this check makes
#: any other release that lacks one fail at import, loudly: an override uvicorn no
#: longer calls (the body timer lives in ``_start_asgi_task``) would otherwise drop a
#: bound silently.
UVICORN_INTERNALS: Final = (
    "_start_asgi_task",
    "_unset_keepalive_if_required",
    "_should_upgrade",
    "_unsupported_upgrade_warning",
    "handle_websocket_upgrade",
    "send_400_response",
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
)


def missing_uvicorn_internals(protocol: type = HttpToolsProtocol) -> list[str]:
    """The :data:`UVICORN_INTERNALS` ``protocol`` does not define (none, for a supported uvicorn)."""
    return [name for name in UVICORN_INTERNALS if not callable(getattr(protocol, name, None))]


if _missing := missing_uvicorn_internals():
    raise ImportError(
        f"uvicorn {uvicorn.__version__} lacks HttpToolsProtocol.{', '.join(_missing)}, which FlexServ's connection"
        " limits build on: install the uvicorn release flexserv-core's requirements name."
    )


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the limits."""


def _error_response(status: int, message: str, code: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    error_type = "server_error" if status >= 500 else "invalid_request_error"
    body = json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}}).encode()
    head = [STATUS_LINE[status]]
    for name, value in default_headers:
        head.extend([name, b": ", value, b"\r\n"])
    head.extend(
        [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
    )
    return b"".join(head) + body


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionLimits`.

    Use :meth:`with_limits` for a subclass carrying the limits, and hand it to
    ``uvicorn.Config(http=...)``.
    """

    limits: ClassVar[ConnectionLimits]

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[BoundedHttpProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between a message's end (or the connection's start) and the next head's end
        self._head_bytes = 0  # bytes read while in a head (counted per read, so at most one read over)
        self._head_size = 0  # exact size of the head being parsed: URL, header names and values
        self._header_count = 0
        self._head_begun = False  # a request line has started arriving
        self._refused: tuple[int, str, str] | None = None
        self._lingering = False
        self._head_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None

    # Connection lifetime

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "The server has too many open connections; retry shortly.", "too_many_connections")
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if self._refused is not None:
                self._refuse(*self._refused)
            else:  # llhttp's reason is a fixed text ("Duplicate Content-Length"), never the client's bytes
                self.send_400_response(f"Invalid HTTP request received: {quote(str(exc))}.")
            return
        if self._in_head and self._head_bytes > self.limits.max_header_bytes:
            self._refuse(*self._head_too_large())

    # Parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        self._head_size = 0
        self._header_count = 0

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        self._header_count += 1
        if self._head_size > self.limits.max_header_bytes or self._header_count > self.limits.max_headers:
            self._refused = self._head_too_large()
            raise _HeadTooLarge
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._head_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if cycle.more_body and self.limits.body_timeout:
            self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timed_out)
        super()._start_asgi_task(cycle, app)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._cancel_body_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._arm_head_timer()

    # Limits

    def _head_too_large(self) -> tuple[int, str, str]:
        limits = self.limits
        return (
            431,
            f"Request headers too large: at most {limits.max_headers} headers of"
            f" {limits.max_header_bytes} bytes in all (--max-headers, --max-header-bytes).",
            "request_headers_too_large",
        )

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        if self.limits.header_timeout:
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if not self._head_begun:
            self.transport.close()  # an idle connection: nothing to answer
            return
        self._refuse(
            408,
            f"The request headers did not arrive within {self.limits.header_timeout:g} s (--header-timeout).",
            "header_timeout",
        )

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        log.warning(
            "closing the connection from %s: the request body did not arrive within %g s (--body-timeout)",
            self._peer(),
            self.limits.body_timeout,
        )
        # The handler owns the response: it sees a disconnect, as when the client goes away.
        self.transport.close()

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer ``status`` and close after a short linger; the app never runs."""
        self._cancel_timers()
        if self.transport.is_closing() or self._lingering:
            return
        log.warning("refusing a request from %s: %d %s", self._peer(), status, message)
        self._lingering = True
        self.transport.write(_error_response(status, message, code, self.server_state.default_headers))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request llhttp cannot parse (bad or repeated
        Content-Length, Content-Length with chunked, a bad chunk size, an unknown
        method), as JSON like every refusal instead of uvicorn's plain text."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The request being answered, or whose body broke: its handler sees a
            # disconnect, so nothing it sends follows the refusal on the wire.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:  # a status line now would land inside that response
                self._cancel_timers()
                self.transport.close()
                return
        self._refuse(400, msg, "invalid_http_request")

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown peer"

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
