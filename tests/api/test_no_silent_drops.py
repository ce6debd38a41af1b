"""No silent drops: OpenAI parameters that would change the output and are not
implemented get a 400 naming them; bookkeeping parameters are accepted; fields
OpenAI does not define are dropped with one warning, or refused (at any depth)
under ``--block-on-unexpected-fields``."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from flexserv_core.api.field_warnings import LINES_PER_REQUEST, UNKNOWN_FIELDS, UnknownFieldWarnings
from flexserv_core.api.openai_params import IGNORED, UNSUPPORTED
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
USER = [{"role": "user", "content": "hi"}]

#: A value of each unsupported chat parameter that a real client would send.
CHAT_VALUES: dict[str, Any] = {
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "hello"},
    "web_search_options": {},
    "functions": [{"name": "f", "parameters": {"type": "object"}}],
    "function_call": "auto",
    "reasoning_effort": "low",
    "verbosity": "low",
    "moderation": {"model": "omni-moderation-latest"},
    "store": True,
    "stop_token_ids": [2],
}


def _error(r: Any, param: str, code: str) -> None:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error


def test_every_unsupported_parameter_has_a_test_value() -> None:
    assert set(CHAT_VALUES) == set(UNSUPPORTED[CHAT])


@pytest.mark.parametrize("param", sorted(CHAT_VALUES))
@pytest.mark.parametrize("stream", [False, True])
async def test_unsupported_chat_parameter_is_400(flexserv_client: Any, param: str, stream: bool) -> None:
    body = {"messages": USER, "max_tokens": 2, "stream": stream, param: CHAT_VALUES[param]}
    _error(await flexserv_client.post(CHAT, json=body), param, "unsupported_parameter")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "custom", "custom": {"name": "sql"}}]}, "tools[0].type"),
        (
            {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
            "tool_choice.type",
        ),
        ({"tool_choice": {"type": "custom", "custom": {"name": "sql"}}}, "tool_choice.type"),
    ],
)
async def test_openai_tool_kinds_not_served_are_named(flexserv_client: Any, extra: dict[str, Any], param: str) -> None:
    r = await flexserv_client.post(CHAT, json={"messages": USER, "max_tokens": 2, **extra})
    _error(r, param, "unsupported_parameter")


async def test_neutral_values_and_bookkeeping_are_accepted(flexserv_client: Any) -> None:
    bookkeeping = {
        "user": "u1",
        "metadata": {"k": "v"},
        "service_tier": "auto",
        "prompt_cache_key": "abc",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {"mode": "explicit"},
        "safety_identifier": "s1",
    }
    assert set(bookkeeping) == IGNORED[CHAT]
    body = {"messages": USER, "max_tokens": 2, "modalities": ["text"], "audio": None, "store": False, **bookkeeping}
    r = await flexserv_client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 2, "user": "u1"})
    assert r.status_code == 200, r.text


async def test_assistant_history_as_the_api_returns_it(flexserv_client: Any, fake: FakeBackendPlugin) -> None:
    """A refusal (null content and ``refusal``, or a refusal part) is the assistant's text;
    the response message's null ``audio``/``function_call``/``annotations`` and a
    content part's caching hint are accepted; non-null ``function_call``/``audio`` are refused."""
    said = {"role": "assistant", "content": None, "refusal": "I can't.", "audio": None, "function_call": None}
    cases = [
        {**said, "annotations": []},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        {"role": "assistant", "content": "Well.", "refusal": "I can't."},
    ]
    texts = ["I can't.", "I can't.", "Well.\nI can't."]
    for message, text in zip(cases, texts, strict=True):
        hint = {"type": "text", "text": "ok", "prompt_cache_breakpoint": {"mode": "explicit"}}
        body = {"messages": [*USER, message, {"role": "user", "content": [hint]}], "max_tokens": 2}
        r = await flexserv_client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        assert "x-flexserv-ignored-fields" not in r.headers
        assert fake.last_prompt is not None and f"assistant: {text}\nuser: ok" in fake.last_prompt
    for field, value in [("function_call", {"name": "f", "arguments": "{}"}), ("audio", {"id": "audio_1"})]:
        body = {"messages": [*USER, {"role": "assistant", "content": "x", field: value}, *USER], "max_tokens": 2}
        _error(await flexserv_client.post(CHAT, json=body), f"messages[1].{field}", "unsupported_parameter")
    for field, value in [("refusal", "no"), ("function_call", {"name": "f"})]:
        body = {"messages": [{"role": "user", "content": "hi", field: value}], "max_tokens": 2}
        r = await flexserv_client.post(CHAT, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == f"messages[0].{field}", r.text
    empty = {"messages": [*USER, {"role": "assistant", "content": [{"type": "refusal"}]}, *USER], "max_tokens": 2}
    _error(await flexserv_client.post(CHAT, json=empty), "messages[1].content[0].refusal", "missing_required_parameter")


async def test_completions_refuse_stop_token_ids_and_read_response_format(flexserv_client: Any) -> None:
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 2, "stop_token_ids": [2]})
    _error(r, "stop_token_ids", "unsupported_parameter")
    # read as vLLM reads it, not dropped: the fake model takes no constraints, so a 400 naming it
    r = await flexserv_client.post(
        COMPLETIONS, json={"prompt": "x", "max_tokens": 2, "response_format": {"type": "json_object"}}
    )
    _error(r, "response_format", "unsupported_parameter")
    ok = {"prompt": "x", "max_tokens": 2, "stop_token_ids": [], "response_format": {"type": "text"}}
    r = await flexserv_client.post(COMPLETIONS, json=ok)
    assert r.status_code == 200 and "x-flexserv-ignored-fields" not in r.headers, r.text


async def test_suffix_is_unsupported(flexserv_client: Any) -> None:
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 2, "suffix": "y"})
    _error(r, "suffix", "unsupported_parameter")


async def test_unknown_fields_warn_once(flexserv_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="flexserv_core.api.field_warnings")
    # names no other test sends: the warned-about set is the process's
    body = {"messages": [{"role": "user", "content": "hi", "hue_once": "red"}], "max_tokens": 2, "frobnicate_once": 1}
    for _ in range(3):
        r = await flexserv_client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
    messages = [rec.getMessage() for rec in caplog.records]
    warnings = [m for m in messages if "not a parameter" in m]
    assert len([w for w in warnings if "frobnicate_once" in w]) == 1
    assert len([w for w in warnings if "messages[].hue_once" in w]) == 1
    assert not [m for m in messages if "not listed" in m]  # both were named, nothing left unlisted


async def test_block_on_unexpected_fields_covers_nested_fields() -> None:
    app = make_app([FakeBackendPlugin(), "embeddings"], settings={"block_on_unexpected_fields": True})
    async with app_client(app) as client:
        cases = [
            (CHAT, {"messages": [{"role": "user", "content": "hi", "colour": "red"}]}, "messages[0].colour"),
            (
                CHAT,
                {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "strictness": 1}}]},
                "tools[0].function.strictness",
            ),
            (CHAT, {"messages": USER, "response_format": {"type": "json_object", "x": 1}}, "response_format.x"),
            (CHAT, {"messages": USER, "stream_options": {"include_usage": True, "y": 1}}, "stream_options.y"),
            (
                CHAT,
                {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "z": 1}]}]},
                "messages[0].content[0].z",
            ),
            (COMPLETIONS, {"prompt": "x", "frobnicate": 1}, "frobnicate"),
            (EMBEDDINGS, {"input": "x", "frobnicate": 1}, "frobnicate"),
        ]
        for path, body, param in cases:
            _error(
                await client.post(path, json={**body, "max_tokens": 2} if path != EMBEDDINGS else body),
                param,
                "unexpected_field",
            )
        # OpenAI's own bookkeeping fields are not "unexpected"
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 2, "user": "u", "metadata": {"a": "b"}})
        assert r.status_code == 200, r.text


class _Inner(msgspec.Struct):
    a: int


class _Outer(msgspec.Struct):
    inner: _Inner


def test_unknown_field_check_describes_a_schema_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """msgspec rebuilds a type's description on every call; the check keeps one per schema
    (it was a tenth of an embeddings request's server time) and still finds nested fields."""
    import msgspec.inspect

    from flexserv_core.api.body import unknown_fields

    calls: list[Any] = []
    real = msgspec.inspect.type_info

    def counting(schema: Any) -> Any:
        calls.append(schema)
        return real(schema)

    monkeypatch.setattr(msgspec.inspect, "type_info", counting)
    for _ in range(3):
        assert unknown_fields({"inner": {"a": 1, "b": 2}, "c": 3}, _Outer) == ["inner.b", "c"]
    assert calls == [_Outer]


async def test_a_flood_of_distinct_unknown_fields_logs_a_few_lines(
    flexserv_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    flood = {f"unknown_{i}": 0 for i in range(300_000)}  # 4.2 MiB of JSON
    for _ in range(2):
        r = await flexserv_client.post(CHAT, json={"messages": USER, "max_tokens": 2, **flood})
        assert r.status_code == 200, r.text
    lines = [rec.getMessage() for rec in caplog.records if "field" in rec.getMessage()]
    assert 2 <= len(lines) <= 2 * (LINES_PER_REQUEST + 1), lines[:20]
    assert any("unknown_0" in line for line in lines)
    assert len(UNKNOWN_FIELDS) <= UNKNOWN_FIELDS.max_remembered


def test_remembered_unknown_field_names_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    warnings = UnknownFieldWarnings(max_remembered=10, scanned_per_request=4, lines_per_request=2)
    for request in range(50):
        warnings.warn("/v1/x", [f"a{request}_{i}" for i in range(1000)])
    assert len(warnings) == 10
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) <= 50 * 3 + 1
    caplog.clear()
    warnings.warn("/v1/x", ["a0_0", "a0_1"])  # remembered: logged once, not again
    assert caplog.records == []
    warnings.warn("/v1/x", ["y" * 10_000])
    assert max(len(rec.getMessage()) for rec in caplog.records) < 300  # a name is quoted cut


def test_the_unlisted_count_is_the_fields_not_looked_at(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    warnings = UnknownFieldWarnings(lines_per_request=2)
    warnings.warn("/v1/x", ["p1", "p2", "p3", "p4", "p5"])
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 3 and "ignoring 3 more unknown field(s)" in lines[-1]
    caplog.clear()
    warnings.warn("/v1/x", ["p1", "p2", "q1"])  # two named before, one new: nothing unlisted
    assert [rec.getMessage() for rec in caplog.records] == [
        "ignoring field 'q1' of /v1/x requests: not a parameter this server knows (logged once)"
    ]
