"""The text API of a real ``flexserv run`` process on loopback, with the embedded model."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core.testing import wait_until_async

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
MODEL = "SmolLM2-135M-Instruct"
#: SmolLM2's end-of-text and end-of-turn tokens: banned, the model generates until max_tokens.
NEVER_STOP = {"0": -100, "2": -100}


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

            async def released() -> bool:
                return bool((await client.get("/v1/flexserv/health")).json()["active_requests"] == 0)

            await wait_until_async(released, 10, interval=0.05, message="the request was released")
        assert time.monotonic() - closed_at < 5


def scrape(url: str) -> dict[tuple[str, str], float]:
    """``(sample name, finished_reason)`` -> value, for the served model's samples."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.labels.get("model_name") == MODEL:
                out[(sample.name, sample.labels.get("finished_reason", ""))] = sample.value
    return out


def generated(url: str) -> float:
    return scrape(url).get(("flexserv:generation_tokens_total", ""), 0.0)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a very long story."}]}),
        ("/v1/completions", {"prompt": "Once upon a time"}),
    ],
)
async def test_a_plain_request_whose_client_left_is_cancelled(server_url: str, path: str, body: dict[str, Any]) -> None:
    """Not streamed, 2000 tokens asked, the client gone after a few: the sequence is
    cancelled (running back to 0, one more abort, a few tokens generated, not
    2000) and the next request is served."""
    request = {**body, "model": MODEL, "max_tokens": 2000, "temperature": 0, "logit_bias": NEVER_STOP}
    async with httpx.AsyncClient(base_url=server_url, timeout=300) as client:
        assert (await client.post(path, json={**request, "max_tokens": 1})).status_code == 200  # the model is loaded
        before = scrape(server_url)
        base = before.get(("flexserv:generation_tokens_total", ""), 0.0)
        aborts = before.get(("flexserv:request_success_total", "abort"), 0.0)
        pending = asyncio.ensure_future(client.post(path, json=request))
        await wait_until_async(lambda: generated(server_url) >= base + 5, timeout=60, message="generation started")
        pending.cancel()  # closes the connection
        with pytest.raises(asyncio.CancelledError):
            await pending

        def cancelled() -> bool:
            now = scrape(server_url)
            return (
                now.get(("flexserv:num_requests_running", "")) == 0
                and now.get(("flexserv:request_success_total", "abort")) == aborts + 1
            )

        await wait_until_async(cancelled, timeout=30, interval=0.05, message="the sequence was cancelled")
        stopped_at = generated(server_url)
        assert stopped_at - base < 500, f"{stopped_at - base:.0f} of 2000 tokens: the request kept generating"

        fresh = await client.post(path, json={**request, "max_tokens": 5})
        assert fresh.status_code == 200 and fresh.json()["usage"]["completion_tokens"] == 5
        # nothing generated besides the fresh request's five: the cancelled sequence is gone
        assert generated(server_url) == stopped_at + 5
