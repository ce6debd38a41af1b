"""The paged engine on the real SmolLM2: batching, cancellation, queue bound, prefix cache, exhaustion."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import TOPICS, assert_same_or_tie, chat_prompt, greedy, greedy_all, make_engine

from flexserv_core import SamplingParams, TooManyRequests

pytestmark = pytest.mark.slow  # loads the real SmolLM2-135M

SYSTEM = (
    "You are a patient assistant for a museum of natural history. Answer in one or two short sentences, "
    "use plain words a child understands, never invent facts, and mention one exhibit the visitor could see. "
) * 3


@pytest.fixture(scope="module")
def model_tok(smollm2):
    return smollm2


async def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_concurrent_greedy_equals_one_at_a_time(model_tok):
    model, tok = model_tok
    prompts = [chat_prompt(tok, f"Write one sentence about {t}.") for t in TOPICS[:16]]
    engine = make_engine(model, tok, max_batch_size=16)
    try:
        solo = [await greedy(engine, p, 12) for p in prompts]
        together = await greedy_all(engine, prompts, 12)
        assert engine.stats()["steps"] > 0
    finally:
        engine.close()
    for p, a, b in zip(prompts, solo, together, strict=True):
        assert len(a) == 12 or a[-1] == tok.eos_token_id
        assert_same_or_tie(model, p, a, b)


async def test_cancel_half_frees_blocks_others_finish(model_tok):
    model, tok = model_tok
    prompts = [chat_prompt(tok, f"Tell me a long story about {t}.") for t in TOPICS]
    engine = make_engine(model, tok, max_batch_size=20, prefix_caching=False)
    try:
        idle = engine.stats()["kv_cache"]["used_blocks"]
        expected = [await greedy(engine, p, 10) for p in prompts[::2]]

        async def consume(i: int, prompt: list[int]) -> list[int]:
            out = []
            stream = engine.generate(prompt, SamplingParams(max_tokens=10 if i % 2 == 0 else 200, temperature=0))
            async for tok_ in stream:
                out.append(tok_.token_id)
                if i % 2 == 1 and len(out) == 3:
                    await stream.aclose()  # the client goes away mid-stream
                    break
            return out

        results = await asyncio.gather(*(consume(i, p) for i, p in enumerate(prompts)))
        await wait_for(lambda: engine.stats()["active_sequences"] == 0)
        stats = engine.stats()
        assert stats["kv_cache"]["used_blocks"] == idle
        assert stats["active_requests"] == 0
        assert all(len(r) == 3 for r in results[1::2])
        for p, e, r in zip(prompts[::2], expected, results[::2], strict=True):
            assert_same_or_tie(model, p, e, r)
        # Cancelled sequences stopped early: far fewer tokens than their 200 allowed.
        assert stats["tokens_generated"] < 10 * 10 * 2 + 10 * 20
    finally:
        engine.close()


async def test_queue_bound_gives_429_then_serves(model_tok):
    model, tok = model_tok
    engine = make_engine(model, tok, max_batch_size=2, max_queued_requests=2)
    prompt = chat_prompt(tok, "Say hello.")
    try:
        params = SamplingParams(max_tokens=8, temperature=0)
        streams = [engine.generate(prompt, params) for _ in range(4)]  # 2 running + 2 queued
        with pytest.raises(TooManyRequests) as info:
            engine.generate(prompt, params)
        err = info.value
        assert err.status_code == 429 and int(err.headers["Retry-After"]) >= 1
        assert err.to_dict()["error"]["type"] == "rate_limit_error"

        async def drain(stream) -> list[int]:
            return [t.token_id async for t in stream]

        outs = await asyncio.gather(*(drain(s) for s in streams))
        assert all(o == outs[0] for o in outs) and len(outs[0]) >= 1
        # Served normally afterwards.
        assert await greedy(engine, prompt, 8) == outs[0]
        assert engine.stats()["active_requests"] == 0
    finally:
        engine.close()


async def test_prefix_cache_hits_and_identical_outputs(model_tok):
    model, tok = model_tok
    prompts = [chat_prompt(tok, f"What is {t}?", system=SYSTEM) for t in TOPICS[:6]]
    cached = make_engine(model, tok)
    plain = make_engine(model, tok, prefix_caching=False)
    try:
        first = await greedy(cached, prompts[0], 8)
        hits_before = cached.stats()["prefix_cache"]["hit_blocks"]
        with_cache = [first, *await greedy_all(cached, prompts[1:], 8)]
        without = await greedy_all(plain, prompts, 8)
        stats = cached.stats()["prefix_cache"]
        shared_blocks = len(chat_prompt(tok, "x", system=SYSTEM)) // 16 - 1
        assert stats["hit_blocks"] - hits_before >= 5 * shared_blocks > 0
        assert plain.stats()["prefix_cache"]["hit_blocks"] == 0
    finally:
        cached.close()
        plain.close()
    for p, a, b in zip(prompts, with_cache, without, strict=True):
        assert_same_or_tie(model, p, b, a)


async def test_block_exhaustion_waits_or_preempts(model_tok):
    model, tok = model_tok
    prompts = [chat_prompt(tok, f"Describe {t} in detail.") for t in TOPICS[:6]]
    longest = max(len(p) for p in prompts) + 16
    blocks = -(-longest // 16) + 2  # room for one sequence and a bit: the others must wait or be preempted
    small = make_engine(model, tok, kv_cache_blocks=blocks, max_batch_size=6, prefix_caching=False)
    try:
        solo = [await greedy(small, p, 16) for p in prompts]
        together = await greedy_all(small, prompts, 16)
        stats = small.stats()
        assert stats["kv_cache"]["used_blocks"] == 0
        # Two sequences at most fit at once: the rest waited for blocks or were preempted.
        assert stats["preemptions"] > 0 or stats["peak_running"] < len(prompts)
    finally:
        small.close()
    for p, a, b in zip(prompts, solo, together, strict=True):
        assert_same_or_tie(model, p, a, b)
