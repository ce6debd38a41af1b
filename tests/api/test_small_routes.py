"""The small routes and defaults of the OpenAI surface, against the fake text
backend: ``/v1/health``, ``max_model_len`` in ``/v1/models`` and the completions
default of 16 tokens (``/tokenize`` and ``/detokenize`` are the tokenize plugin's)."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.testing.fakes import FakeBackendPlugin

CONTEXT = 512


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin(context_length=CONTEXT, default_max_tokens=40)


async def test_v1_health_is_liveness(flexserv_client: Any) -> None:
    r = await flexserv_client.get("/v1/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_completions_default_to_16_tokens_chat_to_the_models_default(flexserv_openai: Any) -> None:
    completion = await flexserv_openai.completions.create(model="fake-model", prompt="Once upon")
    assert completion.usage.completion_tokens == 16 and completion.choices[0].finish_reason == "length"
    chat = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "Hi"}]
    )
    assert chat.usage.completion_tokens == 40
    explicit = await flexserv_openai.completions.create(model="fake-model", prompt="Once upon", max_tokens=30)
    assert explicit.usage.completion_tokens == 30


async def test_completions_default_respects_a_smaller_room_in_the_context(flexserv_openai: Any) -> None:
    prompt = "x" * (CONTEXT - 5)
    completion = await flexserv_openai.completions.create(model="fake-model", prompt=prompt)
    assert completion.usage.completion_tokens == 5


async def test_models_report_kind_and_max_model_len_once_loaded(flexserv_client: Any, flexserv_openai: Any) -> None:
    before = (await flexserv_client.get("/v1/models/fake-model")).json()
    assert before["kind"] == "text" and before["max_model_len"] is None  # not loaded: not known yet
    await flexserv_openai.completions.create(model="fake-model", prompt="a", max_tokens=1)
    listed = {m["id"]: m for m in (await flexserv_client.get("/v1/models")).json()["data"]}
    assert listed["fake-model"]["max_model_len"] == CONTEXT and listed["fake-model"]["kind"] == "text"
    model = await flexserv_openai.models.retrieve("fake-model")
    assert model.model_extra["max_model_len"] == CONTEXT
