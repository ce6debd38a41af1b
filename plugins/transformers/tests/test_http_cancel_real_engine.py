"""Client disconnects over a real socket reach the paged engine: a running stream
that is closed stops generating, and a stream closed while it is still queued
never runs. The tiny model is served without an end-of-sequence id, so a
cancellation that does not arrive shows as hundreds of extra tokens."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow  # serves a tiny random Llama

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "temperature": 0}


async def until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_disconnects_cancel_running_and_queued_sequences(tmp_path: Path) -> None:
    from flexserv_transformers.testing import build_tiny_llama

    tiny_dir = build_tiny_llama(tmp_path / "tiny", max_position_embeddings=1024)
    settings = {
        "cache_dir": str(tmp_path),
        "model": [f"tiny={tiny_dir}"],
        "dtype": "float32",
        "transformers_engine": "paged",
        "transformers_max_batch_size": 1,
        "transformers_kv_block_size": 4,
    }
    app = make_app(["transformers"], settings=settings)
    with ServedApp(app) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            assert (await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1})).status_code == 200
            model = app.state.flexserv.registry.model_if_loaded("tiny")
            engine = model.engine
            engine.eos_token_ids = frozenset()  # it would otherwise keep generating
            before = engine.stats()["tokens_generated"]
            body = {**CHAT, "max_tokens": 800, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as running:
                lines = running.aiter_lines()
                seen = 0
                while seen < 3:
                    if (await anext(lines)).startswith("data: {"):
                        seen += 1
                # the second waits for a batch slot before its response starts (so that a full
                # queue can still be a 429); its client goes away meanwhile
                queued = asyncio.ensure_future(client.post("/v1/chat/completions", json=body))
                await until(lambda: engine.stats()["waiting_sequences"] == 1)
                queued.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await queued
                await until(lambda: engine.stats()["waiting_sequences"] == 0)
            await until(lambda: engine.stats()["active_requests"] == 0)
            generated = engine.stats()["tokens_generated"] - before
            assert generated < 400, f"{generated} tokens: a closed stream kept generating"
            assert engine.block_manager.used == 0
            assert app.state.flexserv.registry.active_requests == 0
            again = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5})
            assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 5
