"""``-p no:tool-parsers`` leaves a server without tool calling, on a real socket: a
request that uses tools (chat's ``tools``, a required or named ``tool_choice``, calls
in its history; the Responses API's function tools and call items) is an
OpenAI-shaped 400 (``unsupported_parameter``) naming the parameter, before anything
streams or is generated, and everything else is served. With the plugin the same
requests are served."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from flexserv_core.testing import post_read, served_with_and_without

USER = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
HISTORY = [
    *USER,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
]
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
REFUSED = [
    (CHAT, {"messages": USER, "tools": [WEATHER]}, "tools"),
    (CHAT, {"messages": USER, "tools": [WEATHER], "tool_choice": "auto"}, "tools"),
    (CHAT, {"messages": USER, "tool_choice": "required"}, "tool_choice"),
    (CHAT, {"messages": USER, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    (CHAT, {"messages": USER, "tool_choice": "auto"}, "tool_choice"),  # OpenAI too: no tools, no choice
    (CHAT, {"messages": HISTORY}, "messages[1].tool_calls"),
    (RESPONSES, {"input": "hi", "tools": [{"type": "function", "name": "get_weather"}]}, "tools"),
    (
        RESPONSES,
        {
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
            ]
        },
        "input[1].tool_calls",
    ),
]  # fmt: skip

#: Requests the plugin refuses too, for what they are (``invalid_request_error``)
INVALID_WITH_THE_PLUGIN = {"tool_choice"}


@pytest.fixture(scope="module")
def served() -> Any:
    """One server without the plugin (blocked as ``-p no:tool-parsers`` blocks it) and one with it."""
    with served_with_and_without("tool-parsers", ["tool-parsers", "responses", "constraints"]) as servers:
        yield servers


async def _post(base: str, path: str, body: dict[str, Any], stream: bool) -> httpx.Response:
    limit = "max_output_tokens" if path == RESPONSES else "max_tokens"
    return await post_read(base, path, {"model": "fake-model", limit: 20, **body}, stream=stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("path", "body", "param"), REFUSED, ids=lambda v: v if isinstance(v, str) else None)
async def test_without_the_plugin_tools_are_a_400_naming_the_parameter(
    served: Any, path: str, body: dict[str, Any], param: str, stream: bool
) -> None:
    base, fake = served["off"]
    before = len(fake.requests)
    async with httpx.AsyncClient(base_url=base) as client:  # so that a load the refusal caused would show
        assert (await client.post("/v1/flexserv/models/unload", json={"model_id": "*"})).status_code == 200
    loads = fake.backend.loads
    response = await _post(base, path, body, stream)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")  # refused before a stream began
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "unsupported_parameter", param)
    assert "tool calling" in error["message"] and "'tool-parsers' plugin" in error["message"]
    assert len(fake.requests) == before  # nothing was generated
    assert fake.backend.loads == loads  # refused before a model was loaded
    on_base, _ = served["on"]
    served_on = await _post(on_base, path, body, stream)
    if param in INVALID_WITH_THE_PLUGIN:  # a choice without tools
        assert served_on.status_code == 400 and served_on.json()["error"]["param"] == param
        assert served_on.json()["error"]["code"] != "unsupported_parameter"
    else:
        assert served_on.status_code == 200, served_on.text  # the same request, with the plugin


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"messages": USER}),
        (CHAT, {"messages": USER, "tools": [], "tool_choice": "none"}),
        ("/v1/completions", {"prompt": "hi"}),
        (RESPONSES, {"input": "hi"}),
    ],
)
async def test_without_the_plugin_everything_else_is_served(served: Any, path: str, body: dict[str, Any]) -> None:
    base, _ = served["off"]
    for stream in (False, True):
        response = await _post(base, path, body, stream)
        assert response.status_code == 200, response.text
