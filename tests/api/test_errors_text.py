"""Bad input to the text routes: each an OpenAI-shaped 4xx, never a 500, also when streaming."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from flexserv_core.testing.app import app_client, make_app, openai_client
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "hi"}]


def assert_error(r: Any, status: int, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


async def test_malformed_json_and_content_type(flexserv_client: Any) -> None:
    for path in (CHAT, COMPLETIONS):
        r = await flexserv_client.post(path, content=b'{"messages": [', headers={"content-type": "application/json"})
        assert_error(r, 400, code="invalid_json")
        r = await flexserv_client.post(path, content=b"[1, 2]", headers={"content-type": "application/json"})
        assert_error(r, 400, code="invalid_json")
        r = await flexserv_client.post(path, content=b"", headers={"content-type": "application/json"})
        assert_error(r, 400)
        r = await flexserv_client.post(path, content=b"messages=hi", headers={"content-type": "text/plain"})
        assert_error(r, 415, code="unsupported_media_type")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": -3}, "max_tokens"),
        ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
        ({"messages": USER, "max_tokens": True}, "max_tokens"),
        ({"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
        ({"messages": USER, "temperature": 2.5}, "temperature"),
        ({"messages": USER, "temperature": "hot"}, "temperature"),
        ({"messages": USER, "top_p": 1.5}, "top_p"),
        ({"messages": USER, "n": 0}, "n"),
        ({"messages": USER, "n": 1000}, "n"),
        ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": USER, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
        ({"messages": USER, "presence_penalty": 3}, "presence_penalty"),
        ({"messages": USER, "frequency_penalty": -2.5}, "frequency_penalty"),
        ({"messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": USER, "stop": ""}, "stop"),
        ({"messages": USER, "stop": 5}, "stop"),
        ({"messages": USER, "seed": 2**70}, "seed"),
        ({"messages": USER, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ],
)
async def test_chat_bad_values_name_the_param(
    flexserv_client: Any, fake: FakeBackendPlugin, body: dict[str, Any], param: str, stream: bool
) -> None:
    r = await flexserv_client.post(CHAT, json={**body, "stream": stream})
    assert_error(r, 400, param=param)
    assert all(m.generated_sequences == 0 for m in fake.backend.models)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": ["a", 1]}, "prompt"),
        ({"prompt": [1, -2]}, "prompt[1]"),
        ({"prompt": [72, 0x110000]}, "prompt[1]"),  # beyond the fake's vocabulary
        ({"prompt": [[1, 2], [3, "x"]]}, "prompt[1][1]"),
        ({"prompt": [[1, 2], []]}, "prompt[1]"),
        ({"prompt": "hi", "logprobs": 21}, "logprobs"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "hi", "suffix": "!"}, "suffix"),
        ({"prompt": "hi", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": ["a"] * 9, "n": 8}, "prompt"),
    ],
)
async def test_completion_bad_values_name_the_param(
    flexserv_client: Any, fake: FakeBackendPlugin, body: dict[str, Any], param: str, stream: bool
) -> None:
    r = await flexserv_client.post(COMPLETIONS, json={**body, "stream": stream})
    assert_error(r, 400, param=param)
    assert all(m.generated_sequences == 0 for m in fake.backend.models)


@pytest.mark.parametrize("stream", [False, True])
async def test_context_length_exceeded(flexserv_client: Any, stream: bool) -> None:
    r = await flexserv_client.post(CHAT, json={"messages": USER, "max_tokens": 4090, "stream": stream})
    error = assert_error(r, 400, param="messages", code="context_length_exceeded")
    assert "4096" in error["message"]
    long_prompt = "x" * 5000
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": long_prompt, "stream": stream})
    assert_error(r, 400, param="prompt", code="context_length_exceeded")
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": ["ok", long_prompt], "max_tokens": 5, "stream": stream})
    assert_error(r, 400, param="prompt[1]", code="context_length_exceeded")
    # Exactly at the limit is fine.
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x" * 4090, "max_tokens": 6, "stream": stream})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("model", ["no-such-model", "/etc/passwd", "../../etc/passwd", "./fake-model", "org/../x"])
async def test_unknown_or_path_model_is_404_and_nothing_loads(
    fake: FakeBackendPlugin, path: str, model: str, stream: bool
) -> None:
    # Even with Hub ids allowed, a path never resolves.
    app = make_app([fake], settings={"allow_hub_models": True})
    async with app_client(app) as client:
        r = await client.post(path, json={"model": model, "messages": USER, "prompt": "hi", "stream": stream})
        assert_error(r, 404, param="model", code="model_not_found")
        assert fake.backend.loads == 0
        assert [s.name for s in app.state.flexserv.catalog.specs()] == ["fake-model"]


async def test_block_on_unexpected_fields(fake: FakeBackendPlugin) -> None:
    app = make_app([fake], settings={"block_on_unexpected_fields": True})
    async with app_client(app) as client:
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 1, "frobnicate": []})
        assert_error(r, 400, param="frobnicate", code="unexpected_field")
        r = await client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 1, "not_a_field": 2})
        assert_error(r, 400, param="not_a_field", code="unexpected_field")
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 1, "user": "u1"})
        assert r.status_code == 200, r.text


async def test_sdk_raises_bad_request(flexserv_openai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, n=99)
    assert info.value.body["param"] == "n"
    with pytest.raises(openai.NotFoundError) as not_found:
        await flexserv_openai.completions.create(model="missing", prompt="hi", stream=True)
    assert not_found.value.body["code"] == "model_not_found"


async def test_backend_failure_mid_stream_is_an_error_event() -> None:
    """A backend exception after the stream started ends it with an error event
    (the SDK raises APIError), and the model is released."""
    fake = FakeBackendPlugin(fail_after=3)
    app = make_app([fake])
    async with app_client(app) as client:
        stream = await openai_client(client).chat.completions.create(
            model="fake-model", messages=USER, max_tokens=5, stream=True
        )
        text = ""
        with pytest.raises(openai.APIError, match="error while generating"):
            async for chunk in stream:
                text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
        assert text == "The"
        assert app.state.flexserv.registry.active_requests == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_model_load_failure_is_a_json_503_before_any_stream(stream: bool) -> None:
    app = make_app([FakeBackendPlugin(fail="weights are corrupt")])
    async with app_client(app) as client:
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 2, "stream": stream})
        assert r.status_code == 503 and r.headers["content-type"].startswith("application/json")
        error = r.json()["error"]
        assert error["code"] == "model_load_failed" and "weights are corrupt" in error["message"]
        assert app.state.flexserv.registry.active_requests == 0
