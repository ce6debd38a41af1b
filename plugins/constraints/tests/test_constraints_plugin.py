"""The constraints plugin as ``flexserv run`` loads it: on by default through its entry
point, and ``-p no:constraints`` leaves a server that refuses constrained requests
with an OpenAI-shaped 400 naming the parameter (before anything is generated) and
serves everything else, on a real socket."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from flexserv_constraints import ConstraintVocabulary

from flexserv_core import LoadedModel, ModelSpec, ProgressCallback, create_plugin_manager
from flexserv_core.testing import (
    FakeBackendPlugin,
    FakeTextBackend,
    FakeTextModel,
    make_app,
    post_read,
    served_with_and_without,
)

USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


class VocabularyBackend(FakeTextBackend):
    """The fake backend whose models declare a byte vocabulary (the fake honours no
    grammar: what is tested here is what reaches it)."""

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        model = FakeTextModel(spec, token_delay=self.token_delay, **self.model_options)
        model.constraint_vocabulary = ConstraintVocabulary.from_tokens(
            [bytes([i]) for i in range(256)] + [b"</s>"], encode=list, eos_token_ids=[256]
        )
        self.models.append(model)
        return model


def plugin() -> FakeBackendPlugin:
    fake = FakeBackendPlugin()
    fake.backend = VocabularyBackend(context_length=4096)
    return fake


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    loaded = create_plugin_manager()
    assert loaded.infos["constraints"].distribution == "flexserv-constraints"
    assert "flexserv_constraint_compiler" in loaded.infos["constraints"].hooks
    blocked = create_plugin_manager(["no:constraints"])
    assert "flexserv_constraint_compiler" not in blocked.infos["constraints"].hooks


def test_the_server_holds_the_compiler_only_with_the_plugin() -> None:
    assert make_app([plugin(), "constraints"]).state.flexserv.constraints is not None
    assert make_app([plugin(), "constraints"], block=["constraints"]).state.flexserv.constraints is None


CHAT = "/v1/chat/completions"
REFUSED = [
    (CHAT, {"messages": USER, "response_format": {"type": "json_object"}}, "response_format"),
    (
        CHAT,
        {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        "response_format",
    ),
    (CHAT, {"messages": USER, "structured_outputs": {"regex": "[0-9]+"}}, "structured_outputs"),
    (CHAT, {"messages": USER, "guided_choice": ["a", "b"]}, "guided_choice"),
    (CHAT, {"messages": USER, "tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
    (
        CHAT,
        {
            "messages": USER,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        "tool_choice",
    ),
    ("/v1/completions", {"prompt": "hi", "structured_outputs": {"json": SCHEMA}}, "structured_outputs"),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_object"}}}, "text.format"),
    (
        "/v1/responses",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA}}},
        "text.format",
    ),
]


@pytest.fixture(scope="module")
def served() -> Any:
    """One server without the plugin (blocked as ``-p no:constraints`` blocks it) and one with it."""
    with served_with_and_without("constraints", ["tool-parsers", "responses", "constraints"], plugin) as servers:
        yield servers


async def _post(base: str, path: str, body: dict[str, Any], stream: bool) -> httpx.Response:
    limit = "max_output_tokens" if path == "/v1/responses" else "max_tokens"
    return await post_read(base, path, {"model": "fake-model", limit: 20, **body}, stream=stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("path", "body", "param"), REFUSED, ids=lambda v: v if isinstance(v, str) else None)
async def test_without_the_plugin_a_constraint_is_a_400_naming_its_parameter(
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
    assert "constrained decoding" in error["message"] and "'constraints' plugin" in error["message"]
    assert len(fake.requests) == before  # nothing was generated
    assert fake.backend.loads == loads  # refused before a model was loaded
    on_base, _ = served["on"]
    served_on = await _post(on_base, path, body, stream)
    assert served_on.status_code == 200, served_on.text  # the same request, with the plugin


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"messages": USER}),
        (CHAT, {"messages": USER, "tools": [WEATHER]}),
        (CHAT, {"messages": USER, "tools": [WEATHER], "tool_choice": "none"}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
async def test_without_the_plugin_everything_else_is_served(served: Any, path: str, body: dict[str, Any]) -> None:
    base, _ = served["off"]
    for stream in (False, True):
        response = await _post(base, path, body, stream)
        assert response.status_code == 200, response.text


async def test_without_the_plugin_tool_schemas_are_not_checked_by_llguidance(served: Any) -> None:
    """A schema only llguidance refuses is a 400 with the plugin and served without it
    (under ``tool_choice: "auto"`` the schema only reaches the prompt)."""
    odd = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "banana"}}}}}  # fmt: skip
    body = {"messages": USER, "tools": [odd]}
    on_base, _ = served["on"]
    refused = await _post(on_base, CHAT, body, False)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_schema"
    off_base, _ = served["off"]
    assert (await _post(off_base, CHAT, body, False)).status_code == 200
