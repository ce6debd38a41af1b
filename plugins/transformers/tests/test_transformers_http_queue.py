"""The paged engine's queue bound over HTTP: 429 with Retry-After, then normal service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow  # serves a tiny random Llama

MESSAGES = [{"role": "user", "content": "hello there"}]


async def test_full_queue_answers_429_then_serves(tiny_dir: Path, tmp_path: Path) -> None:
    settings = {
        "cache_dir": str(tmp_path),
        "model": [f"tiny={tiny_dir}"],
        "dtype": "float32",
        "transformers_engine": "paged",
        "transformers_max_batch_size": 1,
        "transformers_max_queued_requests": 1,
    }
    with ServedApp(make_app(["transformers"], settings=settings)) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 40, "temperature": 1.0, "seed": 1}
            await client.post("/v1/chat/completions", json={**body, "max_tokens": 1})  # load the model first
            responses = await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for _ in range(6)))
            statuses = sorted(r.status_code for r in responses)
            assert statuses.count(200) >= 2, statuses
            rejected = [r for r in responses if r.status_code == 429]
            assert rejected, statuses
            assert set(statuses) <= {200, 429}, statuses
            for r in rejected:
                assert int(r.headers["retry-after"]) >= 1
                error = r.json()["error"]
                assert error["type"] == "rate_limit_error" and error["code"] == "too_many_requests"
        sdk = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)
        after = await sdk.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, temperature=0)
        assert after.choices[0].finish_reason in ("length", "stop")
        await sdk.close()
