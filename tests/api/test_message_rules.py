"""Chat messages follow OpenAI's rules for every role: a 400 on the field to fix,
before a model is loaded; valid histories are served."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.api.text_schemas import ChatMessage
from flexserv_core.testing.fakes import FakeBackendPlugin

USER = {"role": "user", "content": "hi"}
TEXT = [{"type": "text", "text": "hi"}]
HAS_TOOL_FIELDS = "tool_call_id" in ChatMessage.__struct_fields__
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}


def tool_answer(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "content": "3", "tool_call_id": call_id}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool"}], "messages[0].content"),
        ([USER, {"role": "tool", "content": "42"}], "messages[1].tool_call_id"),
        ([USER, {"role": "assistant"}], "messages[1].content"),
        ([USER, {"role": "assistant", "content": None}], "messages[1].content"),
        ([{"role": "system"}, USER], "messages[0].content"),
        ([{"role": "developer", "content": None}, USER], "messages[0].content"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": None}], "messages[0].content"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "system", "content": [{"type": "image_url"}]}, USER], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        ([{"role": "user", "content": [{"type": "text", "text": None}]}], "messages[0].content[0].text"),
        ([{"role": "developer", "content": [{"type": "refusal"}]}, USER], "messages[0].content[0].type"),
        # the tool-call history is a wire rule too, checked before any load
        (
            [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}, tool_answer("call_2")],
            "messages[2].tool_call_id",
        ),
        ([USER, {"role": "user", "content": "x", "tool_call_id": "call_1"}], "messages[1]"),
    ],
)
async def test_invalid_messages_are_400_on_the_field(
    flexserv_client: Any, fake: FakeBackendPlugin, messages: list[dict[str, Any]], param: str
) -> None:
    for stream in (False, True):
        r = await flexserv_client.post(
            "/v1/chat/completions", json={"messages": messages, "max_tokens": 1, "stream": stream}
        )
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param, error
        assert error["type"] == "invalid_request_error"
    assert fake.backend.loads == 0, "messages are checked before a model is loaded"


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "be brief"}, USER],
        [{"role": "developer", "content": TEXT}, {"role": "user", "content": TEXT}],
        [USER, {"role": "assistant", "content": "hello"}, USER],
        [USER, {"role": "assistant", "content": TEXT}, USER],
        [{"role": "user", "content": ""}],
    ],
)
async def test_valid_histories_are_served(flexserv_client: Any, messages: list[dict[str, Any]]) -> None:
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.skipif(not HAS_TOOL_FIELDS, reason="the message schema has no tool-calling fields yet")
async def test_tool_call_history_is_served(flexserv_client: Any) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "3", "tool_call_id": "call_1"},
    ]
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text
