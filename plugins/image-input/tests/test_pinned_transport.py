"""The pinned transport of image URL fetching over TLS: it connects to the address
it resolved and checked, while TLS sends the URL's name as SNI and verifies the
certificate for that name (a test CA, a real TLS server on loopback)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trustme
from flexserv_image_input.pinned_transport import PinnedTransport


class _Handler(BaseHTTPRequestHandler):
    hosts: list[str | None] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.hosts.append(self.headers.get("Host"))
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_server(ca: trustme.CA) -> Iterator[tuple[int, list[str | None]]]:
    """An HTTPS server on 127.0.0.1 with a certificate for ``images.test``; yields
    its port and the SNI names its handshakes received."""
    names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("images.test").configure_cert(context)

    def record_sni(_sock: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = record_sni
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], names
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def loopback_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """``*.test`` names resolve to 127.0.0.1 (anyio passes the name as IDNA bytes)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if not str(name).endswith(".test"):
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


async def test_tls_keeps_the_name_while_connecting_to_the_checked_address(
    ca: trustme.CA, tls_server: tuple[int, list[str | None]], loopback_names: None
) -> None:
    port, sni = tls_server
    checked: list[tuple[str, list[str]]] = []

    async def check(host: str, addresses: list[str]) -> None:
        checked.append((host, addresses))

    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    async with httpx.AsyncClient(transport=PinnedTransport(check, ssl_context=trust)) as client:
        response = await client.get(f"https://images.test:{port}/x.png")
        assert response.status_code == 200 and response.content == b"hello"
        assert checked == [("images.test", ["127.0.0.1"])]
        assert sni[-1] == "images.test" and _Handler.hosts[-1] == f"images.test:{port}"
        # the same address under another name: the certificate is not for it
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://other.test:{port}/x.png")
        assert checked[-1] == ("other.test", ["127.0.0.1"])


async def test_a_refusing_check_stops_the_connection(loopback_names: None) -> None:
    class Refused(Exception):
        pass

    async def check(host: str, addresses: list[str]) -> None:
        raise Refused(host)

    async with httpx.AsyncClient(transport=PinnedTransport(check)) as client:
        with pytest.raises(Refused, match=r"blocked\.test"):
            await client.get("http://blocked.test:9/")
