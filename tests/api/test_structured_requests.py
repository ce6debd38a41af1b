"""Request shapes of structured outputs and logit_bias on the fake backend:
OpenAI-shaped 400s with ``param`` (also for streams). Tool calling's own requests are
the tool-parsers plugin's tests (``test_tool_calling_api.py``)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


async def _bad(sdk: Any, param: str, code: str | None = None, **kwargs: Any) -> dict[str, Any]:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.chat.completions.create(model="fake-model", max_tokens=3, stream=stream, **kwargs)
        body = info.value.body
        assert body["param"] == param, body
        if code is not None:
            assert body["code"] == code, body
    return body


async def test_constraint_shape_errors(flexserv_openai: Any) -> None:
    sdk = flexserv_openai
    await _bad(
        sdk, "structured_outputs", messages=USER, extra_body={"structured_outputs": {"regex": "a", "choice": ["b"]}}
    )
    await _bad(sdk, "structured_outputs", messages=USER, extra_body={"structured_outputs": {}})
    await _bad(sdk, "structured_outputs.choice", messages=USER, extra_body={"structured_outputs": {"choice": []}})
    await _bad(
        sdk,
        "structured_outputs",
        messages=USER,
        response_format={"type": "json_object"},
        extra_body={"structured_outputs": {"regex": "a"}},
    )
    await _bad(sdk, "response_format.json_schema", messages=USER, response_format={"type": "json_schema"})
    await _bad(sdk, "response_format.type", messages=USER, response_format={"type": "yaml"})
    await _bad(sdk, "logit_bias.abc", messages=USER, logit_bias={"abc": 1})
    await _bad(sdk, "logit_bias.5", messages=USER, logit_bias={"5": 101})


async def test_a_backend_without_constraints_refuses_them(flexserv_openai: Any) -> None:
    # the fake backend does not override TextGenerationModel.prepare: nothing is dropped silently
    body = await _bad(
        flexserv_openai,
        "response_format",
        "unsupported_parameter",
        messages=USER,
        response_format={"type": "json_object"},
    )
    assert "constrained decoding" in body["message"]
    await _bad(flexserv_openai, "logit_bias", "unsupported_parameter", messages=USER, logit_bias={"65": 3})
    await _bad(
        flexserv_openai, "tools", "unsupported_parameter", messages=USER, tools=[WEATHER], tool_choice="required"
    )
