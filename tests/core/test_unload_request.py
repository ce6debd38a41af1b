"""``POST /v1/flexserv/models/unload`` reads only what it documents: a body that does not
name a model in ``model_id`` never unloads every model by accident."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.server import FlexServer
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

UNLOAD = "/v1/flexserv/models/unload"
BOTH = {"fake-model", "other-model"}


@asynccontextmanager
async def loaded() -> AsyncIterator[tuple[httpx.AsyncClient, FlexServer]]:
    """Two loaded models; ``small`` is an alias of ``fake-model``."""
    app = make_app(
        [FakeBackendPlugin(), FakeBackendPlugin("other-model", backend_name="fake2")],
        settings={"model_alias": ["small=fake-model"], "default_model": "fake-model"},
    )
    server: FlexServer = app.state.flexserv
    async with app_client(app) as client:
        for name in BOTH:
            async with server.registry.acquire(name, TextGenerationModel):
                pass
        yield client, server


def _resident(server: FlexServer) -> set[str]:
    return {m.model_id for m in server.registry.loaded()}


def _error(response: httpx.Response, status: int, code: str, param: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param), error
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [({"model": "fake-model"}, "model"), ({"modelid": "fake-model"}, "modelid"), ({"model_id": "*", "x": 1}, "x")],
)
async def test_an_unknown_field_is_refused_and_nothing_is_unloaded(body: dict[str, Any], param: str) -> None:
    async with loaded() as (client, server):
        error = _error(await client.post(UNLOAD, json=body), 400, "unexpected_field", param)
        assert "model_id" in error["message"]
        assert _resident(server) == BOTH


@pytest.mark.parametrize("value", [None, "", 3])
async def test_a_model_id_that_names_nothing_is_refused(value: object) -> None:
    async with loaded() as (client, server):
        _error(await client.post(UNLOAD, json={"model_id": value}), 400, "invalid_value", "model_id")
        assert _resident(server) == BOTH


async def test_an_unknown_model_is_not_found() -> None:
    async with loaded() as (client, server):
        error = _error(await client.post(UNLOAD, json={"model_id": "nope"}), 404, "model_not_found", "model_id")
        assert "'nope'" in error["message"]
        assert _resident(server) == BOTH


async def test_an_alias_unloads_the_model_it_names() -> None:
    async with loaded() as (client, server):
        r = await client.post(UNLOAD, json={"model_id": "small"})
        assert r.status_code == 200, r.text
        assert [(u["model_id"], u["was_loaded"]) for u in r.json()["unloaded"]] == [("fake-model", True)]
        assert _resident(server) == {"other-model"}


async def test_a_configured_model_that_is_not_loaded_is_reported_as_such() -> None:
    async with loaded() as (client, server):
        await client.post(UNLOAD, json={"model_id": "other-model"})
        r = await client.post(UNLOAD, json={"model_id": "other-model"})
        assert r.status_code == 200, r.text
        assert r.json()["unloaded"] == [
            {"model_id": "other-model", "was_loaded": False, "had_active_requests": False, "pending": False}
        ]
        assert _resident(server) == {"fake-model"}


@pytest.mark.parametrize(
    "send",
    [{"json": {}}, {"json": {"model_id": "*"}}, {"content": b""}, {"json": {"oom_triggered": False}}],
    ids=["empty-object", "star", "no-body", "flag-only"],
)
async def test_the_documented_forms_unload_every_model(send: dict[str, Any]) -> None:
    async with loaded() as (client, server):
        r = await client.post(UNLOAD, **send)
        assert r.status_code == 200, r.text
        assert sorted(u["model_id"] for u in r.json()["unloaded"]) == sorted(BOTH)
        assert _resident(server) == set()
