"""Function tools and ``text.format`` on ``/v1/responses`` with the fake backend, through
the official SDK: the request maps onto the chat path's tools and structured
outputs, calls come back as ``function_call`` items (whole and streamed in OpenAI's
event order), a call's output continues the conversation, and bad requests are
OpenAI-shaped 400s naming the Responses parameter."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from flexserv_core.testing import FakeBackendPlugin

CALL_TEXT = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo, the capital of Norway"}}\n</tool_call>'
)
#: The Responses API's flat function tool (chat nests these fields under "function").
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeBackendPlugin:
    script = getattr(request, "param", CALL_TEXT)
    return FakeBackendPlugin(script=script, eos_after=len(script))


async def test_function_call_item(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.responses.create(model="fake-model", input="weather?", tools=[WEATHER])
    assert [item.type for item in r.output] == ["message", "function_call"]
    assert r.output_text == "Sure."
    call = r.output[1]
    assert call.id.startswith("fc_") and call.call_id.startswith("call_") and call.status == "completed"
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert r.status == "completed" and r.tools[0].name == "get_weather" and r.tool_choice == "auto"
    # the fake "template" has no tool support: the chat path's fallback prompt described the tool
    assert "get_weather" in (fake.last_prompt or "")

    none = await flexserv_openai.responses.create(
        model="fake-model", input="weather?", tools=[WEATHER], tool_choice="none"
    )
    assert [item.type for item in none.output] == ["message"] and "<tool_call>" in none.output_text


@pytest.mark.parametrize("fake", [TWO_CALLS], indirect=True)
@pytest.mark.parametrize("parallel", [True, False])
async def test_streamed_calls_in_openai_order(flexserv_openai: Any, parallel: bool) -> None:
    kwargs: dict[str, Any] = {
        "model": "fake-model",
        "input": "weather?",
        "tools": [WEATHER],
        "parallel_tool_calls": parallel,
    }
    full = await flexserv_openai.responses.create(**kwargs)
    assert [item.type for item in full.output] == ["function_call"] * (2 if parallel else 1)
    stream = await flexserv_openai.responses.create(**kwargs, stream=True)
    events = [event async for event in stream]
    types = [e.type for e in events]
    per_call = [
        "response.output_item.added",
        *["response.function_call_arguments.delta"],
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    collapsed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]  # runs of deltas -> one
    assert collapsed == ["response.created", "response.in_progress", *per_call * len(full.output), "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    for index, item in enumerate(final.output):
        added = next(e for e in events if e.type == "response.output_item.added" and e.output_index == index)
        assert added.item.type == "function_call" and added.item.arguments == "" and added.item.status == "in_progress"
        assert (added.item.id, added.item.name) == (item.id, item.name)
        deltas = [e for e in events if e.type == "response.function_call_arguments.delta" and e.output_index == index]
        assert all(e.item_id == item.id for e in deltas)
        done = next(e for e in events if e.type == "response.function_call_arguments.done" and e.output_index == index)
        assert "".join(e.delta for e in deltas) == done.arguments == item.arguments
        assert item.arguments == full.output[index].arguments and item.status == "completed"
    assert (await flexserv_openai.responses.retrieve(final.id)).output[-1].arguments == final.output[-1].arguments


async def test_stream_with_text_before_the_call(flexserv_openai: Any) -> None:
    async with flexserv_openai.responses.stream(model="fake-model", input="weather?", tools=[WEATHER]) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == "Sure."
    assert [item.type for item in final.output] == ["message", "function_call"]
    types = [e.type for e in events]
    # the message is closed before the call's item opens
    assert types.index("response.output_item.added", types.index("response.output_text.done")) > types.index(
        "response.content_part.done"
    )
    assert json.loads(final.output[1].arguments) == {"city": "Paris"}


async def test_round_trip_through_previous_response_id(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    first = await flexserv_openai.responses.create(model="fake-model", input="weather in Paris?", tools=[WEATHER])
    call = first.output[-1]
    second = await flexserv_openai.responses.create(
        model="fake-model",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}],
        tools=[WEATHER],
        tool_choice="none",
    )
    assert second.status == "completed" and [item.type for item in second.output] == ["message"]
    prompt = fake.last_prompt or ""
    # the stored call (in the parser's syntax, for a template without tools) and its result are history
    assert '"city": "Paris"' in prompt.split("user: weather in Paris?", 1)[1]
    assert f"Result of get_weather (call {call.call_id}):\n18 C, sunny" in prompt
    items = await flexserv_openai.responses.input_items.list(second.id)
    assert [(i.type, i.call_id, i.output) for i in items.data] == [
        ("function_call_output", call.call_id, "18 C, sunny")
    ]


async def test_round_trip_with_the_call_in_input(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.responses.create(
        model="fake-model",
        input=[
            {"role": "user", "content": "weather in Oslo?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "-3 C"},
        ],
        tools=[WEATHER],
    )
    assert r.status == "completed"
    prompt = fake.last_prompt or ""
    assert '"city": "Oslo"' in prompt and "Result of get_weather (call call_1):\n-3 C" in prompt


async def _bad(sdk: Any, param: str, code: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """A 400 naming ``param``, streamed or not (nothing is streamed before it)."""
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.responses.create(model="fake-model", stream=stream, **{"input": "x", **kwargs})
        body = info.value.body
        assert body["param"] == param, body
        if code is not None:
            assert body["code"] == code, body
    return body


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"},
        {"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"},
        {"type": "code_interpreter", "container": {"type": "auto"}},
    ],
)
async def test_non_function_tools_are_refused_by_name(flexserv_openai: Any, tool: dict[str, Any]) -> None:
    body = await _bad(flexserv_openai, "tools[1].type", "unsupported_parameter", tools=[WEATHER, tool])
    assert repr(tool["type"]) in body["message"]


async def test_tool_request_errors(flexserv_openai: Any) -> None:
    sdk = flexserv_openai
    await _bad(sdk, "tool_choice", tools=[WEATHER], tool_choice={"type": "function", "name": "other"})
    await _bad(sdk, "tool_choice", "invalid_value", tools=[WEATHER], tool_choice="maybe")
    await _bad(sdk, "tool_choice", "unsupported_parameter", tools=[WEATHER], tool_choice={"type": "web_search"})
    await _bad(sdk, "tool_choice.name", tools=[WEATHER], tool_choice={"type": "function"})
    await _bad(sdk, "tool_choice", tool_choice="required")  # no tools
    await _bad(sdk, "tools[1].name", tools=[WEATHER, WEATHER])
    await _bad(sdk, "tools[0].parameters", tools=[{**WEATHER, "parameters": {"type": "array"}}])
    await _bad(sdk, "tools[0].name", tools=[{**WEATHER, "name": "has space"}])
    nested = {"type": "function", "function": {"name": "get_weather"}}
    body = await _bad(sdk, "tools[0].name", tools=[nested])
    assert "flat" in body["message"]
    await _bad(sdk, "tool_choice", tools=[WEATHER], tool_choice="required", text={"format": {"type": "json_object"}})
    await _bad(sdk, "input[0].call_id", input=[{"type": "function_call_output", "call_id": "call_9", "output": "1"}])


async def test_text_format_errors(flexserv_openai: Any) -> None:
    sdk = flexserv_openai
    await _bad(sdk, "text.format.type", text={"format": {"type": "yaml"}})
    await _bad(sdk, "text.format.schema", text={"format": {"type": "json_schema", "name": "x"}})
    await _bad(sdk, "text.format.schema", text={"format": {"type": "json_schema", "name": "x", "schema": [1]}})
    await _bad(sdk, "text.format.name", text={"format": {"type": "json_schema", "schema": {}}})
    await _bad(sdk, "text.format.name", text={"format": {"type": "json_schema", "name": "a b", "schema": {}}})
    # the fake backend cannot enforce a format: refused by the chat path's check, named as on /v1/responses
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True}
    body = await _bad(sdk, "text.format.schema", "unsupported_parameter", text={"format": fmt})
    assert "constrained decoding" in body["message"]
    await _bad(sdk, "text.format", "unsupported_parameter", text={"format": {"type": "json_object"}})


async def test_plain_text_format_is_accepted(flexserv_openai: Any) -> None:
    r = await flexserv_openai.responses.create(model="fake-model", input="x", text={"format": {"type": "text"}})
    assert r.status == "completed" and r.text.format.type == "text"
