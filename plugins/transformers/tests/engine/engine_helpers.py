"""Shared helpers of the engine tests."""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings
from flexserv_transformers.testing import TIE_TOLERANCE

from flexserv_core import SamplingParams

TOPICS = [
    "the moon", "volcanoes", "a red bicycle", "bread baking", "the ocean", "chess openings", "honey bees",
    "winter in Oslo", "jazz piano", "a lost umbrella", "solar panels", "the river Nile", "paper planes",
    "black holes", "tea ceremonies", "a rainy Tuesday", "mountain goats", "old lighthouses", "a jazz drummer",
    "garden snails",
]  # fmt: skip


def chat_prompt(tokenizer: Any, user: str, system: str | None = None) -> list[int]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def make_engine(model: Any, tokenizer: Any, **settings: Any) -> PagedEngine:
    """An engine with ``EngineSettings`` given without their ``transformers_`` prefix."""
    prefixed = {f"transformers_{name}": value for name, value in settings.items()}
    return PagedEngine(model, settings=EngineSettings(**prefixed), eos_token_ids={tokenizer.eos_token_id})


async def greedy(engine: PagedEngine, prompt: list[int], max_tokens: int) -> list[int]:
    return [t.token_id async for t in engine.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0))]


async def greedy_all(engine: PagedEngine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    return list(await asyncio.gather(*(greedy(engine, p, max_tokens) for p in prompts)))


def top2_gap(model: Any, ids: list[int]) -> float:
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def assert_same_or_tie(model: Any, prompt: list[int], expected: list[int], got: list[int]) -> None:
    """Token-for-token equality, except a flip where the reference's top-2 logits
    were within :data:`TIE_TOLERANCE` (then the rest legitimately differs)."""
    if expected == got:
        return
    i = next((k for k, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    assert i < min(len(expected), len(got)), f"lengths differ without a divergence: {expected} vs {got}"
    gap = top2_gap(model, prompt + expected[:i])
    assert gap < TIE_TOLERANCE, f"outputs diverge at token {i} with a top-2 logit gap of {gap}: {expected} vs {got}"
