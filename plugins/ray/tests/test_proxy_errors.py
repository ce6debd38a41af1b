"""The proxy middleware on the ASGI messages Ray's proxy sends, without a cluster.

The cluster tests (test_ray_serve.py) show it in Ray's real proxy (a killed replica,
overload); these pin the cases a cluster cannot produce on demand: a replica lost
before it answered, a client already gone, and what must pass through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from flexserv_ray.proxy_errors import (
    PROXY_CALLBACK,
    PROXY_CALLBACK_ENV,
    RETRY_AFTER_ENV,
    OpenAIErrors,
    proxy_env,
    proxy_middlewares,
)

Message = dict[str, Any]
App = Callable[[dict[str, Any], Any, Any], Coroutine[Any, Any, None]]


def app_sending(*messages: Message, receive_first: bool = False, fail: bool = False) -> App:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if receive_first:
            await receive()
        for message in messages:
            await send(message)
        if fail:
            raise RuntimeError("proxy failure")

    return app


async def call(app: App, path: str = "/v1/chat/completions", *, disconnect: bool = False) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.disconnect"} if disconnect else {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    await OpenAIErrors(app, retry_after=2.5)(scope, receive, send)
    return sent


def start(status: int, content_type: bytes, *extra: tuple[bytes, bytes]) -> Message:
    return {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type), *extra]}


def body(data: bytes, more: bool = False) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


def headers(message: Message) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v) for k, v in message["headers"]}


async def test_rays_plain_text_backpressure_becomes_an_openai_429_keeping_retry_after() -> None:
    text = b"Request dropped due to backpressure (num_queued_requests=1, max_queued_requests=1)."
    sent = await call(app_sending(start(429, b"text/plain; charset=utf-8", (b"retry-after", b"3")), body(text)))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 429
    got = headers(sent[0])
    assert got[b"retry-after"] == b"3" and got[b"content-type"] == b"application/json"
    assert int(got[b"content-length"]) == len(sent[1]["body"])
    error = json.loads(sent[1]["body"])["error"]
    assert error == {"message": text.decode(), "type": "rate_limit_error", "param": None, "code": "too_many_requests"}


async def test_a_replica_lost_before_answering_is_a_503_with_retry_after() -> None:
    sent = await call(app_sending(receive_first=True))  # the proxy returned without a response
    assert sent[0]["status"] == 503
    assert headers(sent[0])[b"retry-after"] == b"3"  # 2.5 s, rounded up as Ray does
    error = json.loads(sent[1]["body"])["error"]
    assert (error["type"], error["code"]) == ("server_error", "replica_failed")


async def test_a_stream_cut_mid_way_ends_with_an_error_event_and_done() -> None:
    chunk = b'data: {"choices": []}\n\n'
    sent = await call(app_sending(start(200, b"text/event-stream; charset=utf-8"), body(chunk, more=True)))
    assert sent[1]["body"] == chunk
    last = sent[-1]
    assert last["more_body"] is False
    events = last["body"].decode().split("\n\n")
    assert events[1] == "data: [DONE]" and events[2] == ""
    error = json.loads(events[0].removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "replica_failed")


async def test_a_failing_proxy_still_ends_the_stream_then_raises() -> None:
    app = app_sending(start(200, b"text/event-stream"), body(b"data: {}\n\n", more=True), fail=True)
    with pytest.raises(RuntimeError, match="proxy failure"):
        await call(app)


async def test_nothing_is_sent_to_a_client_that_went_away() -> None:
    cut = app_sending(start(200, b"text/event-stream"), body(b"data: {}\n\n", more=True), receive_first=True)
    assert len(await call(cut, disconnect=True)) == 2  # only what the app sent
    assert await call(app_sending(receive_first=True), disconnect=True) == []


@pytest.mark.parametrize(
    "messages",
    [
        # the app's own error: already OpenAI-shaped JSON
        (start(429, b"application/json"), body(b'{"error": {"code": "too_many_requests"}}')),
        # a complete stream
        (start(200, b"text/event-stream"), body(b"data: {}\n\n", more=True), body(b"data: [DONE]\n\n")),
        # a complete JSON answer
        (start(200, b"application/json"), body(b"{}")),
    ],
)
async def test_the_apps_own_responses_pass_through_untouched(messages: tuple[Message, ...]) -> None:
    assert await call(app_sending(*messages)) == list(messages)


async def test_rays_own_routes_are_left_alone() -> None:
    messages = (start(503, b"text/plain"), body(b"This node is being drained."))
    assert await call(app_sending(*messages), path="/-/healthz") == list(messages)


def test_the_callback_ray_imports_gives_starlette_middleware(monkeypatch: pytest.MonkeyPatch) -> None:
    env = proxy_env(retry_after=4)
    assert env == {PROXY_CALLBACK_ENV: PROXY_CALLBACK, RETRY_AFTER_ENV: "4"}
    monkeypatch.setenv(RETRY_AFTER_ENV, "4")
    module, name = PROXY_CALLBACK.split(":")
    callback = getattr(__import__(module, fromlist=[name]), name)
    assert callback is proxy_middlewares
    from starlette.middleware import Middleware

    (middleware,) = callback()
    assert isinstance(middleware, Middleware) and middleware.cls is OpenAIErrors
    assert middleware.kwargs == {"retry_after": 4.0}
