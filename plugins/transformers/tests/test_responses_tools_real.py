"""``/v1/responses`` structured outputs and function calling on a real loopback server
with a tiny random Llama whose chat template knows tools: ``text.format`` and a
required or named ``tool_choice`` are enforced by constrained decoding, so even
random weights give a valid object or call; the call's output, sent back with
``previous_response_id``, reaches the template as chat history."""

from __future__ import annotations

import json
from typing import Annotated, Any

import openai
import pytest
from pydantic import BaseModel, Field

pytestmark = pytest.mark.slow

PARAMETERS = {
    "type": "object",
    "properties": {
        "word": {"type": "string", "pattern": "^[a-z]{1,6}$"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["word", "limit"],
    "additionalProperties": False,
}
LOOKUP = {"type": "function", "name": "lookup", "description": "Look a word up.", "parameters": PARAMETERS}
OTHER = {"type": "function", "name": "other", "parameters": {"type": "object", "properties": {}}}
QUESTION = "look up fox"


class Entry(BaseModel):
    word: Annotated[str, Field(pattern=r"^[a-z]{1,6}$")]
    count: int = Field(ge=0, le=99)
    plural: bool


@pytest.fixture
def sdk(tiny_tools_served: tuple[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{tiny_tools_served[0]}/v1", api_key="x", max_retries=0, timeout=300)


def _tokenizer(tiny_tools_served: tuple[str, Any]) -> Any:
    return tiny_tools_served[1].state.flexserv.registry.model_if_loaded("tiny").tokenizer


def _check_lookup(arguments: str) -> None:
    args = json.loads(arguments)
    assert set(args) == {"word", "limit"} and 1 <= args["limit"] <= 9
    assert args["word"].isalpha() and args["word"].islower() and len(args["word"]) <= 6


async def test_parse_returns_a_validated_object(sdk: openai.AsyncOpenAI) -> None:
    for _ in range(2):  # sampled (temperature 1): every draw must match the schema
        r = await sdk.responses.parse(model="tiny", input=QUESTION, text_format=Entry, max_output_tokens=120)
        assert r.status == "completed", r.output_text
        assert isinstance(r.output_parsed, Entry)
        assert r.text.format.type == "json_schema" and r.text.format.name == "Entry"
    obj = await sdk.responses.create(
        model="tiny", input=QUESTION, text={"format": {"type": "json_object"}}, max_output_tokens=40, temperature=0
    )
    if obj.status == "completed":
        assert isinstance(json.loads(obj.output_text), dict)
    else:  # greedy random weights may keep adding keys until the limit: still an object so far
        assert obj.output_text.startswith("{")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "lookup"}])
async def test_forced_call_streamed_and_not(sdk: openai.AsyncOpenAI, choice: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": "tiny",
        "input": QUESTION,
        "tools": [LOOKUP, OTHER],
        "tool_choice": choice,
        "parallel_tool_calls": False,
        "max_output_tokens": 120,
        "temperature": 0,
    }
    full = await sdk.responses.create(**kwargs)
    assert full.status == "completed"
    calls = [item for item in full.output if item.type == "function_call"]
    assert len(calls) == 1 and [item.type for item in full.output][-1] == "function_call"
    call = calls[0]
    if call.name == "lookup":
        _check_lookup(call.arguments)
    else:
        assert choice == "required" and call.name == "other" and json.loads(call.arguments) == {}

    stream = await sdk.responses.create(**kwargs, stream=True)
    events = [event async for event in stream]
    types = [e.type for e in events]
    added = types.index("response.output_item.added", types.index("response.in_progress"))
    while events[added].item.type != "function_call":
        added = types.index("response.output_item.added", added + 1)
    tail = types[added:]
    deltas = [e.delta for e in events[added:] if e.type == "response.function_call_arguments.delta"]
    assert tail == [
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * len(deltas),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[added].item.arguments == "" and deltas
    done = events[types.index("response.function_call_arguments.done")]
    final = events[-1].response.output[-1]
    assert "".join(deltas) == done.arguments == final.arguments == call.arguments
    assert final.name == call.name and final.type == "function_call"


async def test_round_trip_to_a_final_message(sdk: openai.AsyncOpenAI, tiny_tools_served: tuple[str, Any]) -> None:
    first = await sdk.responses.create(
        model="tiny",
        input=QUESTION,
        tools=[LOOKUP],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=120,
        temperature=0,
    )
    call = first.output[-1]
    assert call.type == "function_call"
    second = await sdk.responses.create(
        model="tiny",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a small wild dog"}],
        tools=[LOOKUP],
        max_output_tokens=8,
        temperature=0,
    )
    assert [item.type for item in second.output] == ["message"] and second.output_text
    # the prompt is exactly the template's rendering of the call and its result as chat history
    expected = _tokenizer(tiny_tools_served).apply_chat_template(
        [
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.loads(call.arguments)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "name": "lookup", "content": "a small wild dog"},
        ],
        tools=[{"type": "function", "function": {k: v for k, v in LOOKUP.items() if k != "type"}}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert second.usage.input_tokens == len(expected)


async def test_uncompilable_schema_is_400_before_the_stream(sdk: openai.AsyncOpenAI) -> None:
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "array", "uniqueItems": True}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.responses.create(
                model="tiny", input=QUESTION, text={"format": fmt}, max_output_tokens=5, stream=stream
            )
        assert info.value.body["param"] == "text.format.schema", info.value.body
