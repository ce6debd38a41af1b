"""The architecture matrix: every family of ``flexserv_transformers.families`` served
through the real paged engine and compared token for token with ``model.generate``.

Each family is a tiny seeded checkpoint built from transformers' config class with
the tiny byte-level tokenizer. The engine runs with 4-token blocks and 16-token
steps, so the prompts (20-40 tokens) are prefilled in chunks, and windowed families
(window of 8) cross their window inside a chunk, between chunks and while decoding.
Each family is checked:

* one prompt at a time, then all together (one batch), against ``generate`` on a
  separate copy of the model with transformers' own attention, no EOS so every
  sequence runs its full length;
* with a prompt that extends an earlier one: its leading blocks are prefix-cache
  hits, far past the window;
* in float32 exactly, and in bfloat16 up to ties (a divergence where the reference's
  top-2 logits were within two bfloat16 steps of the top logit), the gap printed.

The simple engine is held to the same references in float32. Families the paged
engine cannot serve must be refused at load, naming the simple engine, and the
simple engine must serve them exactly, alone and several at once.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import torch
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings
from flexserv_transformers.engine_api import EngineModel
from flexserv_transformers.families import FAMILIES, TINY_WINDOW, Family
from flexserv_transformers.simple_engine import SimpleEngine
from flexserv_transformers.testing import build_tiny_family, tie_tolerance

from flexserv_core import ModelLoadError, SamplingParams

pytestmark = pytest.mark.slow  # builds and serves 19 tiny models in two dtypes

NEW_TOKENS = 14
TEXTS = [
    "Write one sentence about the moon and the quick brown fox.",
    "hello there! how can I help you today? Paris is the capital of France",
    "def main():\n    print('hello world')",
]


def prompts_of(tokenizer: Any) -> list[list[int]]:
    out = []
    for text in TEXTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        out.append(list(ids if isinstance(ids, list) else ids["input_ids"]))
    assert all(len(p) > 2 * TINY_WINDOW for p in out), "prompts must cross the window"
    return out


def reference(model: Any, prompt: list[int], n: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=0, eos_token_id=None
        )
    return out[0, len(prompt) :].tolist()


def top2_gap(model: Any, ids: list[int]) -> tuple[float, float]:
    """The reference's top logit and its lead over the second, after ``ids``."""
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0]), float(top[0] - top[1])


def compare(ref: Any, prompt: list[int], expected: list[int], got: list[int], dtype: str) -> str:
    """``""`` when equal; else a description of a tie flip (bf16 only), failing otherwise."""
    assert len(got) == len(expected), f"{len(got)} tokens, expected {len(expected)}"
    if got == expected:
        return ""
    i = next(k for k, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    top, gap = top2_gap(ref, prompt + expected[:i])
    # bfloat16: two steps of the top logit (both sides round it through every layer)
    allowed = 2 * tie_tolerance(top, dtype) if dtype != "float32" else 0.0
    assert gap <= allowed, (
        f"diverges at token {i} (position {len(prompt) + i}) with a top-2 gap of {gap:.3g} "
        f"(allowed {allowed:.3g} in {dtype}): expected {expected}, got {got}"
    )
    return f"tie at token {i}: gap {gap:.3g} <= {allowed:.3g}"


def engine_for(model: Any, **settings: Any) -> PagedEngine:
    prefixed = {f"transformers_{k}": v for k, v in settings.items()}
    return PagedEngine(model, settings=EngineSettings(**prefixed), eos_token_ids=(), name="tiny")


def simple_engine(model: Any, tok: Any) -> SimpleEngine:
    return SimpleEngine(
        EngineModel(
            model=model, device=model.device, eos_token_ids=frozenset(), context_length=256, vocab_size=len(tok)
        )
    )


async def greedy(engine: Any, prompt: list[int], n: int = NEW_TOKENS) -> list[int]:
    return [t.token_id async for t in engine.generate(prompt, SamplingParams(max_tokens=n, temperature=0))]


def build(fam: Family, dtype: torch.dtype) -> tuple[Any, Any, Any]:
    """``(served model, reference model, tokenizer)``: two copies of the same weights."""
    model, tokenizer = build_tiny_family(fam.name, seed=1)
    model = model.to(dtype)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, copy.deepcopy(model), tokenizer


SERVED = [f for f in FAMILIES if f.paged]
REFUSED = [f for f in FAMILIES if not f.paged]


def without(ref: Any, feature: str) -> Any:
    """A copy of ``ref`` with its sliding window (``"window"``), attention-logit
    soft-capping (``"softcap"``) or attention sinks (``"sinks"``) switched off."""
    plain = copy.deepcopy(ref)
    if feature == "sinks":  # a sink logit of -inf takes no attention weight
        for module in plain.modules():
            if isinstance(getattr(module, "sinks", None), torch.nn.Parameter):
                module.sinks.data.fill_(float("-inf"))
        return plain
    attr = {"window": "sliding_window", "softcap": "attn_logit_softcapping"}[feature]
    off = 1 << 20 if feature == "window" else None  # masks read the config's window as a number
    setattr(plain.config, attr, off)
    for module in plain.modules():
        if getattr(module, attr, None) is not None:
            setattr(module, attr, off)
    return plain


def features(fam: Family) -> list[str]:
    on = {
        "window": fam.windowed,
        "softcap": "attn_logit_softcapping" in fam.config,
        "sinks": "sinks" in fam.attention,
    }
    return [feature for feature, used in on.items() if used]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("fam", SERVED, ids=[f.name for f in SERVED])
async def test_paged_engine_serves_the_family_like_generate(fam: Family, dtype: str) -> None:
    model, ref, tok = build(fam, getattr(torch, dtype))
    prompts = prompts_of(tok)
    expected = [reference(ref, p, NEW_TOKENS) for p in prompts]
    assert all(len(set(e)) > 3 for e in expected), (
        f"degenerate reference outputs, the matrix would miss errors: {expected}"
    )
    if dtype == "float32":  # the matrix can see each feature: the reference without it differs
        for feature in features(fam):
            plain = without(ref, feature)
            assert [reference(plain, p, NEW_TOKENS) for p in prompts] != expected, f"{feature} changes nothing"
    # The first prompt, its completion and more: a prefix-cache hit far past the window.
    longer = prompts[0] + expected[0] + prompts[1][-6:]
    expected.append(reference(ref, longer, NEW_TOKENS))
    prompts.append(longer)
    engine = engine_for(model, kv_block_size=4, max_batch_tokens=16, max_batch_size=8)
    try:
        alone = [await greedy(engine, p) for p in prompts]
        assert engine.stats()["prefix_cache"]["hit_blocks"] >= (len(prompts[0]) + NEW_TOKENS) // 4 - 1
        together = list(await asyncio.gather(*(greedy(engine, p) for p in prompts)))
    finally:
        engine.close()
    if dtype == "float32":
        # generate on the served model (switched to the paged attention, which falls back
        # to a plain attention outside the engine: SDPA, or the eager formula where SDPA
        # cannot soft-cap or sink) still matches
        assert reference(model, prompts[0], NEW_TOKENS) == expected[0]
        # the simple engine (transformers' attention, its own cache loop) too
        simple = simple_engine(ref, tok)
        try:
            assert [await greedy(simple, p) for p in prompts] == expected
        finally:
            simple.close()
    notes = [
        note
        for runs in (alone, together)
        for p, e, g in zip(prompts, expected, runs, strict=True)
        if (note := compare(ref, p, e, g, dtype))
    ]
    print(f"{fam.name} {dtype}: {'exact' if not notes else '; '.join(notes)}")


@pytest.mark.parametrize("fam", REFUSED, ids=[f.name for f in REFUSED])
async def test_the_paged_engine_refuses_the_family_and_the_simple_engine_serves_it(fam: Family) -> None:
    model, ref, tok = build(fam, torch.float32)
    with pytest.raises(ModelLoadError) as refused:
        engine_for(model, kv_block_size=4)
    message = refused.value.message
    assert model.__class__.__name__ in message and "--transformers-engine simple" in message, message
    simple = simple_engine(model, tok)
    try:
        prompts = prompts_of(tok)
        for p in prompts:
            assert await greedy(simple, p) == reference(ref, p, NEW_TOKENS)
        together = await asyncio.gather(*(greedy(simple, p) for p in prompts))
        assert together == [reference(ref, p, NEW_TOKENS) for p in prompts]
    finally:
        simple.close()
