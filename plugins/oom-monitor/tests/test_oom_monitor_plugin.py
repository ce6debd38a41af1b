"""The plugin in a running app: flags, background task, health, start-up checks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from flexserv_oom_monitor.plugin import MONITOR_KEY
from flexserv_resources.testing import FakeProbe, FakeProbePlugin
from oom_helpers import EventRecorder

from flexserv_core import TextGenerationModel, UsageError
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app, wait_until_async


async def test_loaded_but_off_unless_flag_set() -> None:
    probe = FakeProbe(ram_percent=99)
    app = make_app([FakeBackendPlugin(), FakeProbePlugin(probe), "oom-monitor"])
    async with app_client(app) as client:
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 2})
        server = app.state.flexserv
        if r.status_code == 404:  # completions route not there yet: load through the registry
            async with server.registry.acquire("fake-model", TextGenerationModel):
                pass
        health = (await client.get("/v1/flexserv/health")).json()
        assert health["oom_monitor"] == {"enabled": False}
        assert MONITOR_KEY not in server.state, "no monitor was started: nothing can read"
        assert [m.model_id for m in server.registry.loaded()] == ["fake-model"]
        assert probe.reads == 0, "an idle monitor reads nothing"
    assert "oom-monitor" in app.state.flexserv.pm.infos


async def test_background_task_evicts_and_health_shows_it() -> None:
    probe = FakeProbe(ram_percent=50)
    recorder = EventRecorder()
    app = make_app(
        [FakeBackendPlugin(), FakeProbePlugin(probe), recorder, "oom-monitor"],
        settings={
            "oom_monitor": True,
            "oom_monitor_check_interval": 0.05,
            "oom_monitor_ram_threshold": 88,
            "oom_monitor_settle_seconds": 0,
        },
    )
    async with app_client(app) as client:
        server = app.state.flexserv
        async with server.registry.acquire("fake-model", TextGenerationModel):
            pass
        monitor = server.state[MONITOR_KEY]
        await wait_until_async(lambda: monitor.checks >= 2, message="two checks")
        assert [m.model_id for m in server.registry.loaded()] == ["fake-model"], "below threshold: kept"
        health = (await client.get("/v1/flexserv/health")).json()["oom_monitor"]
        assert health["enabled"] and health["running"] and health["checks"] >= 2 and health["last_eviction"] is None
        assert health["last_reading"]["ram_percent"] == 50.0
        probe.ram_percent = 91.5
        await wait_until_async(lambda: not server.registry.loaded(), message="the model was evicted")
        health = (await client.get("/v1/flexserv/health")).json()["oom_monitor"]
        last = health["last_eviction"]
        assert last["models"] == ["fake-model"] and last["resource"] == "ram" and last["threshold"] == 88.0
        assert last["reading"]["ram_percent"] == 91.5 and abs(last["time"] - time.time()) < 5
        assert recorder.evicted() == [("fake-model", "oom", 0)]


async def test_shutdown_is_prompt_with_a_long_interval() -> None:
    app = make_app([FakeProbePlugin(), "oom-monitor"], settings={"oom_monitor": True, "oom_monitor_check_interval": 30})
    async with app_client(app):
        monitor = app.state.flexserv.state[MONITOR_KEY]
        assert monitor.running
        await asyncio.sleep(0)  # one loop turn, not a wait: the monitor's task starts its 30 s wait
        started = time.perf_counter()
    assert time.perf_counter() - started < 1.0
    assert not monitor.running


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def test_start_fails_clearly_without_a_memory_probe() -> None:
    app = make_app(["oom-monitor"], settings={"oom_monitor": True})
    with pytest.raises(BaseException) as info:
        async with app_client(app):
            pass
    messages = [str(e) for e in _leaves(info.value)]
    assert any("flexserv-resources" in m and "-p no:resources" in m for m in messages), messages


async def test_with_the_real_resources_plugin_it_starts() -> None:
    app = make_app(["resources", "oom-monitor"], settings={"oom_monitor": True, "oom_monitor_check_interval": 30})
    async with app_client(app) as client:
        health = (await client.get("/v1/flexserv/health")).json()["oom_monitor"]
    assert health["enabled"] and 0 < health["last_reading"]["ram_percent"] < 100


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("oom_monitor_ram_threshold", 0),
        ("oom_monitor_ram_threshold", 101),
        ("oom_monitor_vram_threshold", -1),
        ("oom_monitor_check_interval", 0),
        ("oom_monitor_eviction", "random"),
    ],
)
def test_bad_settings_are_usage_errors(setting: str, value: Any) -> None:
    with pytest.raises(UsageError, match=setting):
        make_app(["oom-monitor"], settings={setting: value})


def test_plugin_lists_its_hooks() -> None:
    app = make_app(["oom-monitor"])
    info = app.state.flexserv.pm.infos["oom-monitor"]
    assert info.distribution == "flexserv-oom-monitor"
    assert info.hooks == ["flexserv_add_settings", "flexserv_health", "flexserv_shutdown", "flexserv_startup"]
