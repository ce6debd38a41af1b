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


RETURNS = (
    "Our return policy is simple. You may return any unused item within thirty days of delivery for a full "
    "refund. Items must be in their original packaging and include the receipt. Opened software, gift cards and "
    "personalised goods cannot be returned. To start a return, sign in to your account, choose the order, and "
    "print the prepaid label. Refunds reach your card within five business days after the warehouse receives "
    "the parcel."
)
MEETING = (
    "Meeting notes, 14 March. Present: Ana, Bilal, Chen and Dora. Ana reported that the new checkout page raised "
    "conversions by four percent in the first week. Bilal warned that the payment provider will change its API in "
    "May and asked for two engineers to migrate. Chen agreed to lead the migration with Dora. The team decided to "
    "freeze new features on the checkout page until the migration is finished. Next meeting: 28 March."
)
# Copy requests on which a layout that was not batch-invariant in every respect (torch's
# SDPA on two threads) changed tokens: at the 79th and the 94th.
GROUNDED = [
    f"Here is a text:\n\n{RETURNS}\n\nCopy the text above verbatim, then stop.",
    f"Here is a text:\n\n{MEETING}\n\nRepeat the passage above exactly, word for word.",
]


async def test_with_int8_layers_speculation_keeps_every_token(smollm2_int8) -> None:
    """int8 activations round float noise into token changes past ties, so on int8 rows
    the engine lays decode attention out batch-invariant and verifies a draft's rows as
    decode rows: greedy tokens with drafts are those without, alone and batched, and
    a request's tokens do not depend on what runs beside it."""
    model, tok = smollm2_int8
    prompts = [chat_prompt(tok, text) for text in (COPY, *GROUNDED, CHAT)]
    runs = {}
    for draft in (0, 32):
        engine = make_engine(model, tok, speculative_draft_tokens=draft)
        try:
            solo = [await generate(engine, p, 96) for p in prompts]
            together = await asyncio.gather(*(generate(engine, p, 96) for p in prompts))
            runs[draft] = (solo, list(together), engine.stats())
        finally:
            engine.close()
    (plain_solo, plain_together, _), (spec_solo, spec_together, stats) = runs[0], runs[32]
    assert plain_together == plain_solo  # batch-invariant without drafts
    assert spec_solo == plain_solo and spec_together == plain_solo  # exact with them
    assert stats["speculative"]["accepted_tokens"] > 100
    assert tok.decode(spec_solo[0][:12]) in PASSAGE
