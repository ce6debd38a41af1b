"""The first-token and total time limits of a generation, enforced by the core.

Each expiry answers with its own OpenAI-shaped 504 (non-streaming) or ends the
stream with an error event and ``[DONE]``, and cancels the model's sequences
(the fake counts cancelled sequences; the registry's count drops to zero).
The queue limit is the backend's to enforce: see the transformers engine tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flexserv_core.api.timeouts import Deadlines
from flexserv_core.settings import CoreSettings
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def sse_payloads(text: str) -> list[Any]:
    out: list[Any] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


@pytest.mark.parametrize(
    ("path", "body"), [("/v1/chat/completions", {**CHAT, "n": 2}), ("/v1/completions", {"prompt": "hi"})]
)
async def test_no_first_token_in_time_is_a_504(path: str, body: dict[str, Any]) -> None:
    fake = FakeBackendPlugin(token_delay=30.0)  # would take half a minute per token
    app = make_app([fake], settings={"first_token_timeout": 0.2})
    async with app_client(app) as client:
        response = await client.post(path, json={**body, "max_tokens": 5})
        assert response.status_code == 504, response.text
        error = response.json()["error"]
        assert error["code"] == "first_token_timeout" and error["type"] == "timeout_error"
        assert "first_token_timeout (0.2 s)" in error["message"]
        model = fake.backend.models[0]
        assert model.tokens_emitted == 0
        assert model.cancelled_sequences == model.generated_sequences == body.get("n", 1)
        assert app.state.flexserv.registry.active_requests == 0


async def test_total_time_limit_cuts_a_long_generation_with_a_504() -> None:
    fake = FakeBackendPlugin(token_delay=0.02)
    app = make_app([fake], settings={"request_timeout": 0.3})
    async with app_client(app) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2000})
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "request_timeout"
        model = fake.backend.models[0]
        assert 0 < model.tokens_emitted < 100, "the limit did not stop the generation early"
        assert model.cancelled_sequences == 1
        # within the limit, the same request is served
        ok = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_total_time_limit_in_a_stream_ends_with_an_error_event_then_done(path: str) -> None:
    fake = FakeBackendPlugin(token_delay=0.02)
    app = make_app([fake], settings={"request_timeout": 0.3})
    body = {**CHAT} if "chat" in path else {"prompt": "hi"}
    async with app_client(app) as client:
        response = await client.post(path, json={**body, "max_tokens": 2000, "stream": True})
        assert response.status_code == 200
        events = sse_payloads(response.text)
        assert events[-1] == "[DONE]"
        error = events[-2]["error"]
        assert error["code"] == "request_timeout" and error["type"] == "timeout_error"
        assert all("error" not in e for e in events[:-2])
        assert len(events) > 4, "some tokens should have streamed before the limit"
        assert fake.backend.models[0].cancelled_sequences == 1
        assert app.state.flexserv.registry.active_requests == 0


async def test_zero_disables_the_limits() -> None:
    fake = FakeBackendPlugin(token_delay=0.01)
    app = make_app([fake], settings={"request_timeout": 0, "first_token_timeout": 0, "queue_timeout": 0})
    async with app_client(app) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 20})
        assert response.status_code == 200
        assert fake.backend.models[0].params_log[0].queue_timeout is None


async def test_queue_timeout_reaches_the_backend_in_sampling_params() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake], settings={"queue_timeout": 7})
    async with app_client(app) as client:
        assert (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status_code == 200
        assert fake.backend.models[0].params_log[0].queue_timeout == 7


def test_deadlines_pick_the_earlier_limit_and_name_it() -> None:
    core = CoreSettings(first_token_timeout=5, request_timeout=2)
    d = Deadlines.start(core, now=100.0)
    assert d.next_token(first=True) == 102.0 and d.expired(True).code == "request_timeout"
    d = Deadlines.start(CoreSettings(first_token_timeout=1, request_timeout=10), now=100.0)
    assert d.next_token(first=True) == 101.0 and d.expired(True).code == "first_token_timeout"
    assert d.next_token(first=False) == 110.0 and d.expired(False).code == "request_timeout"
    none = Deadlines.start(CoreSettings(first_token_timeout=0, request_timeout=0), now=100.0)
    assert none.next_token(first=True) is None
