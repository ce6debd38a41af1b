"""The rules of ``engine_api`` checked against every engine listed in ``ENGINES``.

Runs on the tiny random Llama, so it is quick; an engine added to ``ENGINES`` is
tested here without new code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest
import torch
from flexserv_transformers.engine_api import ENGINES, Engine, EngineModel, load_engine_factory

from flexserv_core import SamplingParams, ServiceUnavailable

pytestmark = pytest.mark.slow  # builds and loads a tiny random Llama

PROMPTS = [[5, 17, 42, 99, 7], [300, 1, 2, 250], list(range(20, 40))]


@pytest.fixture(params=sorted(ENGINES))
def engine_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def engine_model(tiny) -> EngineModel:
    return tiny.engine_model


@pytest.fixture
def start_engine(engine_name, engine_model, backend_settings, tmp_path) -> Iterator[Any]:
    started: list[Engine] = []

    def start(**changes: Any) -> Engine:
        import msgspec

        em = msgspec.structs.replace(engine_model, **changes) if changes else engine_model
        engine = load_engine_factory(engine_name)(em, backend_settings(tmp_path, transformers_engine=engine_name))
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.close()


async def run(engine: Engine, prompt: list[int], **params: Any) -> list[Any]:
    return [t async for t in engine.generate(prompt, SamplingParams(**params))]


def reference(engine_model: EngineModel, prompt: list[int], n: int) -> list[int]:
    eos = sorted(engine_model.eos_token_ids)
    with torch.inference_mode():
        out = engine_model.model.generate(
            torch.tensor([prompt], device=engine_model.device),
            do_sample=False,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=eos[0],
        )
    return out[0, len(prompt) :].tolist()


async def test_greedy_parity_and_length(start_engine, engine_model):
    engine = start_engine()
    assert isinstance(engine, Engine)
    for prompt in PROMPTS:
        tokens = await run(engine, prompt, max_tokens=12, temperature=0)
        ids = [t.token_id for t in tokens]
        assert ids == reference(engine_model, prompt, 12)
        assert [t.finish_reason for t in tokens[:-1]] == [None] * (len(tokens) - 1)
        assert tokens[-1].finish_reason == ("stop" if ids[-1] in engine_model.eos_token_ids else "length")


async def test_sequence_ends_at_max_sequence_tokens(start_engine, engine_model):
    engine = start_engine(eos_token_ids=frozenset(), context_length=12)
    assert engine.max_sequence_tokens == 12  # the tiny model's context, cut to 12
    tokens = await run(engine, PROMPTS[0], max_tokens=100, temperature=0)
    assert len(PROMPTS[0]) + len(tokens) == 12 and tokens[-1].finish_reason == "length"


async def test_concurrent_requests_match_solo_runs(start_engine):
    engine = start_engine()
    solo = [[t.token_id for t in await run(engine, p, max_tokens=10, temperature=0)] for p in PROMPTS]
    together = await asyncio.gather(*(run(engine, p, max_tokens=10, temperature=0) for p in PROMPTS))
    assert [[t.token_id for t in r] for r in together] == solo


async def test_eos_ends_with_stop(start_engine, engine_model):
    first = reference(engine_model, PROMPTS[0], 3)[1]  # make the second greedy token an EOS
    engine = start_engine(eos_token_ids=frozenset({first}))
    tokens = await run(engine, PROMPTS[0], max_tokens=10, temperature=0, logprobs=True)
    assert [t.finish_reason for t in tokens] == [None, "stop"] and tokens[-1].token_id == first
    assert tokens[-1].logprob is not None


async def test_seeded_sampling_is_reproducible(start_engine):
    engine = start_engine()
    a = [t.token_id for t in await run(engine, PROMPTS[1], max_tokens=15, temperature=1.0, seed=11)]
    b = [t.token_id for t in await run(engine, PROMPTS[1], max_tokens=15, temperature=1.0, seed=11)]
    c = [t.token_id for t in await run(engine, PROMPTS[1], max_tokens=15, temperature=1.0, seed=12)]
    assert a == b and a != c


async def test_logprobs_shape(start_engine):
    engine = start_engine()
    tokens = await run(engine, PROMPTS[2], max_tokens=5, temperature=0.7, seed=1, logprobs=True, top_logprobs=3)
    for t in tokens:
        assert t.logprob is not None and t.logprob <= 0
        assert t.top_logprobs is not None and len(t.top_logprobs) == 3
        values = [lp for _, lp in t.top_logprobs]
        assert values == sorted(values, reverse=True)


async def test_aclose_cancels_within_one_step(start_engine):
    engine = start_engine()
    async with aclosing(engine.generate(PROMPTS[0], SamplingParams(max_tokens=10_000, temperature=0))) as stream:
        async for _ in stream:
            break
    deadline = time.monotonic() + 10
    while engine.stats()["active_sequences"] and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    stats = engine.stats()
    assert stats["active_sequences"] == 0 and stats["waiting_sequences"] == 0


async def test_close_fails_running_and_new_requests(start_engine):
    engine = start_engine()
    stream = engine.generate(PROMPTS[0], SamplingParams(max_tokens=10_000, temperature=0))
    await stream.__anext__()
    await asyncio.to_thread(engine.close)
    with pytest.raises(ServiceUnavailable):
        async for _ in stream:
            pass
    with pytest.raises(ServiceUnavailable):
        await run(engine, PROMPTS[0], max_tokens=2)
    engine.close()  # idempotent
