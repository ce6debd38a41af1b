"""The registry lets go of models: memory is freed after unload (shown with a weak
reference), an unload during a load nobody waits for is honoured, and the TTL
never evicts a model that is serving.

Each test here fails under a one-line change of ``registry.py`` that the older
lifecycle tests let through (a model kept referenced after unload, the
pending-unload branch disabled, a TTL that ignores ``active``).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from typing import Any

import pytest

from flexserv_core.backends.base import Backend, LoadedModel, ProgressCallback, TextGenerationModel
from flexserv_core.errors import ModelLoadError
from flexserv_core.events import ModelEvent
from flexserv_core.models.catalog import ModelCatalog
from flexserv_core.models.registry import ModelRegistry, ModelState
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.settings import CoreSettings
from flexserv_core.testing.fakes import FakeTextModel

SPEC = ModelSpec(name="m", kind=ModelKind.TEXT, source="m", backend="gated")


class GatedBackend(Backend):
    """Loads a :class:`FakeTextModel` and keeps no reference to it; a load waits
    for ``gate`` (a threading event) so a test can act while it is in progress."""

    name = "gated"
    kind = ModelKind.TEXT

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.loading = threading.Event()
        self.refs: list[weakref.ref[FakeTextModel]] = []
        self.unloads = 0

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        self.loading.set()
        assert self.gate.wait(10), "the test never opened the gate"
        model = FakeTextModel(spec)
        self.refs.append(weakref.ref(model))
        backend = self

        def unload() -> None:
            backend.unloads += 1

        model.unload = unload  # type: ignore[method-assign]
        return model


def make_registry(backend: Backend, *, model_timeout: float = 0.0) -> tuple[ModelRegistry, list[ModelEvent]]:
    events: list[ModelEvent] = []
    catalog = ModelCatalog.from_settings(
        CoreSettings(), [SPEC], lambda model_id, kind: None, configured=[], kinds=[ModelKind.TEXT]
    )
    registry = ModelRegistry(catalog, [backend], model_timeout=model_timeout, on_event=events.append)
    return registry, events


async def settle(registry: ModelRegistry) -> None:
    """Wait for the registry's background frees (they run in worker threads)."""
    for _ in range(200):
        pending = list(registry._background)
        if not pending:
            return
        await asyncio.gather(*pending, return_exceptions=True)
    raise AssertionError("background tasks never settled")


def collected(ref: weakref.ref[Any]) -> bool:
    gc.collect()
    return ref() is None


async def hold_model(registry: ModelRegistry) -> tuple[asyncio.Task[None], asyncio.Event]:
    """A request that holds the model until the returned event is set."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with registry.acquire("m", TextGenerationModel):
            holding.set()
            await release.wait()

    task = asyncio.create_task(hold())
    await holding.wait()
    return task, release


async def use_once(registry: ModelRegistry) -> None:
    async with registry.acquire("m", TextGenerationModel) as lease:
        assert isinstance(lease.model, FakeTextModel)


async def test_unloaded_model_is_garbage_collected() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend)
    await use_once(registry)
    ref = backend.refs[0]
    assert not collected(ref), "the registry should hold a resident model"
    await registry.unload("m")
    await settle(registry)
    assert backend.unloads == 1
    assert collected(ref), f"model still referenced after unload: {gc.get_referrers(ref())}"
    assert registry.state_of("m") is ModelState.UNLOADED


async def test_the_model_is_gone_when_memory_is_freed(monkeypatch: Any) -> None:
    """``free_memory`` returns cached accelerator memory to the driver: it must run
    after the last reference to the model went, or the weights stay cached (the
    finished load task's result held the model until the free had run)."""
    import flexserv_core.models.registry as registry_module

    backend = GatedBackend()
    registry, _ = make_registry(backend)
    seen: list[bool] = []

    def free_memory() -> None:
        gc.collect()  # as the real one does before emptying the accelerator's cache
        seen.append(backend.refs[-1]() is None)

    monkeypatch.setattr(registry_module, "free_memory", free_memory)
    await use_once(registry)
    await registry.unload("m")
    await settle(registry)
    task, release = await hold_model(registry)
    await registry.unload("m")
    release.set()
    await task
    await settle(registry)
    assert backend.unloads == 2 and seen == [True, True]


async def test_model_freed_after_unload_while_in_use_once_the_request_ends() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend)
    task, release = await hold_model(registry)
    await registry.unload("m")
    await settle(registry)
    ref = backend.refs[0]
    assert backend.unloads == 0 and not collected(ref), "freed under a running request"
    release.set()
    await task
    await settle(registry)
    assert backend.unloads == 1 and collected(ref)


async def test_unload_during_a_load_nobody_waits_for_frees_the_model() -> None:
    """A preload (``ensure_loaded`` holds no lease) unloaded mid-load: when the load
    ends the model must be freed at once, not left resident and unreachable."""
    backend = GatedBackend()
    backend.gate.clear()
    registry, _ = make_registry(backend)
    load = asyncio.create_task(registry.ensure_loaded(SPEC))
    assert await asyncio.to_thread(backend.loading.wait, 10)
    [result] = await registry.unload("m")
    assert result.pending and not result.had_active_requests
    backend.gate.set()
    await load
    await settle(registry)
    assert backend.unloads == 1, "the pending unload was not honoured"
    assert collected(backend.refs[0])
    assert registry.active_requests == 0 and registry.loaded() == []
    # and the next request loads a fresh copy
    await use_once(registry)
    assert len(backend.refs) == 2 and registry.state_of("m") is ModelState.READY


async def test_ttl_never_evicts_a_busy_model() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend, model_timeout=0.05)
    task, release = await hold_model(registry)
    registry._entries["m"].last_used = time.monotonic() - 60  # idle by the clock, but serving
    assert await registry.evict_idle() == []
    assert registry.state_of("m") is ModelState.READY
    release.set()
    await task
    # just used: not idle yet
    assert await registry.evict_idle() == []
    registry._entries["m"].last_used = time.monotonic() - 60
    [evicted] = await registry.evict_idle()
    assert evicted.model_id == "m" and evicted.was_loaded and not evicted.had_active_requests
    await settle(registry)
    assert backend.unloads == 1


async def test_ttl_keeps_a_recently_used_model() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend, model_timeout=30)
    await use_once(registry)
    assert await registry.evict_idle() == []
    assert registry.state_of("m") is ModelState.READY


async def test_ensure_loaded_reuses_a_resident_model() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend)
    await registry.ensure_loaded(SPEC)
    await registry.ensure_loaded(SPEC)
    await use_once(registry)
    assert len(backend.refs) == 1, "a resident model was loaded again"


async def test_ensure_loaded_replaces_a_model_whose_engine_died(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a request does: Ray's residency loads through ``ensure_loaded``, and a dead
    engine kept resident would be handed to every request after it."""
    backend = GatedBackend()
    registry, _ = make_registry(backend)
    await registry.ensure_loaded(SPEC)
    first = backend.refs[0]
    monkeypatch.setattr(FakeTextModel, "failure", property(lambda self: "engine died" if self is first() else None))
    await registry.ensure_loaded(SPEC)
    assert len(backend.refs) == 2, "a dead model was kept"
    assert registry.model_if_loaded("m") is backend.refs[1]()
    await settle(registry)


def assert_no_records(registry: ModelRegistry) -> None:
    """The registry's own bookkeeping holds nothing of a model that is gone: no
    entry by name, no detached entry waiting for its requests, no background task."""
    assert registry._entries == {}, registry._entries
    assert registry._detached == set(), registry._detached
    assert not registry._background


class FailingGatedBackend(GatedBackend):
    """A :class:`GatedBackend` whose load fails once the gate opens."""

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        self.loading.set()
        assert self.gate.wait(10), "the test never opened the gate"
        raise RuntimeError("weights missing")


async def test_unload_leaves_no_record_of_the_model() -> None:
    backend = GatedBackend()
    registry, _ = make_registry(backend)
    await use_once(registry)
    await registry.unload("m")
    await settle(registry)
    assert_no_records(registry)
    task, release = await hold_model(registry)  # unloaded while serving: detached, then freed
    await registry.unload("m")
    assert registry._detached, "an entry serving requests waits, detached, for them to end"
    release.set()
    await task
    await settle(registry)
    assert_no_records(registry)


async def test_a_load_that_fails_after_its_unload_was_asked_leaves_no_record() -> None:
    backend = FailingGatedBackend()
    backend.gate.clear()
    registry, _ = make_registry(backend)
    load = asyncio.create_task(registry.ensure_loaded(SPEC))
    assert await asyncio.to_thread(backend.loading.wait, 10)
    [result] = await registry.unload("m")
    assert result.pending and registry._detached
    backend.gate.set()
    with pytest.raises(ModelLoadError):
        await load
    await settle(registry)
    assert_no_records(registry)
