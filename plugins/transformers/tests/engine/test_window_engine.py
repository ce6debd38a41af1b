"""A model windowed on every layer, served by the real paged engine: its sequences
give back the KV blocks that fell out of the window, so a long generation holds a
window of blocks and a pool too small for the whole context still serves it, token
for token like ``model.generate(do_sample=False)`` in float32, prefix-cache hits and
chunked prefill across the window included. A model with a global layer (Gemma 2)
keeps every block.

The checkpoints are the architecture matrix's tiny seeded ones (window of 8 tokens);
the engine runs 4-token blocks and 16-token steps, so prompts cross the window
inside a chunk and between chunks.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from flexserv_transformers.engine.blocks import HOLE
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.sequence import Sequence
from flexserv_transformers.engine.settings import EngineSettings
from flexserv_transformers.families import TINY_WINDOW
from flexserv_transformers.testing import build_tiny_family

from flexserv_core import SamplingParams
from flexserv_core.testing import ServedApp, make_app

BS = 4
TEXTS = [
    "Write one sentence about the moon and the quick brown fox.",
    "hello there! how can I help you today? Paris is the capital of France",
    "def main():\n    print('hello world')",
]


def build(name: str, **config: Any) -> tuple[Any, Any, list[list[int]]]:
    """``(served model, reference copy, chat prompts)`` of a tiny float32 family."""
    model, tok = build_tiny_family(name, seed=1, config=config)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tok.pad_token_id
    prompts = []
    for text in TEXTS:
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        prompts.append(list(ids if isinstance(ids, list) else ids["input_ids"]))
    assert all(len(p) > 2 * TINY_WINDOW for p in prompts)
    return model, copy.deepcopy(model), prompts


def reference(model: Any, prompt: list[int], n: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=0, eos_token_id=None
        )
    tokens: list[int] = out[0, len(prompt) :].tolist()
    return tokens


def engine_for(model: Any, **settings: Any) -> PagedEngine:
    """Without speculation: a verified draft holds blocks for its positions too, which
    the block counts here leave out (``test_speculative_engine`` runs windowed drafts)."""
    defaults = {"kv_block_size": BS, "max_batch_tokens": 16, "speculative_draft_tokens": 0}
    prefixed = {f"transformers_{k}": v for k, v in {**defaults, **settings}.items()}
    return PagedEngine(model, settings=EngineSettings(**prefixed), eos_token_ids=(), name="tiny")


async def greedy(engine: PagedEngine, prompt: list[int], n: int) -> list[int]:
    return [t.token_id async for t in engine.generate(prompt, SamplingParams(max_tokens=n, temperature=0))]


class HeldBlocks:
    """Records, on the engine thread, the blocks each planned sequence holds during
    its step (before the step gives back what fell out of the window)."""

    def __init__(self, engine: PagedEngine) -> None:
        self.decode = 0  # most held by a sequence in a one-token step
        self.prefill = 0  # most held by a sequence in a prefill chunk
        self.pool = 0  # most referenced blocks in the whole pool
        self.holes = 0  # most leading holes a sequence's table had
        sch = engine.scheduler
        after_step = sch.after_step

        def spy(plan: list[tuple[Sequence, int]]) -> None:
            for seq, n in plan:
                live = seq.blocks[seq.num_released :]
                assert HOLE not in live and seq.blocks[: seq.num_released] == [HOLE] * seq.num_released
                if n == 1:
                    self.decode = max(self.decode, len(live))
                else:
                    self.prefill = max(self.prefill, len(live))
                self.holes = max(self.holes, seq.num_released)
            self.pool = max(self.pool, sch.blocks.used)
            after_step(plan)

        sch.after_step = spy  # type: ignore[method-assign]


async def test_a_windowed_mistral_generates_far_past_its_window_holding_one_window_of_blocks() -> None:
    model, ref, prompts = build("Mistral (windowed)")
    n = 96
    expected = [reference(ref, p, n) for p in prompts]
    engine = engine_for(model, max_batch_size=4)
    held = HeldBlocks(engine)
    try:
        assert engine.kv_window == TINY_WINDOW and engine.stats()["kv_cache"]["window"] == TINY_WINDOW
        alone = await greedy(engine, prompts[0], n)
        assert alone == expected[0]
        # a decode at p reads p-7..p: at most 3 blocks of 4, instead of one per 4 tokens of the sequence
        assert held.decode == engine.block_manager.window_blocks == 3
        assert held.prefill <= -(-(TINY_WINDOW - 1 + 16 + BS - 1) // BS)  # a window and a 16-token chunk
        assert held.holes >= (len(prompts[0]) + n - TINY_WINDOW) // BS - 1
        together = await asyncio.gather(*(greedy(engine, p, n) for p in prompts))
        assert list(together) == expected
        assert held.decode == 3 and held.pool <= 3 * 7
        assert engine.block_manager.used == 0
    finally:
        engine.close()
    print(f"blocks held by a {len(prompts[0]) + n}-token sequence: {held.decode} decoding, {held.prefill} prefilling")


async def test_a_pool_smaller_than_the_context_serves_it_whole() -> None:
    model, ref, prompts = build("Mistral (windowed)")
    prompt, n = prompts[1], 80
    assert len(prompt) > 24
    expected = reference(ref, prompt, n)
    engine = engine_for(model, kv_cache_blocks=6)  # 24 tokens: not even the prompt
    try:
        assert engine.capacity_tokens == 24
        assert engine.max_sequence_tokens == 256  # the model's context: a window fits in the pool
        got = await greedy(engine, prompt, n)
        assert got == expected
        assert engine.stats()["preemptions"] == 0
        # two together take turns (one preempts the other) and both stay exact
        both = await asyncio.gather(greedy(engine, prompts[0], 40), greedy(engine, prompt, 40))
        assert list(both) == [reference(ref, prompts[0], 40), expected[:40]]
    finally:
        engine.close()
    # a pool smaller than a window's blocks serves only what it holds
    smaller = engine_for(copy.deepcopy(ref), kv_cache_blocks=2)
    try:
        assert smaller.max_sequence_tokens == smaller.capacity_tokens == 8
    finally:
        smaller.close()
    exact = engine_for(copy.deepcopy(ref), kv_cache_blocks=3)
    try:
        assert exact.max_sequence_tokens == 256
        assert await greedy(exact, prompt, 30) == expected[:30]
    finally:
        exact.close()


async def test_without_the_prefix_cache_given_back_blocks_are_free_at_once() -> None:
    model, ref, prompts = build("Mistral (windowed)")
    engine = engine_for(model, kv_cache_blocks=3, prefix_caching=False)  # exactly a window's blocks
    try:
        assert engine.max_sequence_tokens == 256
        got = await asyncio.gather(*(greedy(engine, p, 30) for p in prompts[:2]))
        assert list(got) == [reference(ref, p, 30) for p in prompts[:2]]
        stats = engine.stats()["kv_cache"]
        assert (stats["used_blocks"], stats["cached_blocks"], stats["free_blocks"]) == (0, 0, 3)
    finally:
        engine.close()


async def test_prefix_cache_hits_across_the_window_stay_exact_after_the_head_is_evicted() -> None:
    model, ref, prompts = build("Mistral (windowed)")
    first, n = prompts[0], 24
    expected = reference(ref, first, n)
    engine = engine_for(model, kv_cache_blocks=12, max_batch_size=2)  # fewer than the conversation's blocks
    held = HeldBlocks(engine)
    try:
        assert await greedy(engine, first, n) == expected
        assert engine.stats()["kv_cache"]["evictions"] > 0  # the conversation's head is gone
        # the next turn: the first turn's blocks, past the window, are prefix-cache hits;
        # its new tokens are prefilled in 16-token chunks that start past the window
        turn = first + expected + prompts[1][-20:]
        want = reference(ref, turn, n)
        before = engine.stats()["prefix_cache"]["hit_blocks"]
        assert await greedy(engine, turn, n) == want
        hits = engine.stats()["prefix_cache"]["hit_blocks"] - before
        assert hits >= (len(first) + n) // BS - 1, hits
        assert held.holes > 0
        # the same turn again: hits up to its last block, which the window's blocks serve
        before = engine.stats()["prefix_cache"]["hit_blocks"]
        assert await greedy(engine, turn, n) == want
        assert engine.stats()["prefix_cache"]["hit_blocks"] - before == (len(turn) - 1) // BS
    finally:
        engine.close()


async def test_qwen2_windowed_on_every_layer_gives_blocks_back_and_on_some_layers_keeps_them() -> None:
    model, ref, prompts = build("Qwen2", max_window_layers=0)
    n = 40
    expected = reference(ref, prompts[0], n)
    engine = engine_for(model)
    held = HeldBlocks(engine)
    try:
        assert engine.kv_window == TINY_WINDOW
        assert await greedy(engine, prompts[0], n) == expected
        assert held.decode == 3
    finally:
        engine.close()
    mixed, _ref, _prompts = build("Qwen2")  # layer 0 attends globally
    engine = engine_for(mixed, kv_cache_blocks=8)
    try:
        assert engine.kv_window is None and engine.max_sequence_tokens == engine.capacity_tokens == 32
    finally:
        engine.close()


async def test_gemma2_with_global_layers_keeps_every_block() -> None:
    model, ref, prompts = build("Gemma 2")
    n = 40
    expected = reference(ref, prompts[0], n)
    engine = engine_for(model, kv_cache_blocks=64)
    held = HeldBlocks(engine)
    try:
        assert engine.kv_window is None and engine.stats()["kv_cache"]["window"] is None
        assert engine.max_sequence_tokens == engine.capacity_tokens == 256
        assert await greedy(engine, prompts[0], n) == expected
        assert held.holes == 0
        assert held.decode == -(-(len(prompts[0]) + n - 1) // BS)  # one per 4 tokens of the sequence
    finally:
        engine.close()


@pytest.mark.slow  # a real server on a socket
async def test_the_server_reports_and_serves_the_whole_context_of_a_windowed_model(tmp_path: Path) -> None:
    import openai

    path = tmp_path / "mistral"
    build_tiny_family("Mistral (windowed)", seed=1, path=path)
    settings = {
        "cache_dir": str(tmp_path),
        "model": [f"tiny={path}"],
        "dtype": "float32",
        "transformers_engine": "paged",
        "transformers_kv_block_size": BS,
        "transformers_kv_cache_blocks": 4,  # 16 tokens of cache
    }
    app = make_app(["transformers"], settings=settings)
    with ServedApp(app) as base_url:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0)
        messages: Any = [{"role": "user", "content": TEXTS[0]}]
        await client.chat.completions.create(model="tiny", messages=messages, max_tokens=1)  # loads it
        engine = app.state.flexserv.registry.model_if_loaded("tiny").engine
        engine.eos_token_ids = frozenset()  # a random model may end early: run the whole length
        chat = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=60, temperature=0)
        assert chat.usage is not None and chat.usage.prompt_tokens + chat.usage.completion_tokens > 16
        assert chat.usage.completion_tokens == 60 and chat.choices[0].finish_reason == "length"
        async with httpx.AsyncClient(base_url=base_url) as http:
            listed = (await http.get("/v1/models")).json()["data"]
        assert [m["max_model_len"] for m in listed if m["id"] == "tiny"] == [256]
        await client.close()
