"""Cancellation and prefix-cache eviction of the paged engine, on a model that would
otherwise keep generating.

A tiny random Llama built in-process, served with no end-of-sequence id: a
sequence ends only at ``max_tokens`` or when cancelled, so a cancellation that
does not reach the engine shows as hundreds of extra tokens. A KV cache of a few
blocks forces the prefix cache to evict, and every output is checked against a
plain greedy loop over the model (no cache, no engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from engine_helpers import assert_same_or_tie
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings

from flexserv_core import SamplingParams

pytestmark = pytest.mark.slow  # builds and runs a (tiny) real model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    from flexserv_transformers.testing import build_tiny_llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_llama(tmp_path_factory.mktemp("tiny-evict"), max_position_embeddings=512, seed=3)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def endless_engine(model: Any, **settings: Any) -> PagedEngine:
    """No EOS id: only ``max_tokens``, the context or a cancellation end a sequence."""
    prefixed = {f"transformers_{name}": value for name, value in settings.items()}
    return PagedEngine(model, settings=EngineSettings(**prefixed), eos_token_ids=())


def reference_greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


async def run(engine: PagedEngine, prompt: list[int], n: int) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0)
    return [t.token_id async for t in engine.generate(prompt, params)]


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait for engine state another thread changes (no event to wait on)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def idle(engine: PagedEngine) -> bool:
    s = engine.stats()
    return s["active_requests"] == 0 and s["active_sequences"] == 0 and s["waiting_sequences"] == 0


def prompt_of(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text)["input_ids"])


async def test_closing_a_running_stream_stops_its_sequence(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    engine = endless_engine(model, kv_block_size=4)
    try:
        stream = engine.generate(prompt_of(tok, "hello there"), SamplingParams(max_tokens=400, temperature=0))
        got = [await anext(stream) for _ in range(3)]
        assert all(t.finish_reason is None for t in got)
        # the engine thread runs ahead of this consumer (its tokens wait in the stream's
        # queue), so count from the moment of cancelling, not from the tokens read
        await stream.aclose()
        at_cancel = engine.stats()["tokens_generated"]
        await until(lambda: idle(engine))
        generated = engine.stats()["tokens_generated"]
        assert generated <= at_cancel + 1, f"the cancelled sequence kept generating ({at_cancel} -> {generated})"
        assert generated < 400
        assert engine.block_manager.used == 0, "a cancelled sequence kept its KV blocks"
        assert len(await run(engine, prompt_of(tok, "again"), 5)) == 5  # still serving
    finally:
        engine.close()


async def test_cancelling_a_queued_request_means_it_never_runs(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    engine = endless_engine(model, kv_block_size=4, max_batch_size=1)
    try:
        # long enough that the first cannot finish (and free the slot) before the cancel lands
        first = engine.generate(prompt_of(tok, "first one"), SamplingParams(max_tokens=200, temperature=0))
        assert (await anext(first)).finish_reason is None
        queued = engine.generate(prompt_of(tok, "second one"), SamplingParams(max_tokens=300, temperature=0))
        waiter = asyncio.ensure_future(anext(queued))
        await asyncio.sleep(0)  # one loop turn: the consumer starts and blocks on its queue
        assert not waiter.done() and engine.stats()["waiting_sequences"] == 1
        waiter.cancel()  # the consumer goes away while its request waits for a batch slot
        with pytest.raises(asyncio.CancelledError):
            await waiter
        rest = [t async for t in first]
        assert rest[-1].finish_reason == "length" and len(rest) == 199
        await until(lambda: idle(engine))
        assert engine.stats()["tokens_generated"] == 200, "the cancelled queued request was run"
        assert engine.block_manager.used == 0
    finally:
        engine.close()


#: Four prompts with no common prefix: in a small pool each evicts what the others cached.
FOUR_PROMPTS = (
    "The quick brown fox jumps over the lazy dog",
    "Paris is the capital of France; Berlin is",
    "def main():\n    print('hello world')",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100",
)


async def test_prefix_cache_eviction_under_kv_pressure_keeps_outputs_exact(tiny: tuple[Any, Any]) -> None:
    """Ten 4-token blocks: each request evicts blocks the previous ones cached; a
    stale cache entry would hand a request K/V computed for another prompt."""
    model, tok = tiny
    prompts = [prompt_of(tok, text) for text in FOUR_PROMPTS]
    n = 8
    expected = [reference_greedy(model, p, n) for p in prompts]
    engine = endless_engine(model, kv_block_size=4, kv_cache_blocks=10, max_batch_size=4)
    try:
        for round_ in range(2):
            for prompt, want in zip(prompts, expected, strict=True):
                got = await run(engine, prompt, n)
                assert_same_or_tie(model, prompt, want, got)
            assert engine.stats()["kv_cache"]["evictions"] > 0, f"round {round_}: the cache never evicted"
        # and concurrently, where a stale block could also be one another sequence is using
        outs = await asyncio.gather(*(run(engine, p, n) for p in prompts))
        for prompt, want, got in zip(prompts, expected, outs, strict=True):
            assert_same_or_tie(model, prompt, want, got)
        stats = engine.stats()
        assert stats["prefix_cache"]["hit_blocks"] > 0, "the scenario never reused a cached prefix"
        assert engine._error is None and engine._thread.is_alive()
        assert idle(engine) and engine.block_manager.used == 0
    finally:
        engine.close()


async def test_a_pool_resident_only_in_part_grows_and_recycles_with_outputs_exact(tiny: tuple[Any, Any]) -> None:
    """One block pre-touched of 40: blocks beyond it are written (and zero-filled) only
    when nothing cached can be evicted, and recycled ones carry no stale K/V."""
    model, tok = tiny
    prompts = [prompt_of(tok, text) for text in FOUR_PROMPTS]
    n = 8
    expected = [reference_greedy(model, p, n) for p in prompts]
    engine = endless_engine(model, kv_block_size=4, kv_cache_blocks=40, kv_cache_resident=1e-6, max_batch_size=4)
    try:
        assert engine.stats()["kv_cache"]["touched_blocks"] == 1
        for prompt, want in zip(prompts, expected, strict=True):
            assert_same_or_tie(model, prompt, want, await run(engine, prompt, n))
        alone = engine.stats()["kv_cache"]["touched_blocks"]
        assert 1 < alone < 10  # one sequence at a time: only what the longest needed, then recycled
        outs = await asyncio.gather(*(run(engine, p, n) for p in prompts))
        for prompt, want, got in zip(prompts, expected, outs, strict=True):
            assert_same_or_tie(model, prompt, want, got)
        kv = engine.stats()["kv_cache"]
        assert alone < kv["touched_blocks"] < 40  # four at once needed more, never the whole pool
        assert kv["evictions"] > 0 and kv["resident_blocks"] == 1
        assert idle(engine) and engine.block_manager.used == 0
    finally:
        engine.close()


def test_tiny_model_does_not_stop_on_its_own(tiny: tuple[Any, Any]) -> None:
    """The premise of the cancellation tests: without cancellation the sequence
    runs to ``max_tokens`` (there is no EOS id to end it)."""
    model, tok = tiny

    async def main() -> int:
        engine = endless_engine(model, kv_block_size=4)
        try:
            return len(await run(engine, prompt_of(tok, "hello there"), 120))
        finally:
            engine.close()

    assert asyncio.run(main()) == 120


@pytest.mark.parametrize("engine_name", ["paged", "simple"])
async def test_a_request_queued_past_its_queue_timeout_gets_503_and_leaves(
    tiny: tuple[Any, Any], engine_name: str
) -> None:
    from flexserv_transformers.engine_api import EngineModel
    from flexserv_transformers.simple_engine import SimpleEngine

    from flexserv_core import ServiceUnavailable

    model, tok = tiny
    if engine_name == "paged":
        engine: Any = endless_engine(model, kv_block_size=4, max_batch_size=1)
    else:
        engine = SimpleEngine(
            EngineModel(
                model=model, device=model.device, eos_token_ids=frozenset(), context_length=512, vocab_size=len(tok)
            )
        )
    try:
        busy = engine.generate(prompt_of(tok, "busy"), SamplingParams(max_tokens=400, temperature=0))
        assert (await anext(busy)).finish_reason is None
        late = engine.generate(prompt_of(tok, "late"), SamplingParams(max_tokens=5, temperature=0, queue_timeout=0.2))
        if engine_name == "simple":  # it interleaves: a fresh sequence goes first, so it never waits that long
            assert len([t async for t in late]) == 5
        else:
            with pytest.raises(ServiceUnavailable) as caught:
                await anext(late)
            assert caught.value.code == "queue_timeout" and int(caught.value.headers["Retry-After"]) >= 1
            assert engine.stats()["waiting_sequences"] == 0
        await busy.aclose()
        await until(lambda: engine.stats()["active_sequences"] == 0 and engine.stats()["waiting_sequences"] == 0)
    finally:
        engine.close()


async def test_a_failed_step_fails_its_batch_restarts_and_serves_the_waiting(tiny: tuple[Any, Any]) -> None:
    from flexserv_core import ServiceUnavailable

    model, tok = tiny
    engine = endless_engine(model, kv_block_size=4, max_batch_size=1)
    forward = engine.runner.forward
    calls = {"n": 0}

    def flaky(plan: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (injected)")
        return forward(plan)

    engine.runner.forward = flaky  # type: ignore[method-assign]
    try:
        prompt = prompt_of(tok, "hello there")
        expected = reference_greedy(model, prompt, 6)
        running = engine.generate(prompt, SamplingParams(max_tokens=50, temperature=0))
        assert (await anext(running)).finish_reason is None
        waiting = asyncio.ensure_future(run(engine, prompt, 6))  # queued behind the batch of one
        with pytest.raises(ServiceUnavailable) as caught:
            async for _ in running:
                pass
        assert caught.value.code == "engine_restarted" and "illegal memory access" in caught.value.message
        assert_same_or_tie(model, prompt, expected, await waiting)
        assert engine.restarts == 1 and engine.failure is None and engine._thread.is_alive()
        assert_same_or_tie(model, prompt, expected, await run(engine, prompt, 6))
        await until(lambda: idle(engine))
        assert engine.block_manager.used == 0
    finally:
        engine.close()


async def test_a_release_failing_as_a_sequence_finishes_still_answers_it(tiny: tuple[Any, Any]) -> None:
    """The finishing sequence has already left the running list when its blocks are
    released: if that fails, the restart does not see it, so it must be answered there
    (before, its client waited forever)."""
    model, tok = tiny
    engine = endless_engine(model, kv_block_size=4)
    release = engine.scheduler.blocks.release
    calls = {"n": 0}

    def failing_once(blocks: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("block accounting broken (injected)")
        release(blocks)

    engine.scheduler.blocks.release = failing_once  # type: ignore[method-assign]
    try:
        prompt = prompt_of(tok, "hello there")
        tokens = await asyncio.wait_for(run(engine, prompt, 4), 30)
        assert tokens == reference_greedy(model, prompt, 4) and calls["n"] == 1
        # the answer is sent before the exception reaches the restart: wait for it
        await until(lambda: engine.restarts == 1)
        assert engine._thread.is_alive()
        assert await asyncio.wait_for(run(engine, prompt, 4), 30) == tokens
        await until(lambda: idle(engine))
    finally:
        engine.close()


async def test_an_engine_failing_every_step_stops_and_says_why(tiny: tuple[Any, Any]) -> None:
    from flexserv_core import ServiceUnavailable

    model, tok = tiny
    engine = endless_engine(model, kv_block_size=4)

    def broken(plan: Any) -> Any:
        raise RuntimeError("device lost (injected)")

    engine.runner.forward = broken  # type: ignore[method-assign]
    try:
        for _ in range(10):
            with contextlib.suppress(ServiceUnavailable):
                await run(engine, prompt_of(tok, "hi"), 3)
            if engine.failure:
                break
        assert engine.failure and "device lost" in engine.failure
        engine._thread.join(10)
        assert not engine._thread.is_alive()
        with pytest.raises(ServiceUnavailable):
            await run(engine, prompt_of(tok, "hi"), 3)
    finally:
        engine.close()
