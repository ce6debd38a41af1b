"""Edge bounds: every limit answers a bounded OpenAI-shaped 400/413 naming its
``param``, before a model is loaded or a prompt tokenised (the fake backend counts
its sequences, so "nothing generated" is checked, not assumed)."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.testing.fakes import FakeBackendPlugin

USER = [{"role": "user", "content": "hi"}]
LIMITS_DEFAULT_ERROR_CHARS = 1024
LIMITS = {
    "max_request_bytes": 4096,
    "max_json_depth": 8,
    "max_messages": 3,
    "max_content_parts": 2,
    "max_stop_strings": 2,
    "max_stop_chars": 5,
    "max_prompt_chars": 100,
    "max_request_tokens": 40,
    "max_error_chars": 200,
}


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    return dict(LIMITS)


def assert_error(r: Any, status: int, param: str | None, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert len(r.content) < 1024, "error bodies are bounded"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def generated(fake: FakeBackendPlugin) -> int:
    return sum(m.generated_sequences for m in fake.backend.models)


async def test_body_over_the_byte_limit_is_413(flexserv_client: Any, fake: FakeBackendPlugin) -> None:
    body = {"messages": [{"role": "user", "content": "x" * 5000}]}
    error = assert_error(await flexserv_client.post("/v1/chat/completions", json=body), 413, None, "payload_too_large")
    assert "--max-request-bytes" in error["message"]

    async def chunks() -> Any:  # no Content-Length: the limit holds while reading
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    r = await flexserv_client.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, None, "payload_too_large")
    assert generated(fake) == 0


async def test_nesting_one_level_too_deep_is_400(flexserv_client: Any) -> None:
    raw = b'{"messages": ' + b"[" * 8 + b"]" * 8 + b"}"  # 9 levels, the limit is 8
    r = await flexserv_client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 400, None, "json_too_deep")
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 1}  # 5 levels
    assert (await flexserv_client.post("/v1/chat/completions", json=body)).status_code == 200


@pytest.mark.parametrize("depth", [10_000, 100_000])
async def test_deep_nesting_is_400_not_500_with_default_limits(fake: FakeBackendPlugin, depth: int) -> None:
    """10,000 levels decode and are rejected by the walk; 100,000 exceed msgspec's recursion limit."""
    from flexserv_core.testing import app_client, make_app

    raw = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    async with app_client(make_app([fake])) as client:
        r = await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert_error(r, 400, None, "json_too_deep")
        ok = {"messages": USER, "max_tokens": 1}
        assert (await client.post("/v1/chat/completions", json=ok)).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER * 4}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 3}]}, "messages[0].content"),
        ({"messages": USER, "stop": ["a", "b", "c"]}, "stop"),
        ({"messages": USER, "stop": ["ok", "toolong"]}, "stop[1]"),
        ({"messages": USER, "stop": "toolong"}, "stop"),
        ({"messages": [{"role": "user", "content": "x" * 101}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x" * 60}, {"role": "user", "content": "y" * 60}]}, "messages"),
        ({"messages": USER, "max_tokens": 41}, "max_tokens"),
        ({"messages": USER, "max_tokens": 11, "n": 4}, "max_tokens"),
        ({"messages": USER, "max_completion_tokens": 21, "n": 2}, "max_completion_tokens"),
    ],
)
async def test_chat_bounds(flexserv_client: Any, fake: FakeBackendPlugin, body: dict[str, Any], param: str) -> None:
    assert_error(await flexserv_client.post("/v1/chat/completions", json=body), 400, param)
    assert_error(await flexserv_client.post("/v1/chat/completions", json={**body, "stream": True}), 400, param)
    assert fake.backend.loads == 0, "bounds are checked before a model is loaded"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x" * 101}, "prompt"),
        ({"prompt": ["x" * 50, "y" * 51]}, "prompt"),
        ({"prompt": list(range(65, 166))}, "prompt"),
        ({"prompt": "a", "stop": ["a", "b", "c"]}, "stop"),
        ({"prompt": "a", "max_tokens": 21, "n": 2}, "max_tokens"),
        ({"prompt": ["a", "b"], "max_tokens": 11, "n": 2}, "max_tokens"),
    ],
)
async def test_completion_bounds(
    flexserv_client: Any, fake: FakeBackendPlugin, body: dict[str, Any], param: str
) -> None:
    assert_error(await flexserv_client.post("/v1/completions", json=body), 400, param)
    assert fake.backend.loads == 0


async def test_the_default_budget_is_cut_to_the_request_token_bound(flexserv_client: Any) -> None:
    """No max_tokens, n=4, 40 tokens per request: each choice gets 10, not the context."""
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": USER, "n": 4})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 40
    assert {c["finish_reason"] for c in r.json()["choices"]} == {"length"}
    r = await flexserv_client.post("/v1/completions", json={"prompt": ["a", "b", "c"]})
    assert r.json()["usage"]["completion_tokens"] == 39


async def test_long_model_ids_come_back_cut(fake: FakeBackendPlugin) -> None:
    from flexserv_core.testing import app_client, make_app

    model = "m" * 100_000
    async with app_client(make_app([fake, "embeddings"])) as client:
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            body = {"model": model, "messages": USER, "prompt": "a", "input": "a"}
            error = assert_error(await client.post(path, json=body), 404, "model", "model_not_found")
            assert "(100000 characters)" in error["message"]
        assert_error(await client.get(f"/v1/models/{'n' * 3000}"), 404, "model")


async def test_unknown_field_names_come_back_cut(fake: FakeBackendPlugin) -> None:
    from flexserv_core.testing import app_client, make_app

    app = make_app([fake], settings={"block_on_unexpected_fields": True})
    async with app_client(app) as client:
        r = await client.post("/v1/chat/completions", json={"messages": USER, "k" * 50_000: 1})
        assert r.status_code == 400 and len(r.content) < 2 * LIMITS_DEFAULT_ERROR_CHARS + 200, r.text[:300]
        error = r.json()["error"]
        assert error["code"] == "unexpected_field"
        assert len(error["message"]) <= LIMITS_DEFAULT_ERROR_CHARS and len(error["param"]) <= LIMITS_DEFAULT_ERROR_CHARS


async def test_every_error_message_is_cut_to_the_setting(flexserv_client: Any) -> None:
    """msgspec quotes an invalid enum value whole; the handler cuts the message."""
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": [{"role": "r" * 3000, "content": "x"}]})
    error = assert_error(r, 400, "messages[0].role")
    assert len(error["message"]) <= LIMITS["max_error_chars"]
