"""The Responses API is a plugin: on by default through its entry point, and
``-p no:responses`` removes its routes (404) while everything else is served."""

from __future__ import annotations

import pytest

from flexserv_core import create_plugin_manager
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    """Through the real entry point, as ``flexserv run`` selects plugins."""
    loaded = create_plugin_manager()
    assert loaded.infos["responses"].distribution == "flexserv-responses"
    assert "flexserv_register_routes" in loaded.infos["responses"].hooks
    blocked = create_plugin_manager(["no:responses"])
    assert "flexserv_register_routes" not in blocked.infos["responses"].hooks


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/responses"), ("GET", "/v1/responses/resp_1"), ("GET", "/v1/responses/resp_1/input_items")],
)
async def test_without_the_plugin_its_routes_are_404_and_the_rest_is_served(method: str, path: str) -> None:
    async with app_client(make_app([FakeBackendPlugin()], block=["responses"])) as client:
        gone = await client.request(
            method, path, json={"model": "fake-model", "input": "hi"} if method == "POST" else None
        )
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["type"] == "invalid_request_error"
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2})).status_code == 200
        assert (await client.get("/v1/models")).status_code == 200


async def test_with_the_plugin_the_route_serves() -> None:
    async with app_client(make_app([FakeBackendPlugin(eos_after=3), "responses"])) as client:
        created = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
        assert created.status_code == 200, created.text
        stored = await client.get(f"/v1/responses/{created.json()['id']}")
        assert stored.status_code == 200 and stored.json()["id"] == created.json()["id"]


async def test_without_the_state_plugin_stored_responses_are_a_clear_503_and_the_rest_is_served() -> None:
    """``-p no:state``: the server starts; what needs the store says so, before any generation."""
    async with app_client(make_app([FakeBackendPlugin(eos_after=3), "responses"], block=["state"])) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        unstored = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi", "store": False})
        assert unstored.status_code == 200, unstored.text
        for answer in (
            await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"}),
            await client.get("/v1/responses/resp_1"),
            await client.delete("/v1/responses/resp_1"),
        ):
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "state_unavailable" and "the 'state' plugin" in error["message"], error
