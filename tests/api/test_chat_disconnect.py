"""A client that goes away mid-stream stops generation within one decode step.

Tested twice: over raw ASGI (the app sees ``http.disconnect``) and over a real
socket with uvicorn serving the app in a thread and the official SDK closing the
stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin, FakeTextModel
from flexserv_core.testing.process import ServedApp
from flexserv_core.testing.waiting import wait_until_async

TOKEN_DELAY = 0.02  # one fake "decode step"


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"flexserv.test"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("flexserv.test", 80),
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2}),
        ("/v1/completions", {"prompt": "hi"}),
    ],
)
async def test_disconnect_over_asgi_cancels_every_sequence(path: str, body: dict[str, Any]) -> None:
    fake = FakeBackendPlugin(token_delay=TOKEN_DELAY)
    app = make_app([fake])
    async with app_client(app):
        payload = json.dumps({**body, "max_tokens": 500, "stream": True}).encode()
        disconnect = asyncio.Event()
        request_sent = False
        bodies: list[bytes] = []
        emitted_at_disconnect = -1

        async def receive() -> dict[str, Any]:
            nonlocal request_sent
            if not request_sent:
                request_sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal emitted_at_disconnect
            if message["type"] == "http.response.start":
                assert message["status"] == 200
            elif message.get("body"):
                bodies.append(message["body"])
                if len(bodies) == 6 and not disconnect.is_set():
                    emitted_at_disconnect = fake.backend.models[0].tokens_emitted
                    disconnect.set()

        started = time.perf_counter()
        await asyncio.wait_for(app(_scope(path), receive, send), timeout=10)  # type: ignore[arg-type]
        assert time.perf_counter() - started < 2.0  # far less than 500 tokens x 20 ms
        model = fake.backend.models[0]
        sequences = body.get("n", 1)
        assert model.cancelled_sequences == sequences
        # Within one decode step: at most one more token per sequence after the disconnect.
        assert model.tokens_emitted <= emitted_at_disconnect + sequences
        # every generator that started has ended: nothing is left to emit a token
        assert model.generated_sequences == model.cancelled_sequences
        assert not any(b"[DONE]" in b for b in bodies)
        assert app.state.flexserv.registry.active_requests == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2}),
        ("/v1/completions", {"prompt": "hi"}),
    ],
)
async def test_disconnect_cancels_a_request_that_is_not_streamed(path: str, body: dict[str, Any]) -> None:
    """The client goes away while a 500-token answer is being generated: every
    sequence stops within a step, counted as ``abort``, and the lease is released."""
    fake = FakeBackendPlugin(token_delay=TOKEN_DELAY)
    app = make_app([fake])
    server = app.state.flexserv
    async with app_client(app):
        payload = json.dumps({**body, "max_tokens": 500}).encode()
        sent: list[dict[str, Any]] = []
        messages = iter([{"type": "http.request", "body": payload, "more_body": False}])
        emitted_at_disconnect = -1

        async def receive() -> dict[str, Any]:
            nonlocal emitted_at_disconnect
            message = next(messages, None)
            if message is not None:
                return message
            model = await wait_until_async(lambda: fake.backend.models and fake.backend.models[0])
            await wait_until_async(lambda: model.tokens_emitted >= 5, message="generation under way")
            emitted_at_disconnect = model.tokens_emitted
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await asyncio.wait_for(app(_scope(path), receive, send), timeout=10)  # type: ignore[arg-type]
        model = fake.backend.models[0]
        sequences = body.get("n", 1)
        assert model.cancelled_sequences == model.generated_sequences == sequences
        assert model.tokens_emitted <= emitted_at_disconnect + sequences
        assert server.registry.active_requests == 0
        assert not any(b'"choices"' in m.get("body", b"") for m in sent), "nobody was answered"

        def finished(reason: str) -> float | None:
            labels = {"model_name": "fake-model", "finished_reason": reason}
            return server.metrics.registry.get_sample_value("flexserv:request_success_total", labels)

        assert finished("abort") == sequences and not finished("error")


@pytest.fixture
def served_fake() -> Iterator[tuple[str, FakeBackendPlugin]]:
    fake = FakeBackendPlugin(token_delay=TOKEN_DELAY)
    with ServedApp(make_app([fake])) as url:
        yield url, fake


async def test_disconnect_over_a_real_socket(served_fake: tuple[str, FakeBackendPlugin]) -> None:
    url, fake = served_fake
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=500, stream=True
        )
        received = 0
        async for chunk in stream:
            received += bool(chunk.choices and chunk.choices[0].delta.content)
            if received == 5:
                break
        model: FakeTextModel = fake.backend.models[0]
        emitted = model.tokens_emitted
        await stream.close()
        await wait_until_async(lambda: model.cancelled_sequences == 1, 5, message="the sequence was cancelled")
        # Stopped promptly: a few steps at most between the close and the cancel (the
        # socket close has to travel), never the 500-token run.
        assert model.tokens_emitted <= emitted + 5
        # The server still answers, and the lease was released.
        r = await client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert r.choices[0].message.content == "Th"
    finally:
        await client.close()
