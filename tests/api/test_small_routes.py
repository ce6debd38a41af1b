"""The small routes and defaults of the OpenAI surface, against the fake text
backend: ``/v1/health``, ``/tokenize`` and ``/detokenize`` (vLLM's shapes),
``max_model_len`` in ``/v1/models`` and the completions default of 16 tokens."""

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


async def test_tokenize_prompt_and_detokenize_round_trip(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/tokenize", json={"model": "fake-model", "prompt": "héllo", "return_token_strs": True}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {
        "count": 5,
        "max_model_len": CONTEXT,
        "tokens": [ord(c) for c in "héllo"],
        "token_strs": list("héllo"),
    }
    r = await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": body["tokens"]})
    assert r.status_code == 200 and r.json() == {"prompt": "héllo"}


async def test_tokenize_messages_counts_what_chat_sends(flexserv_client: Any, flexserv_openai: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    r = await flexserv_client.post("/tokenize", json={"model": "fake-model", "messages": messages})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_strs"] is None and body["max_model_len"] == CONTEXT
    chat = await flexserv_openai.chat.completions.create(model="fake-model", messages=messages, max_tokens=1)
    assert body["count"] == chat.usage.prompt_tokens == len(body["tokens"])
    r = await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": body["tokens"]})
    assert r.json()["prompt"].endswith("user: Hello there\nassistant: ")


@pytest.mark.parametrize(
    ("path", "payload", "param"),
    [
        ("/tokenize", {"model": "fake-model"}, "prompt"),
        ("/tokenize", {"model": "fake-model", "prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt"),
        ("/tokenize", {"model": "fake-model", "prompt": 5}, "prompt"),
        (
            "/tokenize",
            {"model": "fake-model", "messages": [{"role": "user", "content": "b"}], "add_special_tokens": True},
            "add_special_tokens",
        ),
        (
            "/tokenize",
            {"model": "fake-model", "messages": [{"role": "user", "content": "b"}], "add_generation_prompt": False},
            "add_generation_prompt",
        ),
        ("/tokenize", {"model": "fake-model", "messages": []}, "messages"),
        ("/detokenize", {"model": "fake-model", "tokens": [72, -1]}, "tokens[1]"),
        ("/detokenize", {"model": "fake-model", "tokens": [72, 0x110000]}, "tokens[1]"),
        ("/detokenize", {"model": "fake-model", "tokens": "72"}, "tokens"),
        ("/detokenize", {"model": "fake-model"}, "tokens"),
    ],
)
async def test_bad_tokenize_requests_are_400_naming_the_param(
    flexserv_client: Any, path: str, payload: dict[str, Any], param: str
) -> None:
    r = await flexserv_client.post(path, json=payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"


async def test_tokenize_unknown_model_is_404(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/tokenize", json={"model": "nope", "prompt": "a"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


async def test_models_report_kind_and_max_model_len_once_loaded(flexserv_client: Any, flexserv_openai: Any) -> None:
    before = (await flexserv_client.get("/v1/models/fake-model")).json()
    assert before["kind"] == "text" and before["max_model_len"] is None  # not loaded: not known yet
    await flexserv_openai.completions.create(model="fake-model", prompt="a", max_tokens=1)
    listed = {m["id"]: m for m in (await flexserv_client.get("/v1/models")).json()["data"]}
    assert listed["fake-model"]["max_model_len"] == CONTEXT and listed["fake-model"]["kind"] == "text"
    model = await flexserv_openai.models.retrieve("fake-model")
    assert model.model_extra["max_model_len"] == CONTEXT
