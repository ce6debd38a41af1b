"""Rerank and classify models expire after ``--model-timeout`` and are evicted by the
OOM monitor like the core's kinds, and the next request loads them again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flexserv_resources.testing import FakeProbe, FakeProbePlugin

from flexserv_core import ModelEvent, ModelEventType, ModelState, hookimpl
from flexserv_core.testing import app_client, make_app

pytestmark = pytest.mark.slow

RERANK = ("/v1/rerank", {"model": "ce", "query": "capital of france", "documents": ["paris is the capital", "fruit"]})
CLASSIFY = ("/v1/classify", {"model": "cl", "input": ["it is sunny and warm", "the lazy dog"]})


class EventRecorder:
    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    @hookimpl
    def flexserv_model_event(self, event: ModelEvent, server: Any) -> None:
        self.events.append(event)

    def evicted(self) -> list[tuple[str, str, str | None]]:
        return [(e.model_id, e.kind, e.reason) for e in self.events if e.type is ModelEventType.EVICTED]

    def loads(self, model_id: str) -> int:
        return sum(1 for e in self.events if e.type is ModelEventType.LOADED and e.model_id == model_id)


async def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the state"
        await asyncio.sleep(0.02)


def models(tiny_models: dict[str, Path]) -> list[str]:
    return [f"rerank:ce={tiny_models['ce']}", f"classify:cl={tiny_models['cl']}"]


async def post_both(client: Any) -> list[Any]:
    """The scores and labels of one rerank and one classify request (ids and times differ per request)."""
    answers = []
    for path, body in (RERANK, CLASSIFY):
        r = await client.post(path, json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        answers.append((answer.get("results") or answer["data"], answer["usage"]))
    return answers


def unloaded(app: Any, *names: str) -> Callable[[], bool]:
    """Freed, not only listed as gone: the registry has finalised the model."""
    registry = app.state.flexserv.registry
    return lambda: all(registry.state_of(n) is ModelState.UNLOADED for n in names)


async def loaded_ids(client: Any) -> set[str]:
    return {m["model_id"] for m in (await client.get("/v1/flexserv/models/loaded")).json()["models"]}


async def test_rerank_and_classify_models_expire_after_the_model_timeout(tiny_models: dict[str, Path]) -> None:
    recorder = EventRecorder()
    app = make_app(["classification", recorder], settings={"model": models(tiny_models), "model_timeout": 0.5})
    async with app_client(app) as client:
        first = await post_both(client)
        assert await loaded_ids(client) == {"ce", "cl"}
        await wait_until(unloaded(app, "ce", "cl"))
        assert sorted(recorder.evicted()) == [("ce", "rerank", "ttl"), ("cl", "classify", "ttl")]
        assert await loaded_ids(client) == set()

        again = await post_both(client)
        assert again == first, "reloaded from the same checkpoint: the same answers"
        assert (recorder.loads("ce"), recorder.loads("cl")) == (2, 2)
        assert await loaded_ids(client) == {"ce", "cl"}


async def test_a_model_in_use_does_not_expire(tiny_models: dict[str, Path]) -> None:
    """Requests keep refreshing the model's last use: only idle time counts."""
    recorder = EventRecorder()
    app = make_app(["classification", recorder], settings={"model": models(tiny_models)[:1], "model_timeout": 1.0})
    async with app_client(app) as client:
        started = time.monotonic()
        while time.monotonic() - started < 2.0:  # twice the timeout, one request every ~0.2 s
            r = await client.post(RERANK[0], json=RERANK[1])
            assert r.status_code == 200
            await asyncio.sleep(0.2)
        assert recorder.evicted() == [] and recorder.loads("ce") == 1
        await wait_until(unloaded(app, "ce"))
        assert recorder.evicted() == [("ce", "rerank", "ttl")]


async def test_the_oom_monitor_evicts_them_least_recently_used_first_and_they_reload(
    tiny_models: dict[str, Path],
) -> None:
    probe, recorder = FakeProbe(ram_percent=50), EventRecorder()
    app = make_app(
        ["classification", FakeProbePlugin(probe), recorder, "oom-monitor"],
        settings={
            "model": models(tiny_models),
            "oom_monitor": True,
            "oom_monitor_check_interval": 0.05,
            "oom_monitor_ram_threshold": 90,
            "oom_monitor_settle_seconds": 0,
        },
    )
    async with app_client(app) as client:
        first = await post_both(client)  # ce used first, so it is the least recently used
        assert await loaded_ids(client) == {"ce", "cl"}
        probe.ram_percent = 95.0  # stays high: the monitor evicts one model, re-reads, evicts the next
        await wait_until(unloaded(app, "ce", "cl"))
        assert recorder.evicted() == [("ce", "rerank", "oom"), ("cl", "classify", "oom")]
        details = [e.detail or "" for e in recorder.events if e.type is ModelEventType.EVICTED]
        assert all("RAM use 95.0% >= threshold 90%" in d for d in details), details

        probe.ram_percent = 50.0
        again = await post_both(client)
        assert again == first
        assert (recorder.loads("ce"), recorder.loads("cl")) == (2, 2)
        assert await loaded_ids(client) == {"ce", "cl"}
