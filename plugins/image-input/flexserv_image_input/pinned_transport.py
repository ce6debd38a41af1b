"""An httpx transport that connects only to addresses it has checked itself.

Checking a host's addresses and then letting the HTTP client resolve the name
again when it connects leaves a gap: a DNS server that answers the check with a
public address and the connection with a private one (DNS rebinding) gets the
request through. Here the name is resolved once, *inside* the connection step:
:class:`CheckedBackend` (an httpcore network backend) resolves the host, runs
``check`` on every address, and opens the TCP connection to one of those
addresses. httpcore still hands TLS the URL's host name, so SNI and the
certificate check are for the name, and httpx sends the name in ``Host``.

:class:`PinnedTransport` is httpx's own transport in small: an httpcore
connection pool (with that backend) behind httpx's public transport interface.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager

import httpcore
import httpx

#: ``check(host, addresses)``: raise to refuse the connection (any exception passes through unchanged).
AddressCheck = Callable[[str, list[str]], Awaitable[None]]

# httpcore's errors -> httpx's, as httpx's own transport maps them (most specific first)
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
)


@contextmanager
def _httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to for TCP, in the resolver's order, each once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """Resolves each host once, checks every address, connects to a checked one."""

    def __init__(self, check: AddressCheck) -> None:
        self._check = check
        self._tcp = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        await self._check(host, addresses)
        failure: Exception = httpcore.ConnectError(f"{host!r} resolves to no address")
        for address in addresses:  # every one was checked: try them in turn, as a resolver's client would
            try:
                return await self._tcp.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("Unix sockets are not used here")

    async def sleep(self, seconds: float) -> None:
        await self._tcp.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """httpx transport over an httpcore pool whose connections go through :class:`CheckedBackend`."""

    def __init__(self, check: AddressCheck, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: httpx's default (certifi's CAs, hostname checks) unless given."""
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(), network_backend=CheckedBackend(check)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core)
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
