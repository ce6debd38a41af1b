"""The kit's in-process client can test a client disconnect: with ``streaming=True``
(or the ``flexserv_streaming`` fixture) a response arrives as the app sends it, and
closing it early, or giving up on a request before its answer, is a disconnect the
app sees; generation stops. The buffered default generates everything first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flexserv_core.testing import FakeBackendPlugin, app_client, make_app, openai_client, wait_until_async
from flexserv_core.testing.fakes import FakeTextModel

TOKEN_DELAY = 0.02
MAX_TOKENS = 500  # 10 s of tokens: a disconnect that stops nothing is plain to see
USER = [{"role": "user", "content": "hi"}]


def model(fake: FakeBackendPlugin) -> FakeTextModel:
    (only,) = fake.backend.models
    return only


async def test_closing_an_sdk_stream_stops_the_generation() -> None:
    fake = FakeBackendPlugin(token_delay=TOKEN_DELAY)
    async with app_client(make_app([fake]), streaming=True) as client:
        stream = await openai_client(client).chat.completions.create(
            model="fake-model", messages=USER, max_tokens=MAX_TOKENS, stream=True
        )
        pieces = []
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
            if len(pieces) == 5:  # the chunks come one by one, as generated
                break
        await stream.close()
        m = model(fake)
        await wait_until_async(lambda: m.cancelled_sequences == 1, timeout=5)
        emitted = m.tokens_emitted
        await asyncio.sleep(10 * TOKEN_DELAY)  # nothing more after the cancellation
        assert m.tokens_emitted == emitted < 20


async def test_a_request_given_up_before_its_answer_is_a_disconnect() -> None:
    fake = FakeBackendPlugin(token_delay=TOKEN_DELAY)
    async with app_client(make_app([fake]), streaming=True) as client:
        body = {"model": "fake-model", "messages": USER, "max_tokens": MAX_TOKENS}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.post("/v1/chat/completions", json=body), timeout=0.3)
        m = model(fake)
        await wait_until_async(lambda: m.cancelled_sequences == 1, timeout=5)
        assert m.tokens_emitted < 100


async def test_a_response_read_to_its_end_is_whole_and_the_app_done() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake])
    async with app_client(app, streaming=True) as client:
        r = await client.post("/v1/chat/completions", json={"model": "fake-model", "messages": USER, "max_tokens": 7})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 7
        async with client.stream(
            "POST", "/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 3, "stream": True}
        ) as streamed:
            lines = [line async for line in streamed.aiter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        assert app.state.flexserv.registry.active_requests == 0  # the app finished before the read returned
        assert model(fake).tokens_emitted == 7 + 3


async def test_the_buffered_default_cannot_disconnect() -> None:
    # why streaming=True exists: httpx's transport runs the app to its end first
    fake = FakeBackendPlugin(token_delay=0.001)
    async with app_client(make_app([fake])) as client:
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": USER, "max_tokens": 50, "stream": True},
        ) as response:
            async for _ in response.aiter_bytes():
                break
        assert model(fake).tokens_emitted == 50


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake]


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin(token_delay=TOKEN_DELAY)


@pytest.fixture
def flexserv_streaming() -> bool:
    return True


async def test_the_fixture_client_streams_when_asked(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    stream = await flexserv_openai.completions.create(
        model="fake-model", prompt="x", max_tokens=MAX_TOKENS, stream=True
    )
    async for _ in stream:
        break
    await stream.close()
    m = model(fake)
    await wait_until_async(lambda: m.cancelled_sequences == 1, timeout=5)
    assert m.tokens_emitted < 50


async def test_the_transport_returns_a_read_once_the_app_is_done() -> None:
    import httpx

    from flexserv_core.testing.asgi_stream import StreamingASGITransport

    done: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["body"] == b"ping"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b"po", "more_body": True})
        await send({"type": "http.response.body", "body": b"ng", "more_body": False})
        assert (await receive())["type"] == "http.disconnect"  # the response is complete
        await asyncio.sleep(0.05)  # work after the last byte (metrics, clean-up)
        done.append("after")

    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://t") as client:
        r = await client.post("/x", content=b"ping")
        assert (r.status_code, r.headers["x-a"], r.content, done) == (200, "1", b"pong", ["after"])
