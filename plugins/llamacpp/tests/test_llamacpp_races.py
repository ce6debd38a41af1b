"""Unload raced against llama.cpp requests on a real server: in-flight requests
(streaming or not) finish whole on the model they hold, requests arriving meanwhile
load a fresh copy, no lease is left behind and the old copy is freed, never while a
thread a request started still reads it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexserv_core import ModelEvent, ModelEventType, ServiceUnavailable, hookimpl
from flexserv_core.testing import ServedApp, make_app, wait_until_async

pytestmark = pytest.mark.slow

MODEL = "smol"
NEVER_STOP = {"2": -100, "0": -100}  # SmolLM2's end-of-turn and end-of-text: banned
TOKENS = 24


class Loads:
    def __init__(self) -> None:
        self.count = 0

    @hookimpl
    def flexserv_model_event(self, event: ModelEvent, server: Any) -> None:
        self.count += event.type is ModelEventType.LOADED


def serve(gguf: Path, loads: Loads, **settings: Any) -> tuple[ServedApp, Any]:
    app = make_app(
        ["llamacpp", "constraints", loads],
        settings={
            "model": [f"{MODEL}={gguf}"],
            "llamacpp_context_length": 1024,
            "llamacpp_kv_cache_tokens": 4096,
            "llamacpp_threads": 1,  # see conftest.load
            **settings,
        },
    )
    return ServedApp(app), app


def body(stream: bool) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count to fifty."}],
        "max_tokens": TOKENS,
        "logit_bias": NEVER_STOP,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


async def chat(http: httpx.AsyncClient, stream: bool, started: asyncio.Event | None = None) -> int:
    """One chat request to its end; the completion tokens it was answered with."""
    if not stream:
        r = await http.post("/v1/chat/completions", json=body(False))
        assert r.status_code == 200, r.text
        return int(r.json()["usage"]["completion_tokens"])
    usage = 0
    async with http.stream("POST", "/v1/chat/completions", json=body(True)) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            assert '"error"' not in line, line
            if started is not None:
                started.set()
            if '"usage":{' in line:
                usage = int(line.split('"completion_tokens":')[1].split(",")[0])
    return usage


async def quiet(app: Any) -> None:
    registry = app.state.flexserv.registry
    await wait_until_async(lambda: registry.active_requests == 0, 30, message="every lease was released")


async def test_an_unload_lets_running_requests_finish_and_new_ones_load_a_fresh_copy(smollm_gguf: Path) -> None:
    loads = Loads()
    served, app = serve(smollm_gguf, loads)
    registry = app.state.flexserv.registry
    with served as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            await chat(http, stream=False)
            old = registry.model_if_loaded(MODEL)
            started = asyncio.Event()
            running = [asyncio.create_task(chat(http, stream=i % 2 == 0, started=started)) for i in range(4)]
            await asyncio.wait_for(started.wait(), 60)
            unload = http.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
            arriving = [chat(http, stream=i % 2 == 0) for i in range(4)]
            answer, *used = await asyncio.gather(unload, *arriving)
            assert answer.status_code == 200, answer.text
            assert used == [TOKENS] * 4
            assert await asyncio.gather(*running) == [TOKENS] * 4
            await quiet(app)
            await wait_until_async(lambda: old.runtime is None, 30, message="the unloaded copy was freed")
            assert registry.model_if_loaded(MODEL) is not old
            assert await chat(http, stream=True) == TOKENS
        assert loads.count == 2


async def test_a_stream_abandoned_while_its_first_constraint_compiles_keeps_the_model_until_the_compile_ends(
    smollm_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first constrained request builds the vocabulary's tokenizer in a worker
    thread from llama.cpp's tokenizer; a stream's client leaving meanwhile cancels the
    request, and an unload then freed llama.cpp under that thread: the process aborted.
    The compile is held at its start until the client has gone and the unload was
    asked for, so the race is the same on every machine."""
    loads = Loads()
    served, app = serve(smollm_gguf, loads)
    registry = app.state.flexserv.registry
    entered, gate = threading.Event(), threading.Event()
    compile_ = app.state.flexserv.constraints.compile

    def held(constraint: Any, vocabulary: Any) -> Any:
        entered.set()
        gate.wait(30)
        return compile_(constraint, vocabulary)

    monkeypatch.setattr(app.state.flexserv.constraints, "compile", held)
    constrained = {
        **body(True),
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    }
    with served as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            await chat(http, stream=False)
            old = registry.model_if_loaded(MODEL)
            leaving = asyncio.create_task(http.post("/v1/chat/completions", json=constrained))
            await asyncio.to_thread(entered.wait, 30)  # the compile thread has started, with the model held
            assert (await http.post("/v1/flexserv/models/unload", json={"model_id": MODEL})).status_code == 200
            leaving.cancel()  # the client goes away before the stream's headers
            await asyncio.gather(leaving, return_exceptions=True)
            await asyncio.sleep(0.2)  # let the server see the client go (and, unfixed, free the model)
            gate.set()  # the compile now reads the vocabulary from llama.cpp
            await quiet(app)
            await wait_until_async(lambda: old.runtime is None, 30, message="the unloaded copy was freed")
            assert await chat(http, stream=True) == TOKENS  # the process is alive and serves a fresh copy


def test_the_model_is_freed_only_after_a_vocabulary_call_under_way_ends(load_model: Any, smollm_gguf: Path) -> None:
    """A worker thread a cancelled request left behind may still be tokenizing when the
    model is unloaded (at shutdown, after the grace period, leases are not waited for):
    llama.cpp's model is freed after that call ends, never under it, and a call that
    starts afterwards is refused without reading freed memory."""
    model = load_model(smollm_gguf, llamacpp_kv_cache_tokens=1024, llamacpp_context_length=1024)
    runtime = model.runtime
    expected = runtime.tokenize("Hello there", add_special=False)
    real, order = runtime.llama, []
    entered, gate = threading.Event(), threading.Event()

    class Held:
        """llama.cpp's API, with tokenizing held at its start and the model's free recorded."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def llama_tokenize(self, *args: Any) -> int:
            entered.set()
            gate.wait(30)
            if "freed" in order:  # unfixed: the model is gone; reading it would crash the process
                order.append("read after free")
                return 0
            n = int(real.llama_tokenize(*args))
            order.append("tokenized")
            return n

        def llama_model_free(self, handle: Any) -> None:
            order.append("freed")
            real.llama_model_free(handle)

    runtime.llama = Held()
    tokens: list[list[int]] = []
    reader = threading.Thread(target=lambda: tokens.append(runtime.tokenize("Hello there", add_special=False)))
    reader.start()
    assert entered.wait(30)
    closer = threading.Thread(target=model.unload)
    closer.start()
    closer.join(1.0)  # unfixed, the model is freed by now
    gate.set()
    reader.join(30)
    closer.join(30)
    assert order == ["tokenized", "freed"]
    assert tokens == [expected]
    with pytest.raises(ServiceUnavailable):
        runtime.tokenize("again", add_special=False)
