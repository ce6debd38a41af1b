"""Prompt-lookup speculation in the paged engine, on a tiny seeded Llama.

A random model seldom repeats itself, so most tests replace the n-gram lookup by
an *oracle* that drafts from the known greedy output and spoils one token of
the draft at a varying place: every step then verifies a draft of which a known
part is accepted, across 4-token block boundaries, and the output must be token
for token the output without speculation, the blocks of rejected positions must
go back, and the prefix cache must hold only K/V of kept tokens.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import random
import re
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from flexserv_constraints import LLGuidanceCompiler
from flexserv_transformers import sampling as sampling_module
from flexserv_transformers.engine import engine as engine_module
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings
from flexserv_transformers.testing import build_tiny_family, build_tiny_llama

from flexserv_core import Constraint, ModelKind, ModelSpec, SamplingParams, prepare_params

BS = 4
TEXTS = [
    "The quick brown fox jumps over the lazy dog, and the dog sleeps on.",
    "def main():\n    print('hello world')\n    return 0",
    "Paris is the capital of France; Rome is the capital of Italy.",
]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, list[list[int]], int]:
    model, tok = build_tiny_family("Llama", seed=1)
    prompts = [list(tok(t)["input_ids"]) for t in TEXTS]
    return model, prompts, len(tok)


def make(model: Any, draft: int = 8, **settings: Any) -> PagedEngine:
    s = EngineSettings(
        transformers_kv_block_size=BS,
        transformers_speculative_draft_tokens=draft,
        **{f"transformers_{k}": v for k, v in settings.items()},
    )
    return PagedEngine(model, settings=s, eos_token_ids=())


async def run(engine: PagedEngine, prompt: list[int], params: SamplingParams) -> list[Any]:
    return await drain(engine.generate(prompt, params))


async def drain(stream: AsyncIterator[Any]) -> list[Any]:
    return [t async for t in stream]


def greedy(n: int, **extra: Any) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, **extra)


class Oracle:
    """Drafts the known continuation of each known prompt, with the token at
    ``(position + salt) % (k + 1)`` of a ``k``-token draft changed (none when that is
    ``k``: the whole draft is right); nothing for an unknown prompt."""

    def __init__(self, refs: list[tuple[list[int], list[int]]], vocab: int, salt: int = 0) -> None:
        self.refs, self.vocab, self.salt = refs, vocab, salt
        self.calls = 0

    def __call__(self, tokens: list[int], k: int) -> list[int]:
        for prompt, out in self.refs:
            done = len(tokens) - len(prompt)
            if done >= 0 and tokens[: len(prompt)] == prompt and tokens[len(prompt) :] == out[:done]:
                self.calls += 1
                draft = list(out[done : done + k])
                j = (done + self.salt) % (k + 1)
                if j < len(draft):
                    draft[j] = (draft[j] + 1) % self.vocab
                return draft
        return []


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(refs: list[tuple[list[int], list[int]]], vocab: int, salt: int = 0) -> Oracle:
        drafter = Oracle(refs, vocab, salt)
        monkeypatch.setattr(engine_module, "propose", drafter)
        return drafter

    yield install


async def references(model: Any, prompts: list[list[int]], n: int) -> list[list[int]]:
    engine = make(model, draft=0)
    try:
        return [[t.token_id for t in await run(engine, p, greedy(n))] for p in prompts]
    finally:
        engine.close()


@pytest.mark.parametrize("salt", [0, 1, 3])
async def test_greedy_output_is_unchanged_alone_and_batched_with_plain_sequences(tiny, oracle, salt) -> None:
    model, prompts, vocab = tiny
    n = 40
    refs = await references(model, prompts, n)
    # the third prompt is unknown to the oracle: it never drafts, batched with two that do
    drafter = oracle(list(zip(prompts[:2], refs[:2], strict=True)), vocab, salt)
    engine = make(model)
    try:
        idle = engine.stats()["kv_cache"]["used_blocks"]
        alone = [[t.token_id for t in await run(engine, p, greedy(n))] for p in prompts]
        together = await asyncio.gather(*(run(engine, p, greedy(n)) for p in prompts))
        stats = engine.stats()
        assert stats["kv_cache"]["used_blocks"] == idle  # no block of a rejected position leaked
    finally:
        engine.close()
    assert alone == refs
    assert [[t.token_id for t in out] for out in together] == refs
    assert all(t.finish_reason is None for out in together for t in out[:-1])
    assert [out[-1].finish_reason for out in together] == ["length"] * 3
    spec = stats["speculative"]
    assert drafter.calls > 0 and 0 < spec["accepted_tokens"] < spec["drafted_tokens"]
    # fewer steps than tokens: accepted drafts saved forward passes
    assert stats["steps"] < 3 * 2 * n


async def test_the_prefix_cache_holds_only_kv_of_kept_tokens(tiny, oracle) -> None:
    """Every block the speculating engine published holds, position for position,
    the K/V the plain engine computed for the same tokens."""
    model, prompts, vocab = tiny
    n = 37
    refs = await references(model, prompts[:2], n)
    plain, spec = make(model, draft=0), make(model)
    oracle(list(zip(prompts[:2], refs, strict=True)), vocab, 2)
    try:
        for p in prompts[:2]:
            await run(plain, p, greedy(n))
            await run(spec, p, greedy(n))
        assert spec.stats()["speculative"]["accepted_tokens"] > 0
        a, b = spec.block_manager._by_key, plain.block_manager._by_key
        assert set(a) == set(b)
        assert len(a) == sum((len(p) + n - 1) // BS for p in prompts[:2])  # every full block of both
        for key, block in a.items():
            for mine, theirs in (
                (spec.runner.cache._k, plain.runner.cache._k),
                (spec.runner.cache._v, plain.runner.cache._v),
            ):
                torch.testing.assert_close(mine[:, block], theirs[:, b[key]], rtol=1e-4, atol=1e-5)
        # and a request continuing from those cached blocks gets the plain output
        turn = prompts[0] + refs[0][:30]
        assert [t.token_id for t in await run(spec, turn, greedy(7))] == refs[0][30:37]
        assert spec.stats()["prefix_cache"]["hit_blocks"] > 0
    finally:
        plain.close()
        spec.close()


async def test_max_tokens_and_end_of_sequence_cut_where_plain_decoding_does(tiny, oracle) -> None:
    model, prompts, vocab = tiny
    refs = await references(model, prompts[:1], 24)
    ref = refs[0]
    oracle([(prompts[0], ref)], vocab, 5)  # the salt leaves long drafts whole: limits fall inside them
    engine = make(model)
    try:
        for m in range(1, 24, 3):
            out = await run(engine, prompts[0], greedy(m))
            assert [t.token_id for t in out] == ref[:m]
            assert [t.finish_reason for t in out] == [None] * (m - 1) + ["length"]
        # an end-of-sequence token accepted inside a draft ends the output there
        stop_at = 13
        eos = ref[stop_at]
        first = ref.index(eos)
        engine.eos_token_ids = frozenset({eos})
        out = await run(engine, prompts[0], greedy(24))
        assert [t.token_id for t in out] == ref[: first + 1]
        assert out[-1].finish_reason == "stop"
        assert engine.stats()["speculative"]["accepted_tokens"] > 0
    finally:
        engine.close()


async def test_logprobs_and_penalties_match_plain_decoding(tiny, oracle) -> None:
    model, prompts, vocab = tiny
    n = 20
    params = greedy(n, logprobs=True, top_logprobs=3, frequency_penalty=0.5, presence_penalty=0.3)
    plain = make(model, draft=0)
    try:
        ref = await run(plain, prompts[0], params)
    finally:
        plain.close()
    oracle([(prompts[0], [t.token_id for t in ref])], vocab, 1)
    engine = make(model)
    try:
        out = await run(engine, prompts[0], params)
        assert engine.stats()["speculative"]["accepted_tokens"] > 0
    finally:
        engine.close()
    assert [t.token_id for t in out] == [t.token_id for t in ref]
    for a, b in zip(out, ref, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert a.top_logprobs is not None and b.top_logprobs is not None
        assert [i for i, _ in a.top_logprobs] == [i for i, _ in b.top_logprobs]


async def test_no_drafts_while_the_batch_is_wide(tiny, oracle) -> None:
    """``--transformers-speculative-max-sequences``: with three sequences decoding and a
    limit of 3 nothing drafts until one finishes; alone, a sequence drafts; output is
    unchanged either way."""
    model, prompts, vocab = tiny
    refs = await references(model, prompts, 24)
    oracle(list(zip(prompts, refs, strict=True)), vocab, 5)
    engine = make(model, speculative_max_sequences=3)
    try:
        # one intake for the three: on a busy machine the engine thread could otherwise
        # start the first alone (and draft) before the others are submitted
        with engine._wake:
            streams = [engine.generate(p, greedy(24)) for p in prompts]
        together = await asyncio.gather(*(drain(stream) for stream in streams))
        wide = engine.stats()["speculative"]["drafted_tokens"]
        alone = await run(engine, prompts[0], greedy(24))
        drafted = engine.stats()["speculative"]["drafted_tokens"] - wide
    finally:
        engine.close()
    assert [[t.token_id for t in out] for out in together] == refs
    assert [t.token_id for t in alone] == refs[0]
    assert wide == 0 and drafted > 0


async def test_a_sequence_that_cannot_draft_or_has_no_room_decodes_normally(tiny, oracle) -> None:
    """Drafts never preempt: with blocks for little more than the sequences
    themselves, drafts are shortened or dropped, and the output stays the same."""
    model, prompts, vocab = tiny
    n = 30
    refs = await references(model, prompts, n)
    oracle(list(zip(prompts, refs, strict=True)), vocab, 4)
    need = sum(-(-(len(p) + n) // BS) for p in prompts)
    engine = make(model, kv_cache_blocks=need + 1, prefix_caching=False)
    try:
        outs = await asyncio.gather(*(run(engine, p, greedy(n)) for p in prompts))
        stats = engine.stats()
    finally:
        engine.close()
    assert [[t.token_id for t in o] for o in outs] == refs
    assert stats["preemptions"] == 0
    assert stats["kv_cache"]["used_blocks"] == 0


async def test_sampled_output_keeps_its_distribution(tiny, oracle, monkeypatch) -> None:
    """At temperature > 0 the second token's frequencies over many seeds are those
    without speculation (a two-sample chi-square test), the oracle drafting the
    plain greedy tokens, which sampling often but not always agrees with.

    The engine's own seeds for unseeded requests come from a seeded source here, so
    that a run is repeatable: a test at a 4-sigma bound on fresh randomness fails now
    and then however right the engine is."""
    monkeypatch.setattr(sampling_module, "secrets", types.SimpleNamespace(randbits=random.Random(2026).getrandbits))
    model, prompts, vocab = tiny
    refs = await references(model, prompts[:1], 4)
    # unseeded: seeded sampled sequences never speculate (see the next test)
    params = [SamplingParams(max_tokens=3, temperature=0.7, top_k=6) for _ in range(300)]

    async def histogram(engine: PagedEngine) -> collections.Counter[tuple[int, int]]:
        outs = []
        for i in range(0, len(params), 20):  # prefills done, the decodes have the step's budget for drafts
            outs += await asyncio.gather(*(run(engine, prompts[0], p) for p in params[i : i + 20]))
        return collections.Counter((o[0].token_id, o[1].token_id) for o in outs)

    plain = make(model, draft=0, max_batch_size=64)
    try:
        expected = await histogram(plain)
    finally:
        plain.close()
    drafter = oracle([(prompts[0], refs[0])], vocab, 0)  # the greedy tokens, unspoilt
    spec = make(model, max_batch_size=64, speculative_max_sequences=0)  # 20 at once, all drafting
    try:
        got = await histogram(spec)
        stats = spec.stats()["speculative"]
    finally:
        spec.close()
    assert drafter.calls > 0 and 0 < stats["accepted_tokens"] < stats["drafted_tokens"]
    keys = [k for k in set(expected) | set(got) if expected[k] + got[k] >= 10]
    other_a = sum(expected.values()) - sum(expected[k] for k in keys)
    other_b = sum(got.values()) - sum(got[k] for k in keys)
    cells = [(expected[k], got[k]) for k in keys] + [(other_a, other_b)]
    chi2 = sum((a - b) ** 2 / (a + b) for a, b in cells if a + b > 0)  # equal sample sizes
    dof = len(cells) - 1
    assert chi2 < dof + 4 * (2 * dof) ** 0.5 + 10, (chi2, dof, expected, got)


async def test_a_seeded_sampled_request_does_not_speculate_and_keeps_its_tokens(tiny, oracle) -> None:
    """A seed gives the same tokens with speculation on as off, batched or alone: its
    generator is drawn once per token, not once per verified draft position."""
    model, prompts, vocab = tiny
    refs = await references(model, prompts[:1], 12)
    seeded = SamplingParams(max_tokens=12, temperature=0.8, seed=7)
    plain = make(model, draft=0)
    try:
        expected = [t.token_id for t in await run(plain, prompts[0], seeded)]
    finally:
        plain.close()
    oracle([(prompts[0], refs[0])], vocab, 0)
    spec = make(model)
    try:
        outs = await asyncio.gather(run(spec, prompts[0], seeded), run(spec, prompts[0], greedy(12)))
        stats = spec.stats()["speculative"]
    finally:
        spec.close()
    assert [t.token_id for t in outs[0]] == expected
    assert [t.token_id for t in outs[1]] == refs[0] and stats["drafted_tokens"] > 0, "the greedy neighbour drafts"


@pytest.mark.parametrize("int8_rows", [False, True])
async def test_a_windowed_model_speculates_exactly_and_gives_its_blocks_back(oracle, int8_rows) -> None:
    """Mistral windowed on every layer (8 tokens): drafts cross the window, the
    sequence still gives back the blocks behind it, and the output is the plain one;
    also on int8 rows, whose draft rows are decode rows over trimmed tables."""
    model, tok = build_tiny_family("Mistral (windowed)", seed=1)
    if int8_rows:
        from flexserv_torch import fbgemm_available
        from flexserv_transformers.int8 import quantize_linears

        if not fbgemm_available():
            pytest.skip("int8 rows need fbgemm")
        quantize_linears(model, torch.float32)
    prompts = [list(tok(t)["input_ids"]) for t in TEXTS[:2]]
    n = 60
    refs = await references(model, prompts, n)
    oracle(list(zip(prompts, refs, strict=True)), len(tok), 1)
    engine = make(model, max_batch_tokens=16)
    try:
        together = await asyncio.gather(*(run(engine, p, greedy(n)) for p in prompts))
        stats = engine.stats()
        assert engine.kv_window is not None and engine.block_manager.used == 0
    finally:
        engine.close()
    assert [[t.token_id for t in out] for out in together] == refs
    assert stats["speculative"]["accepted_tokens"] > 0


async def test_constrained_sequences_never_speculate(tmp_path: Path, load_model: Any, monkeypatch) -> None:
    """The documented rule: a grammar-constrained sequence is never offered a draft
    (its matcher would need a mask per drafted position); a free one of the same
    model is."""
    path = build_tiny_llama(tmp_path / "tiny", max_position_embeddings=256)
    spec = ModelSpec(name="tiny", kind=ModelKind.TEXT, source=str(path))
    model = load_model(spec, tmp_path / "cache", dtype="float32", transformers_engine="paged")
    asked: list[int] = []

    def drafter(tokens: list[int], k: int) -> list[int]:
        asked.append(k)
        return [tokens[-1]] * k

    monkeypatch.setattr(engine_module, "propose", drafter)
    try:
        prompt = model.render_chat([{"role": "user", "content": "three letters"}], {})
        regex = Constraint(kind="regex", spec="[a-c]{12}")
        params = await prepare_params(
            model, SamplingParams(max_tokens=30, temperature=0, constraint=regex), constraints=LLGuidanceCompiler()
        )
        text = "".join([d.text async for d in model.generate(prompt, params)])
        assert re.fullmatch("[a-c]{12}", text)
        assert asked == [] and model.engine.stats()["speculative"]["drafted_tokens"] == 0
        free = await prepare_params(model, SamplingParams(max_tokens=12, temperature=0), constraints=None)
        [d async for d in model.generate(prompt, free)]
        assert asked and model.engine.stats()["speculative"]["drafted_tokens"] > 0
    finally:
        model.unload()


@pytest.mark.parametrize("single_thread_tokens", [16, 0])
async def test_on_int8_rows_logprobs_are_bit_identical_alone_batched_and_drafted(
    tiny, oracle, single_thread_tokens
) -> None:
    """int8 rows (``--transformers-quantization int8`` in float32) round float noise into
    token changes, so their engine lays attention out batch-invariant: a request's
    logprobs are the same floats alone, beside a longer prompt, and verified in drafts,
    also with every step on all intra-op threads (0). (Each case on a fresh engine: a
    prefix-cache hit computes the prompt's last block in another chunk, which is not
    part of this promise.)"""
    from flexserv_torch import fbgemm_available
    from flexserv_transformers.int8 import quantize_linears

    if not fbgemm_available():
        pytest.skip("int8 rows need fbgemm")
    model, prompts, vocab = tiny
    model = copy.deepcopy(model)
    quantize_linears(model, torch.float32)
    pair = (prompts[0], prompts[1] * 12)  # the second table many decode widths longer
    params = greedy(24, logprobs=True, top_logprobs=2)

    async def generate(draft: int, together: bool) -> list[list[tuple[int, float, list[tuple[int, float]]]]]:
        engine = make(model, draft=draft, single_thread_step_tokens=single_thread_tokens)
        try:
            if together:
                outs = list(await asyncio.gather(*(run(engine, p, params) for p in pair)))
            else:
                outs = [await run(engine, pair[0], params)]
            assert engine.stats()["speculative"]["accepted_tokens"] > 0 or not draft
        finally:
            engine.close()
        return [[(t.token_id, t.logprob, list(t.top_logprobs)) for t in out] for out in outs]

    alone = (await generate(0, False))[0]
    beside = await generate(0, True)
    assert beside[0] == alone
    oracle([(p, [t[0] for t in out]) for p, out in zip(pair, beside, strict=True)], vocab, 1)
    assert await generate(8, False) == [alone]
    assert await generate(8, True) == beside
