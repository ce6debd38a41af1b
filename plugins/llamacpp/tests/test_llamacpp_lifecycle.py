"""Registry semantics of the llama.cpp backend on a real server: TTL expiry and
OOM-monitor eviction free llama.cpp's memory (RSS drops) and the next request loads
the model again; SIGTERM cuts a running stream with an error event and the
process exits within the shutdown timeout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from flexserv_resources.testing import FakeProbe, FakeProbePlugin

from flexserv_core import ModelEvent, ModelEventType, ModelState, hookimpl
from flexserv_core.testing import (
    ServedApp,
    flexserv_cmd,
    free_port,
    make_app,
    stop_process,
    wait_healthy,
    wait_until_async,
)

pytestmark = pytest.mark.slow

MODEL = "smol"
KV_TOKENS = 8192
KV_BYTES_PER_TOKEN = 23040  # SmolLM2-135M: 30 layers x 3 KV heads x (64 + 64) x 2 bytes (the default f16 cache)
NEVER_STOP = {"2": -100, "0": -100}  # SmolLM2's end-of-turn and end-of-text: banned
SETTINGS = {"llamacpp_context_length": 2048, "llamacpp_kv_cache_tokens": KV_TOKENS, "llamacpp_threads": 1}


class EventRecorder:
    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    @hookimpl
    def flexserv_model_event(self, event: ModelEvent, server: Any) -> None:
        self.events.append(event)

    def evicted(self) -> list[tuple[str, str | None]]:
        return [(e.model_id, e.reason) for e in self.events if e.type is ModelEventType.EVICTED]

    def loads(self) -> int:
        return sum(1 for e in self.events if e.type is ModelEventType.LOADED)


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def footprint(gguf: Path) -> int:
    """What a loaded model holds: the KV cache (cleared, so resident) and the mapped weights."""
    return KV_TOKENS * KV_BYTES_PER_TOKEN + os.path.getsize(gguf)


async def complete(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4}
    )
    assert r.status_code == 200, r.text


async def freed_after(app: Any, gguf: Path, url: str, evict: Any) -> int:
    """Load the model with one request, ``await evict(client)``, wait until the
    registry has freed it; returns the RSS that went away."""
    registry = app.state.flexserv.registry
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await complete(client)
        model = registry.model_if_loaded(MODEL)
        assert model is not None and model.runtime is not None
        loaded = rss()
        await evict(client)
        await wait_until_async(
            lambda: registry.state_of(MODEL) is ModelState.UNLOADED and model.runtime is None,
            30,
            message="the model was freed",
        )
        await asyncio.sleep(0.2)
        dropped = loaded - rss()
        assert dropped > 0.7 * footprint(gguf), (dropped, footprint(gguf))
        await complete(client)  # loaded again on demand
        assert registry.model_if_loaded(MODEL) is not None
    return dropped


async def test_an_idle_model_expires_after_the_model_timeout_and_its_memory_is_freed(smollm_gguf: Path) -> None:
    recorder = EventRecorder()
    app = make_app(
        ["llamacpp", recorder], settings={"model": [f"{MODEL}={smollm_gguf}"], "model_timeout": 1.0, **SETTINGS}
    )

    async def idle(client: httpx.AsyncClient) -> None:
        await asyncio.sleep(0)  # the registry's TTL loop evicts it

    with ServedApp(app) as url:
        await freed_after(app, smollm_gguf, url, idle)
    assert recorder.evicted()[0] == (MODEL, "ttl")
    assert recorder.loads() == 2


async def test_the_oom_monitor_evicts_the_model_and_frees_its_memory(smollm_gguf: Path) -> None:
    probe, recorder = FakeProbe(ram_percent=50), EventRecorder()
    app = make_app(
        ["llamacpp", FakeProbePlugin(probe), recorder, "oom-monitor"],
        settings={
            "model": [f"{MODEL}={smollm_gguf}"],
            "oom_monitor": True,
            "oom_monitor_check_interval": 0.05,
            "oom_monitor_ram_threshold": 90,
            "oom_monitor_settle_seconds": 0,
            **SETTINGS,
        },
    )

    async def memory_runs_out(client: httpx.AsyncClient) -> None:
        probe.ram_percent = 95.0
        await wait_until_async(lambda: recorder.evicted() != [], 15, message="the monitor evicted the model")
        probe.ram_percent = 50.0

    with ServedApp(app) as url:
        await freed_after(app, smollm_gguf, url, memory_runs_out)
    assert recorder.evicted() == [(MODEL, "oom")]
    details = [e.detail or "" for e in recorder.events if e.type is ModelEventType.EVICTED]
    assert "RAM use 95.0% >= threshold 90%" in details[0], details


async def test_an_oom_triggered_unload_is_an_oom_eviction_that_frees_memory(smollm_gguf: Path) -> None:
    recorder = EventRecorder()
    app = make_app(["llamacpp", recorder], settings={"model": [f"{MODEL}={smollm_gguf}"], **SETTINGS})

    async def unload(client: httpx.AsyncClient) -> None:
        r = await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL, "oom_triggered": True})
        assert r.status_code == 200 and r.json()["oom_triggered"] is True, r.text

    with ServedApp(app) as url:
        await freed_after(app, smollm_gguf, url, unload)
    assert recorder.evicted() == [(MODEL, "oom")]


SHUTDOWN_TIMEOUT = 2.0


def test_sigterm_cuts_a_running_stream_with_an_error_event_and_exits(smollm_gguf: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        flexserv_cmd(
            "run",
            "--port",
            str(port),
            "-p",
            "llamacpp",
            "--model",
            f"{MODEL}={smollm_gguf}",
            "--llamacpp-threads",
            "1",
            "--llamacpp-context-length",
            "2048",
            "--shutdown-timeout",
            str(SHUTDOWN_TIMEOUT),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=120)
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": 2000,
            "temperature": 0,
            "logit_bias": NEVER_STOP,
            "stream": True,
        }
        events: list[str] = []
        signalled = 0.0
        with (
            httpx.Client(base_url=url, timeout=120) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) == 5:
                        signalled = time.monotonic()
                        proc.send_signal(signal.SIGTERM)  # only the process this test started
        ended = time.monotonic() - signalled
        assert proc.wait(timeout=SHUTDOWN_TIMEOUT + 15) == 0
        exited = time.monotonic() - signalled
        print(f"stream ended {ended:.2f} s, process exited {exited:.2f} s after SIGTERM; {len(events)} events")
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "server_shutting_down" and error["type"] == "server_error", error
        assert all("error" not in json.loads(e) for e in events[:-2])
        assert len(events) < 1500, "the stream was not cut"
        # the stream is cut when the shutdown timeout runs out, and the process exits soon after
        assert SHUTDOWN_TIMEOUT - 0.5 < ended < SHUTDOWN_TIMEOUT + 5, ended
        assert exited < SHUTDOWN_TIMEOUT + 10, exited
    finally:
        if proc.poll() is None:
            stop_process(proc)
