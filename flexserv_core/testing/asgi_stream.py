"""An httpx transport that calls an ASGI app in process and streams its responses.

httpx's own ``ASGITransport`` runs the app to its end and buffers the whole
response before the client sees a byte, so a test cannot read a stream as it comes
or close it early: a "closed" stream has already generated everything. This
transport runs each request in a task of its own and hands the response over as
soon as its head is sent; the body arrives chunk by chunk, as the app sends it.

Closing the response before its end (``response.aclose()``, leaving a
``client.stream(...)`` block, closing an SDK stream), or cancelling a request still
waiting for its head (a client timeout), is a client disconnect: the app's
``receive()`` returns ``http.disconnect``, as a server does when the socket closes.
The app's task is not cancelled, so a test sees whether the app itself stops the
work. A response read to its end returns once the app's task has finished, so
what the app does after its last byte is done when the read returns, as with
httpx's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

import httpx

__all__ = ["StreamingASGITransport"]

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]

#: Seconds ``aclose()`` of a response waits for the app to finish after a disconnect.
DISCONNECT_GRACE = 5.0


class _Ended:
    """The app returned (or raised ``error``)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class _Exchange:
    """One request: the app's task, what it sent, and the client's disconnect."""

    def __init__(self, app: ASGIApp, scope: dict[str, Any], body: bytes) -> None:
        self.messages: asyncio.Queue[dict[str, Any] | _Ended] = asyncio.Queue()
        self.disconnected = asyncio.Event()
        self._body: bytes | None = body
        self.task = asyncio.create_task(self._run(app, scope), name=f"asgi {scope['method']} {scope['path']}")

    async def _run(self, app: ASGIApp, scope: dict[str, Any]) -> None:
        try:
            await app(scope, self._receive, self._send)
        except Exception as exc:
            self.messages.put_nowait(_Ended(exc))
            return
        self.messages.put_nowait(_Ended())

    async def _receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        await self.messages.put(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            # as servers (and httpx's transport) do: once the response is complete, a
            # receive() answers disconnect (Litestar's streams wait for one to end)
            self.disconnected.set()

    async def disconnect(self) -> None:
        """The client is gone: the app's ``receive()`` says so; wait (bounded) for it to end."""
        self.disconnected.set()
        await asyncio.wait({self.task}, timeout=DISCONNECT_GRACE)


class _Body(httpx.AsyncByteStream):
    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._complete:
            message = await self._exchange.messages.get()
            if isinstance(message, _Ended):
                self._complete = True
                if message.error is not None:
                    raise message.error
                break
            if message["type"] != "http.response.body":
                continue
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                self._complete = True
                await asyncio.shield(self._exchange.task)  # what the app does after its last byte
                break

    async def aclose(self) -> None:
        if not self._complete:
            self._complete = True
            await self._exchange.disconnect()


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Serve ``app`` to an ``httpx.AsyncClient`` in the caller's event loop, streaming
    each response (see the module's docstring). Exceptions the app raises reach the
    client, as with httpx's ``ASGITransport``."""

    def __init__(self, app: Any, client: tuple[str, int] = ("127.0.0.1", 123)) -> None:
        self.app: ASGIApp = app
        self.client = client
        self._exchanges: set[_Exchange] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        url = request.url
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": url.scheme,
            "path": unquote(url.path),
            "raw_path": url.raw_path.split(b"?")[0],
            "query_string": url.query,
            "server": (url.host, url.port),
            "client": self.client,
            "root_path": "",
        }
        exchange = _Exchange(self.app, scope, body)
        self._exchanges.add(exchange)
        exchange.task.add_done_callback(lambda _: self._exchanges.discard(exchange))
        try:
            start = await exchange.messages.get()
        except asyncio.CancelledError:  # the client gave up before the head: a disconnect
            exchange.disconnected.set()
            raise
        if isinstance(start, _Ended):
            if start.error is not None:
                raise start.error
            raise RuntimeError("The ASGI app returned without sending a response.")
        assert start["type"] == "http.response.start", start
        return httpx.Response(
            start["status"], headers=start.get("headers", []), stream=_Body(exchange), request=request
        )

    async def aclose(self) -> None:
        """Disconnect what is still running and wait (bounded) for it to end."""
        pending = list(self._exchanges)
        for exchange in pending:
            exchange.disconnected.set()
        if pending:
            _, still = await asyncio.wait({e.task for e in pending}, timeout=DISCONNECT_GRACE)
            for task in still:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
