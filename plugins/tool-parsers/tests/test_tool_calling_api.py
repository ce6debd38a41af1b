"""Tool calling on ``/v1/chat/completions`` with the fake backend, through the official
SDK: OpenAI-shaped 400s with ``param`` (also for streams), tool calls parsed out of the
model's text in full and as streamed deltas, and the call history in the prompt."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from flexserv_core.testing import FakeBackendPlugin

USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL_TEXT = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin(script=CALL_TEXT, eos_after=len(CALL_TEXT))


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "constraints"]


async def _bad(sdk: Any, param: str, **kwargs: Any) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.chat.completions.create(model="fake-model", max_tokens=3, stream=stream, **kwargs)
        assert info.value.body["param"] == param, info.value.body


async def test_tool_request_errors(flexserv_openai: Any) -> None:
    sdk = flexserv_openai
    await _bad(sdk, "tool_choice", messages=USER, tool_choice="required")
    await _bad(sdk, "tools[1].function.name", messages=USER, tools=[WEATHER, WEATHER])
    bad_params = {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
    await _bad(sdk, "tools[0].function.parameters", messages=USER, tools=[bad_params])
    await _bad(
        sdk,
        "tool_choice",
        messages=USER,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "other"}},
    )
    await _bad(sdk, "tools[0].function.name", messages=USER, tools=[{"type": "function", "function": {"name": ""}}])
    await _bad(
        sdk,
        "messages[1].tool_call_id",
        messages=[*USER, {"role": "tool", "tool_call_id": "call_x", "content": "1"}],
    )
    await _bad(sdk, "messages[1].tool_call_id", messages=[*USER, {"role": "tool", "content": "1"}])
    await _bad(
        sdk,
        "tool_choice",
        messages=USER,
        tools=[WEATHER],
        tool_choice="required",
        response_format={"type": "json_object"},
    )


async def test_auto_tool_call_parsed_whole_and_streamed(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    sdk = flexserv_openai
    kwargs: dict[str, Any] = {"model": "fake-model", "messages": USER, "tools": [WEATHER], "max_tokens": 200}
    full = await sdk.chat.completions.create(**kwargs)
    choice = full.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    # the fake "template" has no tool support: the fallback prompt described the tool
    assert "get_weather" in (fake.backend.models[0].last_prompt or "")

    content, name, arguments, finish = "", "", "", None
    async for chunk in await sdk.chat.completions.create(**kwargs, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or ():
            if piece.id:
                assert not arguments  # id and name before any argument fragment
                name = piece.function.name
            arguments += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert content.strip() == "Sure." and finish == "tool_calls"
    assert (name, arguments) == (call.function.name, call.function.arguments)

    none = await sdk.chat.completions.create(**kwargs, tool_choice="none")
    assert none.choices[0].message.tool_calls is None and "<tool_call>" in none.choices[0].message.content


async def test_tool_history_reaches_the_prompt(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
    ]
    r = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=history, tools=[WEATHER], max_tokens=1
    )
    assert r.choices[0].finish_reason == "length"
    model = fake.backend.models[0]
    prompt = model.last_prompt or ""
    assert '"city": "Oslo"' in prompt and "Result of get_weather (call call_1):\n-3 C" in prompt
    assert "get_weather" in prompt.split("user:", 1)[0]  # the fallback system prompt lists the tools
