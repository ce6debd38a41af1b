"""The text session's failure cases, the same on every text route.

Chat completions, completions and the Responses API are served by one
:class:`~flexserv_core.api.text_session.TextSession`, so a bad constraint, a
prompt over the context, a full queue, a client that goes away and a missed
deadline must give the same status, error code, metrics and cancellation on all
three, streamed or not. Each case runs against a real server on a socket.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from flexserv_constraints import ConstraintVocabulary
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core import (
    LoadedModel,
    ModelSpec,
    ProgressCallback,
    SamplingParams,
    TokenDelta,
    TooManyRequests,
)
from flexserv_core.testing import FakeBackendPlugin, FakeTextBackend, FakeTextModel, ServedApp, make_app

BANANA = {"type": "object", "properties": {"a": {"type": "banana"}}}


@dataclass(frozen=True)
class Route:
    path: str
    #: The parameter a schema error names on this route.
    schema_param: str

    def body(self, prompt: str, max_tokens: int, stream: bool, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "fake-model", "stream": stream}
        if self.path == "/v1/chat/completions":
            body |= {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
            if schema is not None:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        elif self.path == "/v1/completions":
            body |= {"prompt": prompt, "max_tokens": max_tokens}
            if schema is not None:
                body["structured_outputs"] = {"json": schema}
        else:
            body |= {"input": prompt, "max_output_tokens": max_tokens}
            if schema is not None:
                body["text"] = {"format": {"type": "json_schema", "name": "x", "schema": schema}}
        return body


ROUTES = [
    Route("/v1/chat/completions", "response_format.json_schema.schema"),
    Route("/v1/completions", "structured_outputs.json"),
    Route("/v1/responses", "text.format.schema"),
]


class PipelineModel(FakeTextModel):
    """The fake model with a byte vocabulary for the constraint service, a bound on
    running sequences (``capacity``; over it, the iterator's first step raises 429 as
    the paged engine does), and the sequences it ran and saw cancelled."""

    capacity = 8

    def __init__(self, spec: ModelSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.constraint_vocabulary = ConstraintVocabulary.from_tokens(
            [bytes([i]) for i in range(256)] + [b"</s>"], encode=list, eos_token_ids=[256]
        )
        self.active = 0

    async def prepare(self, params: SamplingParams) -> None:
        pass  # the fake does not mask its logits: it only feeds its matcher (below)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        if self.active >= self.capacity:
            raise TooManyRequests("at capacity", retry_after=7)
        self.active += 1
        # its script, not what the grammar allows: the matcher gives up at the first token,
        # as llguidance does on the way when a grammar turns too complex to follow
        matcher = params.grammar.matcher() if params.grammar is not None else None
        try:
            async for delta in super().generate(prompt_ids, params):
                if matcher is not None and delta.finish_reason != "stop":
                    matcher.advance(delta.token_id)
                yield delta
        finally:
            self.active -= 1


class PipelineBackend(FakeTextBackend):
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        model = PipelineModel(spec, token_delay=self.token_delay, **self.model_options)
        self.models.append(model)
        return model


def plugin(token_delay: float = 0.0) -> FakeBackendPlugin:
    fake = FakeBackendPlugin(token_delay=token_delay)
    fake.backend = PipelineBackend(token_delay=token_delay, context_length=256)
    return fake


def served(fake: FakeBackendPlugin, metrics: httpx.Response) -> dict[str, float]:
    """This server's text counters: requests finished (by reason), prompt tokens and
    queue times observed."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics.text):
        for sample in family.samples:
            if sample.name == "flexserv:request_success_total":
                key = f"finished:{sample.labels['finished_reason']}"
                out[key] = out.get(key, 0) + sample.value
            elif sample.name == "flexserv:prompt_tokens_total":
                out["prompt_tokens"] = out.get("prompt_tokens", 0) + sample.value
            elif sample.name == "flexserv:request_queue_time_seconds_count":
                out["queued"] = out.get("queued", 0) + sample.value
    assert "prompt_tokens" in out, "the counters were renamed: this suite would compare nothing"
    return {k: v for k, v in out.items() if v}


async def post(client: httpx.AsyncClient, route: Route, body: dict[str, Any]) -> httpx.Response:
    """The answer's status and body; a stream refused before it starts is a plain JSON error."""
    async with client.stream("POST", route.path, json=body) as response:
        await response.aread()
        return response


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return dict(response.json()["error"])


@pytest.fixture(params=[False, True], ids=["plain", "stream"])
def stream(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_a_constraint_that_cannot_be_compiled_is_a_400_and_not_served(route: Route, stream: bool) -> None:
    fake = plugin()
    with ServedApp(make_app([fake, "responses", "constraints"])) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await client.post(route.path, json=route.body("warm", 2, False))  # the model is loaded
            before = served(fake, await client.get("/metrics"))
            response = await post(client, route, route.body("hi", 5, stream, BANANA))
            assert response.status_code == 400
            error = error_of(response)
            assert error["code"] == "invalid_grammar" and error["type"] == "invalid_request_error"
            assert error["param"] == route.schema_param
            assert served(fake, await client.get("/metrics")) == before  # not a served request
            assert fake.backend.models[0].generated_sequences == 1  # the warm-up only


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_a_grammar_given_up_on_the_way_is_an_error_not_a_finish(route: Route, stream: bool) -> None:
    """The output no longer follows the constraint: never a 200 'stop' (or a completed response)."""
    fake = plugin()
    with ServedApp(make_app([fake, "responses", "constraints"])) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            response = await post(client, route, route.body("hi", 5, stream, {"type": "integer"}))
            if stream:  # begun: the error is the stream's last event
                assert response.status_code == 200 and "invalid_grammar" in response.text, response.text
                assert f'"param":"{route.schema_param}"' in response.text.replace(" ", ""), response.text
                assert '"finish_reason":"stop"' not in response.text and "response.completed" not in response.text
            else:
                assert response.status_code == 400, response.text
                error = error_of(response)
                assert (error["code"], error["param"]) == ("invalid_grammar", route.schema_param)
                assert "could not be followed" in error["message"]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_a_prompt_over_the_context_is_a_400_and_not_served(route: Route, stream: bool) -> None:
    fake = plugin()
    with ServedApp(make_app([fake, "responses", "constraints"])) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await client.post(route.path, json=route.body("warm", 2, False))
            before = served(fake, await client.get("/metrics"))
            response = await post(client, route, route.body("x" * 300, 5, stream))
            assert response.status_code == 400
            assert error_of(response)["code"] == "context_length_exceeded"
            assert served(fake, await client.get("/metrics")) == before


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_a_full_queue_is_a_429_with_retry_after(route: Route, stream: bool) -> None:
    fake = plugin()
    with ServedApp(make_app([fake, "responses", "constraints"])) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await client.post(route.path, json=route.body("warm", 2, False))
            model = fake.backend.models[0]
            assert isinstance(model, PipelineModel)
            model.capacity = 0
            before = served(fake, await client.get("/metrics"))
            response = await post(client, route, route.body("hi", 5, stream))
            assert response.status_code == 429, response.text
            assert response.headers["retry-after"] == "7"
            assert error_of(response)["type"] == "rate_limit_error"
            # refused by the engine, with no usage: neither a finished sequence nor prompt tokens
            assert served(fake, await client.get("/metrics")) == before
            assert app_active(base) == 0


def app_active(base: str) -> int:
    health = httpx.get(f"{base}/v1/flexserv/health", timeout=10).json()
    return sum(m.get("active_requests", 0) for m in health.get("models", []) if isinstance(m, dict))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_a_client_that_goes_away_cancels_its_sequence(route: Route, stream: bool) -> None:
    fake = plugin(token_delay=0.05)
    with ServedApp(make_app([fake, "responses", "constraints"])) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await client.post(route.path, json=route.body("warm", 1, False))
            model = fake.backend.models[0]
            before = served(fake, await client.get("/metrics"))
            cancelled = model.cancelled_sequences  # a finished warm-up closed early counts too

            async def go_away() -> None:
                async with client.stream("POST", route.path, json=route.body("hi", 200, stream)) as response:
                    assert response.status_code == 200
                    async for _ in response.aiter_bytes():
                        break  # read one piece of the stream, then leave

            task = asyncio.create_task(go_away())
            if not stream:  # a plain request sends nothing until it is done: leave while it generates
                for _ in range(500):
                    if model.tokens_emitted >= 5 or task.done():
                        break
                    await asyncio.sleep(0.02)
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for _ in range(200):
                if model.cancelled_sequences > cancelled:
                    break
                await asyncio.sleep(0.05)
            assert model.cancelled_sequences == cancelled + 1
            assert model.tokens_emitted < 150, "generation went on for nobody"
            after = served(fake, await client.get("/metrics"))
            for _ in range(100):
                if after.get("finished:abort", 0) > before.get("finished:abort", 0):
                    break
                await asyncio.sleep(0.05)
                after = served(fake, await client.get("/metrics"))
            assert after.get("finished:abort", 0) == before.get("finished:abort", 0) + 1


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
async def test_no_first_token_in_time_is_a_504_before_anything_streams(route: Route, stream: bool) -> None:
    fake = plugin(token_delay=30.0)  # half a minute a token
    with ServedApp(make_app([fake, "responses", "constraints"], settings={"first_token_timeout": 0.3})) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            response = await post(client, route, route.body("hi", 5, stream))
            assert response.status_code == 504
            error = error_of(response)
            assert error["code"] == "first_token_timeout" and error["type"] == "timeout_error"
            model = fake.backend.models[0]
            assert model.tokens_emitted == 0 and model.cancelled_sequences == model.generated_sequences == 1


def test_routes_build_their_own_bodies() -> None:
    # the helper above is what the cases rely on: each route gets its own field names
    bodies = [json.dumps(r.body("p", 3, True, BANANA)) for r in ROUTES]
    assert "response_format" in bodies[0] and "structured_outputs" in bodies[1] and '"text"' in bodies[2]
