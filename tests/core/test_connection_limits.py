"""Connection limits against a real server on loopback: oversized heads, slow
clients and a connection cap are refused before the app runs, and /health keeps
answering meanwhile. Every client here is bounded in bytes and seconds."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from flexserv_core.cli.serve import uvicorn_config
from flexserv_core.edge.connections import BoundedHttpProtocol
from flexserv_core.testing import ServedApp, make_app, wait_until

HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
SOCKET_TIMEOUT = 15.0  # a connection the server should have dropped by then fails the test


@contextmanager
def served(**settings: Any) -> Iterator[tuple[str, ServedApp]]:
    app = make_app(["embeddings"], settings=settings)  # the slow bodies go to /v1/embeddings
    served_app = ServedApp(app)
    with served_app as url:
        yield url, served_app


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as closed)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def _status_and_error(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def _health(url: str) -> int:
    return httpx.get(f"{url}/health", timeout=SOCKET_TIMEOUT).status_code


def test_flexserv_run_serves_with_the_bounded_protocol() -> None:
    app = make_app(settings={"max_header_bytes": 4096, "max_headers": 7, "header_timeout": 3, "body_timeout": 4})
    config = uvicorn_config(app, app.state.flexserv.settings.core)
    assert isinstance(config.http, type) and issubclass(config.http, BoundedHttpProtocol)
    limits = config.http.limits
    assert (limits.max_header_bytes, limits.max_headers, limits.header_timeout, limits.body_timeout) == (4096, 7, 3, 4)


def test_a_100_mib_header_is_refused_long_before_it_is_read() -> None:
    total = 100 * 2**20
    sent = 0
    answered = threading.Event()

    with served() as (url, _):
        sock = _connect(url)

        def flood() -> None:
            nonlocal sent
            chunk = b"a" * 2**18
            try:
                sock.sendall(HEAD + b"X-Flood: ")
                while sent < total and not answered.is_set():
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server closed: what we want

        sender = threading.Thread(target=flood)
        sender.start()
        try:
            first = sock.recv(65536)
            sent_when_answered = sent
            answered.set()
            assert _health(url) == 200  # the flood never held the event loop
            raw = first + _read_all(sock)
        finally:
            answered.set()
            sender.join(timeout=SOCKET_TIMEOUT)
            sock.close()
    status, error = _status_and_error(raw)
    assert status == 431
    assert error["code"] == "request_headers_too_large"
    assert "--max-header-bytes" in error["message"]
    assert sent_when_answered < total // 4, sent_when_answered


def test_header_count_is_bounded() -> None:
    def request(headers: int) -> bytes:
        extra = b"".join(b"X-H%d: v\r\n" % i for i in range(headers - 2))  # besides Host and Connection
        sock = _connect(url)
        with sock:
            sock.sendall(HEAD + extra + b"Connection: close\r\n\r\n")
            return _read_all(sock)

    with served(max_headers=20) as (url, _):
        assert request(20).startswith(b"HTTP/1.1 200")
        status, error = _status_and_error(request(21))
    assert status == 431 and error["code"] == "request_headers_too_large"


def _trickle(url: str, head: bytes, piece: bytes, results: list[bytes | None]) -> None:
    """A slow client: ``head``, then ``piece`` every 0.2 s until the server closes."""
    sock = _connect(url)
    with sock:
        try:
            sock.sendall(head)
            while True:
                sock.settimeout(0.2)
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    sock.sendall(piece)
                    continue
                sock.settimeout(SOCKET_TIMEOUT)
                results.append(data + _read_all(sock))
                return
        except (BrokenPipeError, ConnectionResetError):
            results.append(b"")
        except TimeoutError:
            results.append(None)


def test_slow_clients_are_dropped_and_health_keeps_answering() -> None:
    clients = 20
    heads: list[bytes | None] = []
    bodies: list[bytes | None] = []
    body_head = (
        b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n"
    )
    with served(header_timeout=1, body_timeout=1) as (url, served_app):
        threads = [
            threading.Thread(target=_trickle, args=(url, HEAD, b"X-Slow: 1\r\n", heads)) for _ in range(clients // 2)
        ] + [threading.Thread(target=_trickle, args=(url, body_head, b"[", bodies)) for _ in range(clients // 2)]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(served_app.server.server_state.connections) >= clients, timeout=SOCKET_TIMEOUT)
        assert _health(url) == 200
        for thread in threads:
            thread.join(timeout=SOCKET_TIMEOUT + 5)
        assert _health(url) == 200
        wait_until(lambda: not served_app.server.server_state.connections, timeout=SOCKET_TIMEOUT)
    assert len(heads) == len(bodies) == clients // 2
    assert None not in heads and None not in bodies  # none outlived the socket timeout
    for raw in heads:
        assert raw is not None
        status, error = _status_and_error(raw)
        assert status == 408 and error["code"] == "header_timeout" and "--header-timeout" in error["message"]


def test_an_idle_connection_is_closed_after_the_header_timeout() -> None:
    with served(header_timeout=0.5) as (url, _):
        sock = _connect(url)
        with sock:
            assert _read_all(sock) == b""  # closed without an answer: nothing was asked


def test_a_kept_alive_connection_must_send_its_next_head_in_time() -> None:
    with served(header_timeout=1) as (url, _):
        results: list[bytes | None] = []
        sock = _connect(url)
        with sock:
            sock.sendall(HEAD + b"\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        # uvicorn's keep-alive closes an idle connection; one that trickles its next head is ours to drop
        _trickle(url, HEAD + b"\r\n" + HEAD, b"X-Slow: 1\r\n", results)
    assert results and results[0] is not None
    assert results[0].startswith(b"HTTP/1.1 200")
    assert b"HTTP/1.1 408" in results[0]


def test_connections_beyond_the_cap_are_answered_503() -> None:
    with served(max_connections=3, header_timeout=0) as (url, served_app):
        held = [_connect(url) for _ in range(3)]
        try:
            wait_until(lambda: len(served_app.server.server_state.connections) == 3, timeout=SOCKET_TIMEOUT)
            extra = _connect(url)
            with extra:
                status, error = _status_and_error(_read_all(extra))
            assert status == 503 and error["code"] == "too_many_connections"
        finally:
            for sock in held:
                sock.close()
        wait_until(lambda: not served_app.server.server_state.connections, timeout=SOCKET_TIMEOUT)
        assert _health(url) == 200


@pytest.mark.parametrize("body_bytes", [0, 300_000])
def test_ordinary_requests_pass_the_limits(body_bytes: int) -> None:
    with served(header_timeout=2, body_timeout=2) as (url, _), httpx.Client(timeout=SOCKET_TIMEOUT) as client:
        for _ in range(3):  # a kept-alive connection, reused
            response = client.post(
                f"{url}/v1/embeddings",
                content=b'{"model": "x", "input": "' + b"a" * body_bytes + b'"}',
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code in (400, 404), response.text  # answered by the app
