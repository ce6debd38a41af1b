"""A streaming request over capacity gets 429 with ``Retry-After``, not a 200
stream with an error event: admission happens before the response starts.

The backend here bounds its sequences the way the paged engine does: a sequence
is admitted when its token iterator first runs, and over the bound that raises
:class:`TooManyRequests`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from flexserv_core import LoadedModel, ModelSpec, ProgressCallback, SamplingParams, TokenDelta, TooManyRequests
from flexserv_core.testing import (
    FakeBackendPlugin,
    FakeTextBackend,
    FakeTextModel,
    ServedApp,
    make_app,
    wait_until_async,
)

USER = [{"role": "user", "content": "hi"}]


class BoundedModel(FakeTextModel):
    """At most ``capacity`` sequences at once; counts them in ``active``."""

    capacity = 1

    def __init__(self, spec: ModelSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.active = 0
        self.refused = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        if self.active >= self.capacity:
            self.refused += 1
            raise TooManyRequests("at capacity", retry_after=3)
        self.active += 1
        try:
            async for delta in super().generate(prompt_ids, params):
                yield delta
        finally:
            self.active -= 1


class BoundedBackend(FakeTextBackend):
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        model = BoundedModel(spec, token_delay=self.token_delay)
        self.models.append(model)
        return model


class BoundedPlugin(FakeBackendPlugin):
    def __init__(self) -> None:
        super().__init__(token_delay=0.02)
        self.backend = BoundedBackend(token_delay=0.02)


async def test_stream_over_capacity_is_429_with_retry_after_then_served() -> None:
    plugin = BoundedPlugin()
    with ServedApp(make_app([plugin])) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            body = {"model": "fake-model", "messages": USER, "max_tokens": 200, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as running:
                assert running.status_code == 200
                lines = running.aiter_lines()
                assert (await anext(lines)).startswith("data: ")
                model = plugin.backend.models[0]
                assert isinstance(model, BoundedModel) and model.active == 1
                for path, extra in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "a"})):
                    refused = await client.post(path, json={"model": "fake-model", "stream": True, **extra})
                    assert refused.status_code == 429, refused.text
                    assert refused.headers["retry-after"] == "3"
                    assert refused.headers["content-type"].startswith("application/json")
                    assert refused.json()["error"]["type"] == "rate_limit_error"
                assert model.refused == 2
            # the running stream was closed by its client: its sequence ends, the next is admitted
            await wait_until_async(lambda: model.active == 0, message="the stream ended")
            r = await client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 3, "stream": True})
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")


async def test_partly_admitted_choices_are_closed_when_one_is_refused() -> None:
    """``n=3`` with room for one: 429, and the admitted choice's sequence is closed at once."""
    plugin = BoundedPlugin()
    with ServedApp(make_app([plugin])) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            body = {"messages": USER, "max_tokens": 500, "stream": True, "n": 3}
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 429, r.text
            model = plugin.backend.models[0]
            assert isinstance(model, BoundedModel)
            assert model.active == 0 and model.cancelled_sequences == 1
            r = await client.post("/v1/chat/completions", json={**body, "n": 1, "max_tokens": 2})
            assert r.status_code == 200 and "[DONE]" in r.text
