"""What audits found clients act on (hardening): a tool call cut by ``max_tokens``,
call markup in content, tool schemas under ``auto``, ``stream_options`` without a
stream, and ``best_of`` against ``--max-request-tokens``."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
USER = [{"role": "user", "content": "weather in Paris?"}]


def sse(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(block.removeprefix("data: "))
        for block in text.split("\n\n")
        if block.startswith("data: ") and block != "data: [DONE]"
    ]


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return [FakeBackendPlugin(script=CALL, eos_after=len(CALL)), "responses", "tool-parsers", "constraints"]


async def test_a_whole_call_is_tool_calls(flexserv_openai: openai.AsyncOpenAI) -> None:
    reply = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, tools=[WEATHER], max_tokens=200
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}


async def test_a_call_cut_by_max_tokens_is_length_and_its_markup_is_not_content(
    flexserv_openai: openai.AsyncOpenAI,
) -> None:
    reply = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, tools=[WEATHER], max_tokens=40
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls
    assert not choice.message.content or "<tool_call>" not in choice.message.content
    with pytest.raises(openai.LengthFinishReasonError):  # what agents rely on instead of a broken call
        strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
        await flexserv_openai.chat.completions.parse(model="fake-model", messages=USER, tools=[strict], max_tokens=40)


async def test_a_streamed_call_cut_by_max_tokens_is_length_without_markup(flexserv_client: Any) -> None:
    body = {"model": "fake-model", "messages": USER, "tools": [WEATHER], "max_tokens": 40, "stream": True}
    chunks = sse((await flexserv_client.post("/v1/chat/completions", json=body)).text)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes == ["length"] and "<tool_call>" not in content


async def test_responses_cut_call_leaves_no_markup_message(flexserv_client: Any) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    body = {"model": "fake-model", "input": "weather?", "tools": [tool], "max_output_tokens": 40}
    response = (await flexserv_client.post("/v1/responses", json=body)).json()
    assert response["status"] == "incomplete"
    texts = [part["text"] for item in response["output"] if item["type"] == "message" for part in item["content"]]
    assert not any("<tool_call>" in text for text in texts), response["output"]


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_an_invalid_tool_schema_is_a_400_whatever_the_choice(flexserv_client: Any, choice: str) -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "banana"}}}}}  # fmt: skip
    body = {"model": "fake-model", "messages": USER, "tools": [bad], "tool_choice": choice}
    response = await flexserv_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "tools[0].function.parameters"
    assert response.json()["error"]["code"] == "invalid_schema"


@pytest.mark.parametrize(
    ("path", "extra"), [("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "hi"})]
)
async def test_stream_options_need_a_stream(flexserv_client: Any, path: str, extra: dict[str, Any]) -> None:
    body = {"model": "fake-model", "stream_options": {"include_usage": True}, **extra}
    response = await flexserv_client.post(path, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream_options"
    ok = await flexserv_client.post(path, json={**body, "stream": True})
    assert ok.status_code == 200


async def test_best_of_counts_against_the_request_token_bound() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake, "responses"], settings={"max_request_tokens": 64})
    async with app_client(app) as client:
        body = {"model": "fake-model", "prompt": "hi", "max_tokens": 40, "best_of": 8, "n": 1}
        response = await client.post("/v1/completions", json=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "max_tokens"
        assert not fake.requests  # nothing was generated
        fine = await client.post("/v1/completions", json={**body, "best_of": 1})
        assert fine.status_code == 200
