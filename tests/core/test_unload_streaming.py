"""An unload that arrives during a streaming completion lets the stream finish."""

from __future__ import annotations

import asyncio

import httpx
import openai

from flexserv_core.testing.app import make_app
from flexserv_core.testing.fakes import FakeBackendPlugin
from flexserv_core.testing.process import ServedApp
from flexserv_core.testing.waiting import wait_until_async


async def test_unload_during_stream_reports_active_and_stream_completes() -> None:
    fake = FakeBackendPlugin(token_delay=0.02)
    with ServedApp(make_app([fake])) as base_url:
        client = httpx.AsyncClient(base_url=base_url, timeout=30)
        sdk = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", http_client=client, max_retries=0)
        first_token = asyncio.Event()

        async def stream() -> str:
            text = ""
            response = await sdk.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=30, stream=True
            )
            async for chunk in response:
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
                    first_token.set()
            return text

        task = asyncio.create_task(stream())
        await asyncio.wait_for(first_token.wait(), 10)
        body = (await client.post("/v1/flexserv/models/unload", json={"model_id": "fake-model"})).json()
        assert body["unloaded"] == [
            {"model_id": "fake-model", "was_loaded": True, "had_active_requests": True, "pending": False}
        ]
        assert body["active_requests_at_eviction"] == 1
        text = await task
        assert len(text) == 30, "the stream was cut by the unload"
        # freeing runs in a worker thread once the stream's lease is released
        await wait_until_async(lambda: fake.backend.models[0].unloaded, message="the unloaded model was freed")
        assert (await client.get("/v1/flexserv/models/loaded")).json() == {"models": []}
        again = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert again.choices[0].message.content == "The"
        assert fake.backend.loads == 2
        await client.aclose()
