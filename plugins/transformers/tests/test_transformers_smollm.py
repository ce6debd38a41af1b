"""The embedded SmolLM2-135M-Instruct through the transformers backend (real weights, offline)."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import pytest
import torch
from flexserv_transformers.testing import tie_tolerance

from flexserv_core import SamplingParams

pytestmark = pytest.mark.slow

CHATS = [
    [{"role": "user", "content": "What is the capital of France? Answer with one word."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List three colours."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
]


def reference_greedy(model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    return reference_generate(model, prompt_ids, max_new_tokens)


@pytest.mark.parametrize("chat", CHATS, ids=["france", "colours", "haiku"])
async def test_greedy_parity_with_generate(smollm, collect, chat):
    ids = smollm.render_chat(chat, {})
    deltas = await collect(smollm, ids, max_tokens=24, temperature=0)
    assert [d.token_id for d in deltas] == reference_greedy(smollm, ids, 24)


def assert_greedy_parity_or_tie(model, prompt_ids: list[int], got: list[int], reference=None) -> None:
    """``got`` equals ``generate``'s greedy tokens up to its first flip, and that flip
    is a tie within the dtype's rounding: ``generate``'s own top-2 logits at that
    step lie within :func:`tie_tolerance`. The tokens after a flip legitimately differ.

    bfloat16 logits are rounded to 8 significant bits, so exact top-2 ties are common
    (SmolLM2 on "List three colours." has three in 16 steps), and which token wins
    depends on the last bit of rounding in the matmul and attention kernels, which
    differ between CPU kinds (AVX512-BF16, AMX) and between the paged and the
    cached-SDPA attention paths.

    ``reference`` (a loaded text model whose engine runs transformers' model) gives
    ``generate`` when ``model`` runs FlexServ's own forward, which has none.
    """
    hf = (reference or model).engine_model.model
    with torch.inference_mode():
        out = hf.generate(
            torch.tensor([prompt_ids], device=hf.device),
            do_sample=False,
            max_new_tokens=len(got),
            pad_token_id=min(model.engine_model.eos_token_ids),
            output_logits=True,
            return_dict_in_generate=True,
        )
    expected = out.sequences[0, len(prompt_ids) :].tolist()
    if expected == got:
        return
    i = next((k for k, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    assert i is not None, f"lengths differ without a divergence: {expected} vs {got}"
    logits = out.logits[i][0].float()
    top = float(logits[expected[i]])
    gap = top - float(logits[got[i]])
    tolerance = tie_tolerance(top, model.dtype)
    assert gap <= tolerance, (
        f"{model.dtype} outputs diverge at token {i} ({expected[i]} by generate, {got[i]} by the engine) "
        f"with a logit gap of {gap} in generate's step (tie tolerance {tolerance}): {expected} vs {got}"
    )


async def test_greedy_parity_bfloat16(smollm_spec, flexserv_test_cache, load_model, collect):
    """The default CPU dtype on AMX machines; parity holds within one dtype, up to bf16 ties.
    The paged engine runs FlexServ's own Llama forward (the default); ``generate`` runs
    transformers' model on the same weights."""
    from flexserv_transformers.native.llama import LlamaForCausalLM

    model = load_model(smollm_spec, flexserv_test_cache, dtype="bfloat16")
    reference = load_model(smollm_spec, flexserv_test_cache, dtype="bfloat16", transformers_engine="simple")
    try:
        assert model.dtype == "bfloat16"
        assert isinstance(model.engine_model.model, LlamaForCausalLM)
        deltas = await collect(model, model.render_chat(CHATS[0], {}), max_tokens=16, temperature=0)
        assert "Paris" in "".join(d.text for d in deltas)
        for chat in CHATS[:2]:
            ids = model.render_chat(chat, {})
            deltas = await collect(model, ids, max_tokens=16, temperature=0)
            assert_greedy_parity_or_tie(model, ids, [d.token_id for d in deltas], reference)
    finally:
        model.unload()
        reference.unload()


def test_chat_template_rendering(smollm):
    messages = [{"role": "user", "content": "Hi there"}]
    ids = smollm.render_chat(messages, {})
    text = smollm.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's template adds its default system prompt
    assert "<|im_start|>user\nHi there<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert ids == list(
        smollm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    )


async def test_capital_of_france(smollm, collect):
    ids = smollm.render_chat(CHATS[0], {})
    deltas = await collect(smollm, ids, max_tokens=16, temperature=0)
    text = "".join(d.text for d in deltas)
    assert "Paris" in text
    assert text == smollm.decode([d.token_id for d in deltas])


async def test_stops_at_eos(smollm, collect):
    ids = smollm.render_chat(CHATS[0], {})
    deltas = await collect(smollm, ids, max_tokens=64, temperature=0)
    last = deltas[-1]
    assert last.finish_reason == "stop" and last.token_id in smollm.eos_token_ids and last.text == ""
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert len(deltas) < 64


async def test_stops_at_max_tokens(smollm, collect):
    ids = smollm.render_chat(CHATS[2], {})
    deltas = await collect(smollm, ids, max_tokens=5, temperature=0)
    assert len(deltas) == 5 and deltas[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])


async def test_raw_completion_prompt(smollm, collect):
    ids = smollm.encode("The capital of France is")
    assert smollm.decode(ids) == "The capital of France is"
    deltas = await collect(smollm, ids, max_tokens=4, temperature=0)
    assert "Paris" in "".join(d.text for d in deltas)


async def test_seed_reproducible_and_seeds_differ(smollm, collect):
    ids = smollm.render_chat(CHATS[2], {})

    async def run(seed: int) -> list[int]:
        return [d.token_id for d in await collect(smollm, ids, max_tokens=24, temperature=1.0, seed=seed)]

    first, again, other = await run(1234), await run(1234), await run(99)
    assert first == again
    assert first != other


async def test_penalties_change_output(smollm, collect):
    ids = smollm.encode("one one one one one one one one one one")
    plain = [d.token_id for d in await collect(smollm, ids, max_tokens=12, temperature=0)]
    freq = [d.token_id for d in await collect(smollm, ids, max_tokens=12, temperature=0, frequency_penalty=2.0)]
    pres = [d.token_id for d in await collect(smollm, ids, max_tokens=12, temperature=0, presence_penalty=2.0)]
    assert plain != freq and plain != pres
    # a frequency penalty of 2 per use makes the most repeated token of the plain run rarer
    most = max(set(plain), key=plain.count)
    assert freq.count(most) < plain.count(most)


async def test_logprobs_valid_and_consistent(smollm, collect):
    ids = smollm.render_chat(CHATS[1], {})
    deltas = await collect(smollm, ids, max_tokens=10, temperature=0, logprobs=True, top_logprobs=5)
    generated = [d.token_id for d in deltas]
    hf = smollm.engine_model.model
    with torch.inference_mode():  # the model's own distribution at each generated position
        logits = hf(torch.tensor([ids + generated], device=hf.device)).logits[0, len(ids) - 1 : -1].float()
    expected = logits.log_softmax(-1)
    for i, d in enumerate(deltas):
        assert d.logprob is not None and d.logprob <= 0.0
        values = [t.logprob for t in d.top_logprobs]
        assert len(values) == 5 and values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert d.top_logprobs[0].token_id == d.token_id  # greedy: the chosen token is the most likely
        assert d.logprob == pytest.approx(values[0])
        assert d.logprob == pytest.approx(expected[i, d.token_id].item(), abs=2e-3)
        assert d.top_logprobs[0].token == smollm.tokenizer.decode([d.token_id])


async def test_logprobs_of_sampled_tokens(smollm, collect):
    ids = smollm.render_chat(CHATS[2], {})
    deltas = await collect(smollm, ids, max_tokens=12, temperature=0.8, seed=7, logprobs=True, top_logprobs=3)
    for d in deltas:
        top = {t.token_id: t.logprob for t in d.top_logprobs}
        assert d.logprob <= 0.0
        if d.token_id in top:
            assert d.logprob == pytest.approx(top[d.token_id])
        else:
            assert d.logprob <= min(top.values()) + 1e-6


async def test_no_logprobs_unless_asked(smollm, collect):
    deltas = await collect(smollm, smollm.encode("Hello"), max_tokens=3, temperature=0)
    assert all(d.logprob is None and d.top_logprobs is None for d in deltas)


async def test_closing_the_stream_cancels_within_one_step(smollm):
    engine = smollm.engine
    ids = smollm.render_chat(CHATS[2], {})
    before = engine.stats()
    async with aclosing(smollm.generate(ids, SamplingParams(max_tokens=200, temperature=0))) as stream:
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
    closed_at = engine.stats()["generated_tokens"]
    deadline = time.monotonic() + 10
    while engine.stats()["active_sequences"] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    after = engine.stats()
    assert after["active_sequences"] == 0 and after["waiting_sequences"] == 0
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["generated_tokens"] - closed_at <= 1  # at most the step that was in flight
    await asyncio.sleep(0.3)
    assert engine.stats()["generated_tokens"] == after["generated_tokens"]


async def test_consumer_task_cancelled(smollm):
    """A cancelled request task (client disconnect) frees its sequence too."""
    engine = smollm.engine
    ids = smollm.render_chat(CHATS[2], {})
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in smollm.generate(ids, SamplingParams(max_tokens=200, temperature=0)):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 10
    while engine.stats()["active_sequences"] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert engine.stats()["active_sequences"] == 0


async def test_concurrent_streams_interleave(smollm, collect):
    """Two requests at once both finish with their own greedy output."""
    a, b = smollm.render_chat(CHATS[0], {}), smollm.render_chat(CHATS[1], {})
    alone_a = [d.token_id for d in await collect(smollm, a, max_tokens=8, temperature=0)]
    alone_b = [d.token_id for d in await collect(smollm, b, max_tokens=8, temperature=0)]
    both = await asyncio.gather(
        collect(smollm, a, max_tokens=8, temperature=0), collect(smollm, b, max_tokens=8, temperature=0)
    )
    assert [d.token_id for d in both[0]] == alone_a
    assert [d.token_id for d in both[1]] == alone_b


def test_limits(smollm):
    assert smollm.limits.context_length == 8192 and smollm.engine.stats()["engine"] == "simple"
    assert smollm.limits.vocab_size == 49152


def reference_generate(model, prompt_ids: list[int], max_new_tokens: int, **kwargs) -> list[int]:
    hf = model.engine_model.model
    with torch.inference_mode():
        out = hf.generate(
            torch.tensor([prompt_ids], device=hf.device),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=min(model.eos_token_ids),
            **kwargs,
        )
    return out[0, len(prompt_ids) :].tolist()


async def test_simple_engine_repetition_penalty_and_min_tokens_match_generate(smollm, collect):
    """transformers' own repetition penalty (prompt and output) and min_new_tokens
    (no EOS before) mean what vLLM's repetition_penalty and min_tokens do."""
    loop = smollm.encode("apple, apple, apple, apple, apple, apple,")
    penalised = await collect(smollm, loop, max_tokens=12, temperature=0, repetition_penalty=1.5)
    assert [d.token_id for d in penalised] == reference_generate(smollm, loop, 12, repetition_penalty=1.5)
    question = smollm.render_chat(CHATS[0], {})
    short = await collect(smollm, question, max_tokens=40, temperature=0)
    assert short[-1].finish_reason == "stop" and len(short) < 10
    held = await collect(smollm, question, max_tokens=40, temperature=0, min_tokens=15)
    reference = reference_generate(smollm, question, 40, min_new_tokens=15)
    assert [d.token_id for d in held] == reference and len(held) >= 15
    forever = await collect(smollm, question, max_tokens=20, temperature=0, ignore_eos=True)
    assert len(forever) == 20 and forever[-1].finish_reason == "length"
    assert not set(smollm.eos_token_ids) & {d.token_id for d in forever}
