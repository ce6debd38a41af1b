"""The plugin in a real app, through ``/v1/chat/completions`` and the openai SDK.

The test model echoes its rendered prompt back as the completion, so the answer
shows exactly which template variables each request was rendered with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelSpec,
    ProgressCallback,
    SamplingParams,
    TokenDelta,
    UsageError,
    hookimpl,
)
from flexserv_core.testing import FakeTextModel, app_client, make_app, openai_client

USER = [{"role": "user", "content": "hi"}]


class EchoPromptModel(FakeTextModel):
    """Renders like :class:`FakeTextModel` (variables as ``key=value`` lines) and
    answers with the variable lines of its own prompt, one character per step."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        lines = self.decode(prompt_ids).splitlines()
        text = ";".join(line for line in lines if "=" in line and ": " not in line) or "-"
        text = text[: params.max_tokens]
        for i, char in enumerate(text):
            await asyncio.sleep(self.token_delay)
            yield TokenDelta(token_id=ord(char), text=char, finish_reason="stop" if i == len(text) - 1 else None)


class EchoBackend(Backend):
    name = "echo"
    kind = ModelKind.TEXT

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        return EchoPromptModel(spec, token_delay=0.002)


class EchoPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = options or {}

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [EchoBackend()]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [ModelSpec(name="echo", kind=ModelKind.TEXT, source="echo://", backend="echo", options=self.options)]


class OtherTemplatePlugin:
    """Another plugin contributing variables: it beats the server's defaults and the
    model's options, and the request's values beat it."""

    @hookimpl
    def flexserv_chat_template_kwargs(self, model: Any, context: Any) -> dict[str, Any]:
        return {"enable_thinking": "plugin", "from_plugin": 1, "per_model": "plugin"}


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return [EchoPlugin(), "template-kwargs"]


async def chat(sdk: Any, **extra: Any) -> str:
    r = await sdk.chat.completions.create(model="echo", messages=USER, max_tokens=200, extra_body=extra or None)
    return r.choices[0].message.content


async def test_request_values_reach_the_template(flexserv_openai: Any) -> None:
    assert await chat(flexserv_openai) == "-"
    assert await chat(flexserv_openai, enable_thinking=True) == "enable_thinking=True"
    got = await chat(
        flexserv_openai, chat_template_kwargs={"enable_thinking": False, "custom_key": "val"}, enable_thinking=True
    )
    assert got == "custom_key=val;enable_thinking=True", "top-level enable_thinking wins"
    got = await chat(flexserv_openai, chat_template_kwargs={"unused_by_template": [1, 2]})
    assert got == "unused_by_template=[1, 2]", "keys the template does not use are passed and ignored there"


async def test_streaming_uses_the_same_values(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.chat.completions.create(
        model="echo", messages=USER, max_tokens=200, stream=True, extra_body={"enable_thinking": False}
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "enable_thinking=False"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
        ({"chat_template_kwargs": "enable_thinking=true"}, "chat_template_kwargs"),
        ({"enable_thinking": "yes"}, "enable_thinking"),
        ({"enable_thinking": 1}, "enable_thinking"),
        ({"chat_template_kwargs": {"enable_thinking": "false"}}, "chat_template_kwargs.enable_thinking"),
        ({"chat_template_kwargs": {"tokenize": False}}, "chat_template_kwargs.tokenize"),
    ],
)
async def test_bad_values_are_openai_shaped_400s(
    flexserv_openai: Any, flexserv_client: Any, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await chat(flexserv_openai, **extra)
    assert info.value.status_code == 400
    r = await flexserv_client.post("/v1/chat/completions", json={"model": "echo", "messages": USER, **extra})
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["type"] == "invalid_request_error"


async def test_other_endpoints_are_untouched(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/v1/completions", json={"model": "echo", "prompt": "x", "max_tokens": 5, "chat_template_kwargs": [1]}
    )
    assert r.status_code == 200, "only chat requests are read by this plugin (completions drop unknown fields)"


async def test_server_defaults_model_options_request_and_other_plugins() -> None:
    app = make_app(
        [
            EchoPlugin(options={"chat_template_kwargs": {"per_model": "m", "shared": "model"}}),
            OtherTemplatePlugin(),
            "template-kwargs",
        ],
        settings={"template_kwargs_defaults": '{"enable_thinking": false, "shared": "default", "from_default": 1}'},
    )
    async with app_client(app) as client:
        sdk = openai_client(client)
        # defaults < the model's options < other plugins < the request (before, this
        # plugin's own defaults outranked every other plugin's contribution)
        got = await chat(sdk)
        assert got == "enable_thinking=plugin;from_default=1;from_plugin=1;per_model=plugin;shared=model"
        got = await chat(sdk, enable_thinking=True, chat_template_kwargs={"shared": "request", "per_model": "r"})
        assert got == "enable_thinking=True;from_default=1;from_plugin=1;per_model=r;shared=request"


def test_bad_default_stops_start_up() -> None:
    with pytest.raises(UsageError, match="--template-kwargs-defaults"):
        make_app(["template-kwargs"], settings={"template_kwargs_defaults": "[true]"})


async def test_16_concurrent_requests_each_render_their_own_values(flexserv_openai: Any) -> None:
    """Alternating values, all in flight together (the model yields between tokens)."""
    flags = [i % 2 == 0 for i in range(16)]
    results = await asyncio.gather(
        *(chat(flexserv_openai, enable_thinking=f, chat_template_kwargs={"i": i}) for i, f in enumerate(flags))
    )
    assert results == [f"enable_thinking={f};i={i}" for i, f in enumerate(flags)]


async def test_without_the_plugin_no_server_defaults() -> None:
    app = make_app([EchoPlugin()], settings={}, block=["template-kwargs"])
    async with app_client(app) as client:
        assert "template_kwargs_defaults" not in app.state.flexserv.settings.summary()
        got = await chat(openai_client(client))
        assert got == "-"
