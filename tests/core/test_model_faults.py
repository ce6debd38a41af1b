"""Models that fail: a load that raises or hangs past ``load_timeout``, a backend
that raises mid-stream, and a resident model whose engine died (health must not
say ok while it cannot serve; the next request replaces it)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from flexserv_core.backends.base import Backend, LoadedModel, ProgressCallback
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin, FakeTextModel
from flexserv_core.testing.waiting import wait_until_async

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class BreakableModel(FakeTextModel):
    """A fake whose ``failure`` a test sets, as an engine that died would."""

    broken: str | None = None

    @property
    def failure(self) -> str | None:
        return self.broken


class HangingBackend(Backend):
    """The first load blocks until ``release`` (a hung download or conversion); later loads are instant."""

    name = "hanging"
    kind = ModelKind.TEXT

    def __init__(self) -> None:
        self.release = threading.Event()
        self.models: list[BreakableModel] = []
        self.unloaded: list[BreakableModel] = []

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        if not self.models:
            self.release.wait(30)
        model = BreakableModel(spec)
        backend = self

        def unload() -> None:
            backend.unloaded.append(model)

        model.unload = unload  # type: ignore[method-assign]
        self.models.append(model)
        return model


class HangingPlugin:
    def __init__(self) -> None:
        self.backend = HangingBackend()

    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.backend]

    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [ModelSpec(name="fake-model", kind=ModelKind.TEXT, source="fake", backend="hanging")]


def _hookimpls(plugin: Any) -> Any:
    from flexserv_core.hookspecs import hookimpl

    for name in ("flexserv_register_backends", "flexserv_default_models"):
        setattr(type(plugin), name, hookimpl(getattr(type(plugin), name)))
    return plugin


async def test_a_hung_load_fails_after_load_timeout_and_a_late_model_is_unloaded() -> None:
    plugin = _hookimpls(HangingPlugin())
    app = make_app([plugin], settings={"load_timeout": 0.3})
    async with app_client(app) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "model_load_timeout" and "load_timeout (0.3 s)" in error["message"]
        registry = app.state.flexserv.registry
        assert registry.state_of("fake-model").value == "unloaded" and registry.active_requests == 0
        # the hung load finishes late: its model is freed, never served
        plugin.backend.release.set()
        await wait_until_async(lambda: plugin.backend.unloaded, message="the late model was freed")
        assert plugin.backend.unloaded == plugin.backend.models[:1]
        # and the next request loads again and is served
        ok = await client.post("/v1/chat/completions", json=CHAT)
        assert ok.status_code == 200 and len(plugin.backend.models) == 2


async def test_a_failing_load_is_a_503_and_the_next_request_retries() -> None:
    fake = FakeBackendPlugin(fail="weights are corrupt")
    app = make_app([fake])
    async with app_client(app) as client:
        for attempt in (1, 2):
            response = await client.post("/v1/chat/completions", json=CHAT)
            assert response.status_code == 503
            assert "weights are corrupt" in response.json()["error"]["message"]
            assert fake.backend.loads == attempt
        assert (await client.get("/v1/flexserv/health")).status_code == 200  # nothing resident is broken


async def test_a_model_whose_engine_died_fails_health_until_a_request_replaces_it() -> None:
    plugin = _hookimpls(HangingPlugin())
    plugin.backend.models.append(BreakableModel(ModelSpec(name="x", kind=ModelKind.TEXT, source="x")))  # no hang
    app = make_app([plugin])
    async with app_client(app) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        first = plugin.backend.models[-1]
        assert (await client.get("/v1/flexserv/health")).status_code == 200
        first.broken = "the generation engine stopped"
        health = await client.get("/v1/flexserv/health")
        assert health.status_code == 503
        assert health.json()["status"] == "error" and "the generation engine stopped" in health.json()["error"]
        response = await client.post("/v1/chat/completions", json=CHAT)
        assert response.status_code == 200
        assert plugin.backend.models[-1] is not first, "the broken model kept serving"
        await wait_until_async(lambda: first in plugin.backend.unloaded, message="the broken model was freed")
        assert (await client.get("/v1/flexserv/health")).status_code == 200


async def test_a_backend_raising_mid_stream_ends_that_stream_and_serves_the_others() -> None:
    fake = FakeBackendPlugin(token_delay=0.005, fail_after=3)
    app = make_app([fake])
    async with app_client(app) as client:
        stream = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 10, "stream": True})
        plain = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2})
        streamed, other = await asyncio.gather(stream, plain)
        assert streamed.status_code == 200
        events = [b.removeprefix("data: ") for b in streamed.text.split("\n\n") if b.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["type"] == "server_error" and "fake backend failure" not in error["message"]  # no internals
        assert other.status_code == 200 and other.json()["choices"][0]["finish_reason"] == "length"
        assert app.state.flexserv.registry.active_requests == 0
