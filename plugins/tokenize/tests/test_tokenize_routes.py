"""The tokenize plugin: vLLM's ``/tokenize`` and ``/detokenize`` against the fake text
backend, counting prompts as the text routes read them (chat's template, tools and
variables, the same prompt bounds); on by default through its entry point, and
``-p no:tokenize`` removes both routes (an OpenAI-shaped 404) while chat is served."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from flexserv_core import create_plugin_manager
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CONTEXT = 512
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "what time is it?"}]


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin(context_length=CONTEXT, default_max_tokens=40)


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "tokenize"]


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    """Through the real entry point, as ``flexserv run`` selects plugins."""
    loaded = create_plugin_manager()
    assert loaded.infos["tokenize"].distribution == "flexserv-tokenize"
    assert "flexserv_register_routes" in loaded.infos["tokenize"].hooks
    blocked = create_plugin_manager(["no:tokenize"])
    assert "flexserv_register_routes" not in blocked.infos["tokenize"].hooks


@pytest.mark.parametrize(
    ("path", "payload"),
    [("/tokenize", {"model": "fake-model", "prompt": "hi"}), ("/detokenize", {"model": "fake-model", "tokens": [72]})],
)
async def test_without_the_plugin_its_routes_are_404_and_chat_is_served(path: str, payload: dict[str, Any]) -> None:
    chat = {"model": "fake-model", "messages": USER, "max_tokens": 2}
    async with app_client(make_app([FakeBackendPlugin(), "tokenize"], block=["tokenize"])) as client:
        gone = await client.post(path, json=payload)
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["type"] == "invalid_request_error"
        assert (await client.post("/v1/chat/completions", json=chat)).status_code == 200
    async with app_client(make_app([FakeBackendPlugin(), "tokenize"])) as client:
        assert (await client.post(path, json=payload)).status_code == 200


async def test_tokenize_prompt_and_detokenize_round_trip(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/tokenize", json={"model": "fake-model", "prompt": "héllo", "return_token_strs": True}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {
        "count": 5,
        "max_model_len": CONTEXT,
        "tokens": [ord(c) for c in "héllo"],
        "token_strs": list("héllo"),
    }
    r = await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": body["tokens"]})
    assert r.status_code == 200 and r.json() == {"prompt": "héllo"}


async def test_tokenize_messages_counts_what_chat_sends(flexserv_client: Any, flexserv_openai: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    r = await flexserv_client.post("/tokenize", json={"model": "fake-model", "messages": messages})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_strs"] is None and body["max_model_len"] == CONTEXT
    chat = await flexserv_openai.chat.completions.create(model="fake-model", messages=messages, max_tokens=1)
    assert body["count"] == chat.usage.prompt_tokens == len(body["tokens"])
    r = await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": body["tokens"]})
    assert r.json()["prompt"].endswith("user: Hello there\nassistant: ")


@pytest.mark.parametrize(
    ("path", "payload", "param"),
    [
        ("/tokenize", {"model": "fake-model"}, "prompt"),
        ("/tokenize", {"model": "fake-model", "prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt"),
        ("/tokenize", {"model": "fake-model", "prompt": 5}, "prompt"),
        (
            "/tokenize",
            {"model": "fake-model", "messages": [{"role": "user", "content": "b"}], "add_special_tokens": True},
            "add_special_tokens",
        ),
        (
            "/tokenize",
            {"model": "fake-model", "messages": [{"role": "user", "content": "b"}], "add_generation_prompt": False},
            "add_generation_prompt",
        ),
        ("/tokenize", {"model": "fake-model", "messages": []}, "messages"),
        ("/detokenize", {"model": "fake-model", "tokens": [72, -1]}, "tokens[1]"),
        ("/detokenize", {"model": "fake-model", "tokens": [72, 0x110000]}, "tokens[1]"),
        ("/detokenize", {"model": "fake-model", "tokens": "72"}, "tokens"),
        ("/detokenize", {"model": "fake-model"}, "tokens"),
    ],
)
async def test_bad_tokenize_requests_are_400_naming_the_param(
    flexserv_client: Any, path: str, payload: dict[str, Any], param: str
) -> None:
    r = await flexserv_client.post(path, json=payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"


async def test_tokenize_unknown_model_is_404(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/tokenize", json={"model": "nope", "prompt": "a"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


async def test_tokenize_counts_what_chat_renders_with_tools_and_template_variables() -> None:
    fake = FakeBackendPlugin(eos_after=0)
    app = make_app([fake, "template-kwargs", "responses", "tool-parsers", "tokenize"])
    async with app_client(app) as client:
        extra = {"tools": [CLOCK], "chat_template_kwargs": {"persona": "terse"}}
        chat = await client.post("/v1/chat/completions", json={"model": "fake-model", "messages": USER, **extra})
        counted = await client.post("/tokenize", json={"model": "fake-model", "messages": USER, **extra})
        assert counted.status_code == 200, counted.text
        assert counted.json()["count"] == chat.json()["usage"]["prompt_tokens"]
        plain = await client.post("/tokenize", json={"model": "fake-model", "messages": USER})
        assert plain.json()["count"] < counted.json()["count"]  # tools and variables were counted
        assert "persona=terse" in fake.last_prompt


@pytest.mark.parametrize("field", ["prompt", "messages"])
async def test_tokenize_has_the_prompt_bounds_of_the_generating_routes(field: str) -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake, "responses", "tokenize"], settings={"max_prompt_chars": 1000})
    async with app_client(app) as client:
        text = "x" * 5000
        value: Any = text if field == "prompt" else [{"role": "user", "content": text}]
        response = await client.post("/tokenize", json={"model": "fake-model", field: value})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "prompt_too_long"


async def test_detokenize_decodes_off_the_event_loop(
    flexserv_client: Any, fake: FakeBackendPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's worth of ids (millions) takes seconds to decode: every other request
    would wait that long if it ran on the event loop."""
    assert (await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": [72]})).status_code == 200
    model = fake.backend.models[0]
    decode, threads = model.decode, []

    def recorded(ids: list[int]) -> str:
        threads.append(threading.get_ident())
        return decode(ids)

    monkeypatch.setattr(model, "decode", recorded)
    r = await flexserv_client.post("/detokenize", json={"model": "fake-model", "tokens": [72, 105]})
    assert r.json() == {"prompt": "Hi"}
    assert threads and threading.get_ident() not in threads
