"""Tool calling through a tool-aware chat template, on a tiny random Llama over a
real loopback server: tools and call history reach ``apply_chat_template``
natively, and ``required``/named choices make even a random model's output a
valid call (streamed and not, alike)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.slow

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {
            "type": "object",
            "properties": {
                "word": {"type": "string", "pattern": "^[a-z]{1,6}$"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            "required": ["word", "limit"],
            "additionalProperties": False,
        },
    },
}
OTHER = {"type": "function", "function": {"name": "other", "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "look up fox"}]


@pytest.fixture
def sdk(tiny_tools_served: tuple[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{tiny_tools_served[0]}/v1", api_key="x", max_retries=0, timeout=300)


def _tokenizer(tiny_tools_served: tuple[str, Any]) -> Any:
    server = tiny_tools_served[1].state.flexserv
    return server.registry.model_if_loaded("tiny").tokenizer


async def test_tools_and_history_reach_the_template(
    sdk: openai.AsyncOpenAI, tiny_tools_served: tuple[str, Any]
) -> None:
    history: list[Any] = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"word": "fox", "limit": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "a small wild dog"},
    ]
    r = await sdk.chat.completions.create(model="tiny", messages=history, tools=[LOOKUP], max_tokens=1)
    expected = _tokenizer(tiny_tools_served).apply_chat_template(
        [
            USER[0],
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": {"word": "fox", "limit": 2}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_7", "name": "lookup", "content": "a small wild dog"},
        ],
        tools=[LOOKUP],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert r.usage.prompt_tokens == len(expected)
    rendered = _tokenizer(tiny_tools_served).decode(expected)
    assert '"name": "lookup"' in rendered and "<tool_response>\na small wild dog" in rendered


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "lookup"}}])
async def test_random_model_makes_valid_calls(sdk: openai.AsyncOpenAI, choice: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": "tiny",
        "messages": USER,
        "tools": [LOOKUP, OTHER],
        "tool_choice": choice,
        "parallel_tool_calls": False,
        "max_tokens": 120,
        "temperature": 0,
    }
    full = await sdk.chat.completions.create(**kwargs)
    assert full.choices[0].finish_reason == "tool_calls"
    [call] = full.choices[0].message.tool_calls
    if call.function.name == "lookup":
        args = json.loads(call.function.arguments)
        assert set(args) == {"word", "limit"} and 1 <= args["limit"] <= 9 and args["word"].isalpha()
    else:
        assert choice == "required" and isinstance(json.loads(call.function.arguments), dict)
    # logprobs ride on the chunk of the token that produced the text: argument fragments
    # that carry them were sent as the model wrote them, not in one piece at the end
    name, fragments, live = "", [], 0
    async for chunk in await sdk.chat.completions.create(**kwargs, stream=True, logprobs=True):
        choice = chunk.choices[0]
        for piece in choice.delta.tool_calls or ():
            if piece.id:  # the first delta of the call: id, type and name, no arguments yet
                assert piece.type == "function" and piece.function.arguments == "" and not name
                name = piece.function.name
            elif piece.function.arguments:
                assert name, "the name comes before the arguments"
                fragments.append(piece.function.arguments)
                live += bool(choice.logprobs and choice.logprobs.content)
    assert (name, "".join(fragments)) == (call.function.name, call.function.arguments)
    if len(call.function.arguments) > 2:
        assert len(fragments) > 1 and live > 1
