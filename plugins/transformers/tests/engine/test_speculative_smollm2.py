"""Prompt-lookup speculation with the real n-gram lookup on the real SmolLM2: a
request that copies a passage of its prompt drafts and accepts most of its tokens
in far fewer steps, a normal chat request is unchanged, both alone and batched
together, and greedy output is the output without speculation."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import assert_same_or_tie, chat_prompt, make_engine

from flexserv_core import SamplingParams

pytestmark = pytest.mark.slow  # loads the real SmolLM2-135M

PASSAGE = (
    "The lighthouse at Point Reyes was built in 1870. Its first-order Fresnel lens, made in France, "
    "has 1,032 pieces of glass and could be seen twenty-four miles out to sea. Keepers climbed 300 steps "
    "down the cliff every evening to light the lamp, and fog often hid the beam for weeks at a time."
)
COPY = f"Here is a passage:\n\n{PASSAGE}\n\nRepeat the passage above exactly, word for word."
CHAT = "Write one sentence about honey bees."


async def generate(engine, prompt: list[int], n: int) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0)
    return [t.token_id async for t in engine.generate(prompt, params)]


async def test_copying_is_drafted_from_the_prompt_and_output_is_unchanged(smollm2) -> None:
    model, tok = smollm2
    copy, chat = chat_prompt(tok, COPY), chat_prompt(tok, CHAT)
    runs = {}
    for draft in (0, 8):
        engine = make_engine(model, tok, speculative_draft_tokens=draft)
        try:
            solo = [await generate(engine, p, 48) for p in (copy, chat)]
            steps = engine.stats()["steps"]
            together = await asyncio.gather(generate(engine, copy, 48), generate(engine, chat, 48))
            runs[draft] = (solo, together, steps, engine.stats())
        finally:
            engine.close()
    plain, spec = runs[0], runs[8]
    for prompt, a, b, c in zip((copy, chat), plain[0], spec[0], spec[1], strict=True):
        assert_same_or_tie(model, prompt, a, b)
        assert_same_or_tie(model, prompt, a, c)
    assert tok.decode(spec[0][0][:20]) in PASSAGE  # it does copy
    drafted = spec[3]["speculative"]["drafted_tokens"]
    accepted = spec[3]["speculative"]["accepted_tokens"]
    assert accepted > 0.7 * drafted > 0
    assert spec[2] < 0.6 * plain[2]  # far fewer forward passes for the same tokens


@pytest.fixture(scope="module")
def smollm2_int8(smollm2):
    """The same weights in float32 with int8 layers (``--transformers-quantization int8``
    in float32): a copy, so the float32 model stays as the other tests share it."""
    import copy

    import torch
    from flexserv_transformers.int8 import quantize_linears

    model, tok = smollm2
    quantized = copy.deepcopy(model)
    quantize_linears(quantized, torch.float32)
    return quantized, tok


async def test_with_int8_layers_the_engine_does_not_speculate(smollm2_int8, caplog) -> None:
    """int8 activations round the float noise of a draft's other attention path into token
    changes past ties, so an engine on int8 rows never drafts, and says so."""
    model, tok = smollm2_int8
    prompt = chat_prompt(tok, COPY)
    with caplog.at_level("WARNING"):
        engine = make_engine(model, tok, speculative_draft_tokens=16)
    try:
        out = await generate(engine, prompt, 24)
        stats = engine.stats()
    finally:
        engine.close()
    assert stats["speculative"]["drafted_tokens"] == 0 and stats["steps"] >= 24
    assert "speculative decoding off" in caplog.text
    assert tok.decode(out[:12]) in PASSAGE  # it still copies, one token a step
