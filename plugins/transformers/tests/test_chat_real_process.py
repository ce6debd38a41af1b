"""The text API of a real ``flexserv run`` process on loopback, with the embedded model."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


async def test_sdk_over_loopback_streaming_and_not(server_url: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0, timeout=300) as sdk:
        full = await sdk.chat.completions.create(
            model="SmolLM2-135M-Instruct", messages=QUESTION, max_tokens=12, temperature=0
        )
        assert "Paris" in full.choices[0].message.content
        stream = await sdk.chat.completions.create(
            model="SmolLM2-135M-Instruct", messages=QUESTION, max_tokens=12, temperature=0, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == full.choices[0].message.content


async def test_disconnect_releases_the_model_promptly(server_url: str) -> None:
    """A 2000-token stream closed after 3 tokens: the request is gone within a
    second or two (finishing it would take a minute or more on a CPU)."""
    async with openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0, timeout=300) as sdk:
        stream = await sdk.completions.create(
            model="SmolLM2-135M-Instruct",
            prompt="Write a very long story about a dragon.",
            max_tokens=2000,
            temperature=0,
            stream=True,
        )
        seen = 0
        async for chunk in stream:
            seen += bool(chunk.choices and chunk.choices[0].text)
            if seen == 3:
                break
        await stream.close()
        closed_at = time.monotonic()
        async with httpx.AsyncClient(base_url=server_url) as client:
            while time.monotonic() - closed_at < 10:
                health = (await client.get("/v1/flexserv/health")).json()
                if health["active_requests"] == 0:
                    break
                await asyncio.sleep(0.05)
        assert health["active_requests"] == 0
        assert time.monotonic() - closed_at < 5
