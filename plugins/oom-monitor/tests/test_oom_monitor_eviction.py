"""Eviction decisions, driven by fake probe readings: one cycle at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from flexserv_oom_monitor import OomMonitor, OomMonitorSettings
from flexserv_oom_monitor.plugin import MONITOR_KEY
from flexserv_resources import probes_of
from flexserv_resources.testing import FakeProbe, FakeProbePlugin
from oom_helpers import EventRecorder, ProbePlugin, ResidentModelsProbe, live_models, model_plugins

from flexserv_core import SamplingParams, TextGenerationModel
from flexserv_core.testing import (
    FakeBackendPlugin,
    app_client,
    make_app,
    openai_client,
    wait_until_async,
)

NAMES = ["alpha", "beta", "gamma"]


class World:
    def __init__(self, client: Any, server: Any, plugins: list[Any], probe: Any, recorder: EventRecorder) -> None:
        self.client = client
        self.server = server
        self.backends = [p.backend for p in plugins]
        self.probe = probe
        self.recorder = recorder

    def monitor(self, **settings: Any) -> OomMonitor:
        s = OomMonitorSettings(oom_monitor=True, **{"oom_monitor_settle_seconds": 1.0, **settings})
        return OomMonitor(self.server.registry, probes_of(self.server), s)

    async def use(self, *names: str) -> None:
        """Load (if needed) and use each model in turn: the last one is the most recent."""
        for name in names:
            async with self.server.registry.acquire(name, TextGenerationModel):
                pass
            used = time.monotonic()
            # distinct last-use times even where the monotonic clock is coarse
            await wait_until_async(lambda used=used: time.monotonic() > used)

    def live(self) -> list[str]:
        return live_models(self.backends)


@pytest.fixture
def models() -> list[FakeBackendPlugin]:
    return model_plugins(NAMES, token_delay=0.02)


@pytest.fixture
def probe(models: list[FakeBackendPlugin]) -> ResidentModelsProbe:
    return ResidentModelsProbe([p.backend for p in models])


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def flexserv_plugins(
    models: list[FakeBackendPlugin], probe: ResidentModelsProbe, recorder: EventRecorder
) -> list[object | str]:
    return [*models, ProbePlugin(probe), recorder, "oom-monitor"]


@pytest.fixture
def world(
    flexserv_client: Any,
    flexserv_server: Any,
    models: list[FakeBackendPlugin],
    probe: ResidentModelsProbe,
    recorder: EventRecorder,
) -> World:
    return World(flexserv_client, flexserv_server, models, probe, recorder)


async def test_below_threshold_evicts_nothing(world: World) -> None:
    await world.use("alpha", "beta")  # 40 + 2 * 20 = 80 %
    monitor = world.monitor(oom_monitor_ram_threshold=85)
    assert await monitor.check_once() is None
    assert world.live() == ["alpha", "beta"]
    assert world.recorder.evicted() == []
    assert monitor.last_reading is not None and monitor.last_reading.ram_percent == 80.0


async def test_lru_first_until_below_threshold(world: World, caplog: pytest.LogCaptureFixture) -> None:
    await world.use("beta", "gamma", "alpha")  # LRU order: beta, gamma, alpha; RAM 100 %
    monitor = world.monitor(oom_monitor_ram_threshold=70)
    with caplog.at_level(logging.WARNING, logger="flexserv.oom_monitor"):
        eviction = await monitor.check_once()
    assert eviction is not None
    # 100 -> evict beta -> 80 -> evict gamma -> 60 < 70: alpha (most recent) stays
    assert eviction.models == ["beta", "gamma"]
    assert world.live() == ["alpha"]
    assert [m.model_id for m in world.server.registry.loaded()] == ["alpha"]
    assert eviction.resource == "ram" and eviction.threshold == 70 and eviction.reading.ram_percent == 100.0
    assert eviction.after is not None and eviction.after.ram_percent == 60.0
    assert eviction.active_requests == {"beta": 0, "gamma": 0}
    assert [(m, r) for m, r, _ in world.recorder.evicted()] == [("beta", "oom"), ("gamma", "oom")]
    events = [e for e in world.recorder.events if e.type == "evicted"]
    # each event carries the reading that caused it: 100 % before beta, 80 % before gamma
    assert [e.detail and "RAM use 100.0% >= threshold 70%" in e.detail for e in events] == [True, False]
    assert events[1].detail is not None and "RAM use 80.0% >= threshold 70%" in events[1].detail
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "evicting model 'beta'" in w and "100.0%" in w and "threshold 70%" in w and "0 active" in w for w in warnings
    ), warnings
    assert any("evicting model 'gamma'" in w for w in warnings)
    # health shows it afterwards (through the plugin's hook reading the monitor it owns)
    world.server.state[MONITOR_KEY] = monitor
    health = (await world.client.get("/v1/flexserv/health")).json()["oom_monitor"]
    assert health["last_eviction"]["models"] == ["beta", "gamma"]
    assert health["last_eviction"]["reason"] == "RAM use 100.0% >= threshold 70%"
    assert health["evictions"] == 1


async def test_policy_all_evicts_every_model(world: World) -> None:
    await world.use("alpha", "beta", "gamma")
    eviction = await world.monitor(oom_monitor_ram_threshold=70, oom_monitor_eviction="all").check_once()
    assert eviction is not None and sorted(eviction.models) == NAMES and eviction.policy == "all"
    assert world.live() == []


async def test_idle_model_goes_before_busy_one(world: World) -> None:
    await world.use("alpha", "beta")  # alpha is least recently used ...
    registry = world.server.registry
    async with registry.acquire("alpha", TextGenerationModel):  # ... but busy now (acquire touches it)
        pass
    await world.use("beta")
    gate = asyncio.Event()

    held = asyncio.Event()

    async def hold_alpha() -> None:
        async with registry.acquire("alpha", TextGenerationModel):
            held.set()
            await gate.wait()

    holder = asyncio.ensure_future(hold_alpha())
    await held.wait()
    await world.use("beta")  # beta is now the most recent, alpha the LRU but busy
    eviction = await world.monitor(oom_monitor_ram_threshold=75).check_once()  # 80 -> one eviction enough
    assert eviction is not None and eviction.models == ["beta"], "the idle model is freed at once"
    gate.set()
    await holder
    assert world.live() == ["alpha"]


async def test_eviction_during_a_stream_lets_it_finish_and_next_request_reloads(world: World) -> None:
    registry = world.server.registry
    params = SamplingParams(max_tokens=30, temperature=0.0)
    got: list[str] = []
    started = asyncio.Event()

    async def stream() -> None:
        async with registry.acquire("alpha", TextGenerationModel) as lease:
            model = lease.model
            async for delta in model.generate(model.encode("hi"), params):
                got.append(delta.text)
                started.set()

    task = asyncio.ensure_future(stream())
    await started.wait()
    eviction = await world.monitor(oom_monitor_ram_threshold=50, oom_monitor_settle_seconds=0.1).check_once()
    assert eviction is not None and eviction.models == ["alpha"] and eviction.active_requests == {"alpha": 1}
    assert world.recorder.evicted() == [("alpha", "oom", 1)]
    assert not task.done(), "the stream is still running after the eviction"
    await task
    assert len(got) == 30, "the in-flight stream completed"
    # freed in the background once the stream released it
    await wait_until_async(lambda: world.live() == [], message="the evicted model was freed")
    loads_before = sum(b.loads for b in world.backends)
    await world.use("alpha")
    assert sum(b.loads for b in world.backends) == loads_before + 1, "the next request reloads the model"


async def test_vram_threshold_and_stuck_above_threshold_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    plugins = model_plugins(["solo"])
    probe = FakeProbe(ram_percent=10, vram_percent=95)
    app = make_app([*plugins, FakeProbePlugin(probe), "oom-monitor"])
    async with app_client(app):  # entered and exited in this test's task
        server = app.state.flexserv
        async with server.registry.acquire("solo", TextGenerationModel):
            pass
        settings = OomMonitorSettings(oom_monitor=True, oom_monitor_vram_threshold=90, oom_monitor_settle_seconds=0)
        monitor = OomMonitor(server.registry, probes_of(server), settings)
        with caplog.at_level(logging.WARNING, logger="flexserv.oom_monitor"):
            eviction = await monitor.check_once()
            assert eviction is not None and eviction.resource == "vram" and eviction.models == ["solo"]
            assert await monitor.check_once() is None  # nothing left to evict
            assert await monitor.check_once() is None
        stuck = [r for r in caplog.records if "no loaded model is left" in r.getMessage()]
        assert len(stuck) == 1, "the stuck state is logged once, not every cycle"
        probe.vram_percent = 50
        assert await monitor.check_once() is None
        probe.vram_percent = 95
        with caplog.at_level(logging.WARNING, logger="flexserv.oom_monitor"):
            await monitor.check_once()
        assert len([r for r in caplog.records if "no loaded model is left" in r.getMessage()]) == 2


async def test_eviction_during_an_http_stream_through_the_sdk() -> None:
    """A streaming chat completion in flight when the background monitor evicts its
    model gets every token; the next request loads the model again."""
    probe = FakeProbe(ram_percent=50)
    plugin = FakeBackendPlugin(token_delay=0.02)
    recorder = EventRecorder()
    app = make_app(
        [plugin, FakeProbePlugin(probe), recorder, "oom-monitor"],
        settings={
            "oom_monitor": True,
            "oom_monitor_check_interval": 0.05,
            "oom_monitor_ram_threshold": 90,
            "oom_monitor_settle_seconds": 0,
        },
    )
    async with app_client(app) as client:
        sdk = openai_client(client)

        async def raise_ram_mid_stream() -> None:
            # server-side: the ASGI test transport may buffer the response body
            await wait_until_async(lambda: plugin.backend.models and plugin.backend.models[0].tokens_emitted >= 5)
            probe.ram_percent = 95.0  # the monitor evicts within ~50 ms

        trigger = asyncio.ensure_future(raise_ram_mid_stream())
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=40, stream=True
        )
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.choices and chunk.choices[0].finish_reason:
                assert chunk.choices[0].finish_reason == "length"
        await trigger
        assert len(text) == 40, "the stream finished on the evicted model"
        assert recorder.evicted() == [("fake-model", "oom", 1)], "evicted while the stream held it"
        assert plugin.backend.models[0].unloaded
        probe.ram_percent = 50.0
        r = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "x"}], max_tokens=3
        )
        assert r.choices[0].message.content == "The"
        assert plugin.backend.loads == 2, "the next request reloaded the model"
