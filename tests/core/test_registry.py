"""Model registry lifecycle: one load, unload during load/use, TTL, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flexserv_core.backends.base import (
    LoadedModel,
    ProgressCallback,
    TextGenerationModel,
)
from flexserv_core.errors import InvalidRequest, ModelLoadError, ModelNotFound
from flexserv_core.events import ModelEvent, ModelEventType
from flexserv_core.hookspecs import hookimpl
from flexserv_core.models.registry import ModelState
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin, FakeTextBackend, FakeTextModel
from flexserv_core.testing.waiting import wait_until_async


class EventRecorder:
    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    @hookimpl
    def flexserv_model_event(self, event: ModelEvent) -> None:
        self.events.append(event)

    def types(self) -> list[tuple[str, str | None]]:
        return [(e.type.value, e.reason.value if e.reason else None) for e in self.events]


async def _hold(server: Any, release: asyncio.Event, started: asyncio.Event | None = None) -> Any:
    async with server.registry.acquire("fake-model", TextGenerationModel) as lease:
        if started:
            started.set()
        await release.wait()
        return lease.model


async def test_concurrent_first_requests_share_one_load() -> None:
    fake = FakeBackendPlugin(load_delay=0.3)
    app = make_app([fake])
    async with app_client(app):
        server = app.state.flexserv
        release = asyncio.Event()
        release.set()
        models = await asyncio.gather(*(_hold(server, release) for _ in range(8)))
        assert fake.backend.loads == 1
        assert all(m is models[0] for m in models)
        assert server.registry.state_of("fake-model") is ModelState.READY


async def test_unload_during_load_is_honoured_when_the_load_ends() -> None:
    fake, events = FakeBackendPlugin(load_delay=0.5), EventRecorder()
    app = make_app([fake, events])
    async with app_client(app) as client:
        server = app.state.flexserv
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(server, release))
        await wait_until_async(lambda: server.registry.state_of("fake-model") is ModelState.LOADING)
        body = (await client.post("/v1/flexserv/models/unload", json={"model_id": "fake-model"})).json()
        assert body["unloaded"] == [
            {"model_id": "fake-model", "was_loaded": False, "had_active_requests": True, "pending": True}
        ]
        assert any("still loading" in w for w in body["warnings"])
        release.set()
        model = await holder  # the request that triggered the load is still served
        await wait_until_async(
            lambda: model.unloaded, message="the model stayed resident after an unload during its load"
        )
        assert (await client.get("/v1/flexserv/models/loaded")).json() == {"models": []}
        assert ("unloaded", "manual") in events.types()


async def test_unload_while_in_use_lets_the_request_finish_then_reloads() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake])
    async with app_client(app) as client:
        server = app.state.flexserv
        release, started = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_hold(server, release, started))
        await started.wait()
        body = (await client.post("/v1/flexserv/models/unload", json={})).json()
        assert body["unloaded"][0]["had_active_requests"] is True
        assert body["unloaded"][0]["was_loaded"] is True
        assert body["active_requests_at_eviction"] == 1
        assert body["warnings"]
        first = fake.backend.models[0]
        assert not first.unloaded, "freed while a request still held it"
        release.set()
        assert await holder is first
        await wait_until_async(lambda: first.unloaded, message="freed once the request released it")
        release2 = asyncio.Event()
        release2.set()
        second = await _hold(server, release2)
        assert second is not first and fake.backend.loads == 2


async def test_ttl_evicts_idle_model() -> None:
    fake, events = FakeBackendPlugin(), EventRecorder()
    app = make_app([fake, events], settings={"model_timeout": 0.2})
    async with app_client(app) as client:
        server = app.state.flexserv
        release = asyncio.Event()
        release.set()
        await _hold(server, release)
        assert (await client.get("/v1/flexserv/models/loaded")).json()["models"]
        await wait_until_async(lambda: fake.backend.models[0].unloaded, message="the TTL evicted the idle model")
        assert ("evicted", "ttl") in events.types()


async def test_model_timeout_zero_pins() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake], settings={"model_timeout": 0})
    async with app_client(app):
        server = app.state.flexserv
        release = asyncio.Event()
        release.set()
        await _hold(server, release)
        assert await server.registry.evict_idle() == []


async def test_failed_load_reports_and_retries() -> None:
    fake, events = FakeBackendPlugin(fail="weights are corrupt"), EventRecorder()
    app = make_app([fake, events])
    async with app_client(app):
        server = app.state.flexserv
        with pytest.raises(ModelLoadError, match="weights are corrupt"):
            async with server.registry.acquire("fake-model", TextGenerationModel):
                pass
        assert server.registry.state_of("fake-model") is ModelState.UNLOADED
        assert [e.type for e in events.events] == [ModelEventType.LOADING, ModelEventType.FAILED]
        fake.backend.fail = None
        async with server.registry.acquire("fake-model", TextGenerationModel) as lease:
            assert lease.model is fake.backend.models[0]


async def test_unknown_model_and_paths_are_not_found(tmp_path) -> None:
    app = make_app([FakeBackendPlugin()], settings={"allow_hub_models": True})
    async with app_client(app):
        server = app.state.flexserv
        for name in ["gpt-4", str(tmp_path), "../etc/passwd", "./models/x", "a/../b", "/etc/passwd"]:
            with pytest.raises(ModelNotFound):
                server.catalog.resolve(name, ModelKind.TEXT)
        spec = server.catalog.resolve("HuggingFaceTB/SmolLM2-135M-Instruct", ModelKind.TEXT)
        assert spec.origin == "hub"


async def test_shutdown_unloads_everything() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake])
    async with app_client(app):
        release = asyncio.Event()
        release.set()
        await _hold(app.state.flexserv, release)
    assert fake.backend.models[0].unloaded


class EmbeddingKindModel(LoadedModel):
    """A model class of the embedding kind (the ``embeddings`` plugin's ``EmbeddingModel`` is one)."""

    kind = ModelKind.EMBEDDING


async def test_acquire_is_typed_by_the_model_class() -> None:
    app = make_app([FakeBackendPlugin()])
    async with app_client(app):
        registry = app.state.flexserv.registry
        async with registry.acquire("fake-model", TextGenerationModel) as lease:
            assert isinstance(lease.model, FakeTextModel) and lease.spec.name == "fake-model"
        with pytest.raises(InvalidRequest) as info:
            async with registry.acquire("fake-model", EmbeddingKindModel):
                pass
        assert info.value.code == "model_kind_mismatch" and info.value.param == "model"


class NotATextModel(LoadedModel):
    kind = ModelKind.TEXT

    def unload(self) -> None:
        pass


class WrongClassBackend(FakeTextBackend):
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        return NotATextModel(spec)


async def test_a_backend_returning_the_wrong_class_is_a_load_error() -> None:
    plugin = FakeBackendPlugin()
    plugin.backend = WrongClassBackend()
    app = make_app([plugin])
    async with app_client(app) as client:
        with pytest.raises(ModelLoadError, match="NotATextModel, which is not a TextGenerationModel"):
            async with app.state.flexserv.registry.acquire("fake-model", TextGenerationModel):
                pass
        r = await client.post("/v1/completions", json={"prompt": "hi"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_load_failed"
