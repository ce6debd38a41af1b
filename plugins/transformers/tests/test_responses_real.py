"""``/v1/responses`` with real models: the embedded SmolLM2 over a real loopback
server, and a tiny random Llama whose template opens ``<think>`` (reasoning items)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import openai
import pytest
from flexserv_transformers.testing import build_tiny_llama
from pydantic import BaseModel, Field

from flexserv_core.testing import (
    app_client,
    make_app,
    openai_client,
)

pytestmark = pytest.mark.slow
SMOLLM = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France? Answer with one word."


async def test_smollm_responses_over_loopback(server_url: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0, timeout=300) as sdk:
        full = await sdk.responses.create(model=SMOLLM, input=QUESTION, max_output_tokens=12, temperature=0)
        assert "Paris" in full.output_text
        assert full.usage.input_tokens > 10 and 0 < full.usage.output_tokens <= 12
        async with sdk.responses.stream(model=SMOLLM, input=QUESTION, max_output_tokens=12, temperature=0) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        assert "".join(deltas) == final.output_text == full.output_text
        chat = await sdk.chat.completions.create(
            model=SMOLLM, messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0
        )
        assert chat.choices[0].message.content == full.output_text
        follow = await sdk.responses.create(
            model=SMOLLM,
            input="And of Germany?",
            previous_response_id=full.id,
            max_output_tokens=12,
            temperature=0,
        )
        # the continuation's prompt holds the first exchange
        assert follow.usage.input_tokens > full.usage.input_tokens + full.usage.output_tokens
        assert follow.output_text


#: Short runs of letters: the longest valid object stays far below the token limit.
Word = Annotated[str, Field(max_length=16, pattern=r"^[A-Za-z][A-Za-z ]*$")]


class Capital(BaseModel):
    city: Word
    country: Word


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}


async def test_smollm_structured_output_and_tool_round_trip(server_url: str) -> None:
    """The SDK's ``parse`` and a function-call round trip on the embedded model (its
    template has no tools: they reach it through the chat path's fallback prompt)."""
    async with openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0, timeout=300) as sdk:
        parsed = await sdk.responses.parse(
            model=SMOLLM, input=QUESTION, text_format=Capital, max_output_tokens=60, temperature=0
        )
        assert isinstance(parsed.output_parsed, Capital), parsed.output_text
        assert parsed.output_parsed.city.strip() == "Paris"

        ask = "What is the weather like in Paris today?"
        first = await sdk.responses.create(
            model=SMOLLM,
            input=ask,
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            max_output_tokens=80,
            temperature=0,
        )
        calls = [item for item in first.output if item.type == "function_call"]
        assert calls and calls[0].name == "get_weather", first.output
        args = json.loads(calls[0].arguments)
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
        async with sdk.responses.stream(
            model=SMOLLM,
            input=ask,
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            max_output_tokens=80,
            temperature=0,
        ) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
            streamed = await stream.get_final_response()
        assert "".join(deltas) == streamed.output[-1].arguments == calls[0].arguments

        final = await sdk.responses.create(
            model=SMOLLM,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "22 degrees, sunny"}],
            tools=[WEATHER],
            tool_choice="none",
            max_output_tokens=24,
            temperature=0,
        )
        assert [item.type for item in final.output] == ["message"] and final.output_text.strip()
        # the same turn through chat completions: the stored call and its output are the history
        call = calls[0]
        chat = await sdk.chat.completions.create(
            model=SMOLLM,
            messages=[
                {"role": "user", "content": ask},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.call_id, "content": "22 degrees, sunny"},
            ],
            tools=[{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
            tool_choice="none",
            max_tokens=24,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
        )
        assert chat.usage.prompt_tokens == final.usage.input_tokens
        assert_same_greedy_text_or_tie(chat.choices[0].logprobs.content, final.output_text)


def assert_same_greedy_text_or_tie(chosen: list[Any], other_text: str, tie: float = 0.05) -> None:
    """``other_text`` was generated greedily from the same prompt as ``chosen`` (chat's
    logprobs): equal, or equal up to a position where the two picked different tokens of
    (nearly) the same logprob. Prefix-cache hits at other boundaries change the floats
    enough to flip such ties, so exact equality would test the cache, not the history."""
    text = ""
    for position in chosen:
        if not other_text.startswith(text + position.token):
            rest = other_text[len(text) :]
            rivals = [t for t in position.top_logprobs if t.token and rest.startswith(t.token)]
            assert rivals, (
                f"diverged after {text!r}: chose {position.token!r} ({position.logprob:.4f}), the other text goes on"
                f" {rest[:20]!r}; top: {[(t.token, round(t.logprob, 4)) for t in position.top_logprobs]}"
            )
            assert position.logprob - max(t.logprob for t in rivals) < tie, (position, rivals)
            return
        text += position.token
    assert other_text == text


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-thinking"), max_position_embeddings=128)


async def test_thinking_template_gives_a_reasoning_item(tiny_dir: Path) -> None:
    """The template ends in ``<think>\\n`` with enable_thinking: what the model writes
    is reasoning until ``</think>``, which random weights do not produce."""
    app = make_app(
        ["template-kwargs", "transformers", "tool-parsers", "responses"],
        settings={"model": [f"tiny={tiny_dir}"], "dtype": "float32"},
    )
    common: dict[str, Any] = {"model": "tiny", "input": "hello", "max_output_tokens": 8, "temperature": 0}
    async with app_client(app) as client:
        sdk = openai_client(client)
        thinking = await sdk.responses.create(**common, extra_body={"enable_thinking": True})
        assert [item.type for item in thinking.output] == ["reasoning"]
        reasoning = thinking.output[0].content[0].text
        chat = await sdk.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=8,
            temperature=0,
            extra_body={"enable_thinking": True},
        )
        assert reasoning == chat.choices[0].message.content.strip() != ""
        assert 0 < thinking.usage.output_tokens_details.reasoning_tokens <= thinking.usage.output_tokens

        async with sdk.responses.stream(**common, extra_body={"enable_thinking": True}) as stream:
            events = [e async for e in stream]
        assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == reasoning
        assert not any(e.type == "response.output_text.delta" for e in events)

        plain = await sdk.responses.create(**common, extra_body={"enable_thinking": False})
        assert [item.type for item in plain.output] == ["message"]
