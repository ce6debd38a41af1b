"""Requests llhttp cannot parse get an OpenAI-shaped 400, not uvicorn's plain text,
against a real server on loopback."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator

import httpx
import pytest

from flexserv_core.testing import ServedApp, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin
from tests.core.test_connection_limits import _read_all

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with ServedApp(make_app()) as base_url:
        yield base_url


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors() -> Iterator[list[logging.LogRecord]]:
    """What uvicorn logs as errors (an app failing on the connection), which does not reach caplog."""
    handler, logger = _Errors(), logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def _exchange(url: str, raw: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(raw)
        return _read_all(sock)


POST = b"POST /v1/flexserv/models/unload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (POST + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "Duplicate Content-Length"),
        (POST + b"Content-Length: 2x\r\n\r\n{}", "Content-Length"),
        (POST + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", "Transfer-Encoding"),
        (POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "chunk size"),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", "method"),
    ],
    ids=[
        "repeated-length",
        "bad-length",
        "length-and-chunked",
        "bad-chunk-size",
        "bad-chunk-size-to-a-handler-that-answers-at-once",
        "unknown-method",
    ],
)
def test_an_unparsable_request_is_a_json_400(
    url: str, server_errors: list[logging.LogRecord], raw: bytes, reason: str
) -> None:
    answer = _exchange(url, raw)  # read until the server closes: the handler, if any, has run
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 400 Bad Request", answer
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_http_request" and error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert reason in error["message"]
    # the handler of a request whose body broke sees a disconnect: it writes nothing after the refusal
    assert answer.count(b"HTTP/1.1 ") == 1
    assert not server_errors, [r.getMessage() for r in server_errors]
    assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200


def test_garbage_after_a_request_whose_answer_is_streaming_closes_without_a_second_status_line(
    server_errors: list[logging.LogRecord],
) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 50}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with ServedApp(make_app([FakeBackendPlugin(token_delay=0.1)])) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            sock.sendall(request)
            received = sock.recv(65536)
            while b"data: " not in received:
                received += sock.recv(65536)
            sock.sendall(b"\x00garbage\r\n\r\n")  # not a request line: llhttp fails while the stream runs
            try:
                while chunk := sock.recv(65536):
                    received += chunk
            except ConnectionResetError:
                pass
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert received.count(b"HTTP/1.1 ") == 1 and b"invalid_http_request" not in received
    assert b"data: [DONE]" not in received  # the stream was cut, not finished after the refusal
    assert not server_errors, [r.getMessage() for r in server_errors]
