"""Prompt-lookup speculation in the llama.cpp engine, on the embedded SmolLM2 GGUF:
with drafts on (8 tokens, two threads, the q8_0 KV cache speculation takes) greedy output is
the output without them, token for token and logprob for logprob, alone and beside
other requests, with penalties, a stream closed at a stop string, a ``max_tokens`` that ends inside a
draft and an end of turn accepted inside one; and what is left in the KV cache is
what the engine believes is there."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from flexserv_core import SamplingParams, TokenDelta
from flexserv_core.testing import wait_until

pytestmark = pytest.mark.slow  # loads the real model

PASSAGES = [
    "The lighthouse at Point Reyes was built in 1870. Its first-order Fresnel lens, made in France, has 1,032 "
    "pieces of glass and could be seen twenty-four miles out to sea. Keepers climbed 300 steps down the cliff "
    "every evening to light the lamp.",
    "Our return policy is simple. You may return any unused item within thirty days of delivery for a full "
    "refund. Items must be in their original packaging and include the receipt. Opened software and gift "
    "cards cannot be returned.",
    "Meeting notes, 14 March. Present: Ana, Bilal, Chen and Dora. Ana reported that the new warehouse opens "
    "in May. Bilal will order the shelving by Friday, and Chen will draft the safety plan before the next "
    "meeting.",
]
SETTINGS = {
    "llamacpp_threads": 2,  # two threads: where an f16 cache would compute a lone row differently
    "llamacpp_kv_cache_tokens": 4096,
    "llamacpp_context_length": 2048,
    # the cache speculation takes (auto), set for the plain model too: the same kernels
    "llamacpp_kv_cache_type": "q8_0",
    "llamacpp_parallel": 8,
}
MAX_TOKENS = 64


def copy_prompt(model: Any, passage: str) -> list[int]:
    content = f"Here is a text:\n\n{passage}\n\nRepeat the passage above exactly, word for word."
    return list(model.render_chat([{"role": "user", "content": content}], {}))


@pytest.fixture(scope="module")
def models(smollm_gguf: Path, load_model: Any) -> Iterator[tuple[Any, Any]]:
    """The same model without and with speculation."""
    plain = load_model(smollm_gguf, name="plain", **SETTINGS)
    spec = load_model(smollm_gguf, name="spec", llamacpp_speculative_draft_tokens=8, **SETTINGS)
    try:
        assert plain.engine.max_draft == 0 and spec.engine.max_draft == 8  # the load-time check passed
        yield plain, spec
    finally:
        plain.unload()
        spec.unload()


def idle(model: Any) -> None:
    """Wait until the engine has let every sequence go (a closed stream's sequence
    leaves at the engine's next step)."""
    wait_until(lambda: model.engine.stats()["active_requests"] == 0, 10, message="the engine is idle")


def fresh(model: Any) -> None:
    """Empty the KV cache of an idle model, so that both models of a comparison lay
    their cells out alike: llama.cpp sums a sequence's cells in cell order, and a
    cached prefix freed for a new prompt leaves free cells below a running sequence's
    cells, which changes that order (with or without speculation)."""
    idle(model)
    engine = model.engine
    for slot in engine.slots:
        model.runtime.seq_rm(slot.id)
        slot.cached = []


def assert_cache_consistent(model: Any) -> None:
    """Every slot's cells hold exactly the positions the engine believes cached:
    no rejected draft row's cell is left behind."""
    idle(model)
    runtime = model.runtime
    for slot in model.engine.slots:
        n = len(slot.tokens())
        assert runtime.llama.llama_memory_seq_pos_max(runtime.memory, slot.id) == n - 1, (slot.id, n)
        assert runtime.llama.llama_memory_seq_pos_min(runtime.memory, slot.id) == (0 if n else -1), slot.id


@pytest.fixture
def verified(models: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], int, bool]]:
    """(draft, tokens of it accepted, whether the sequence ended there) of each
    verification of the speculating model."""
    engine = models[1].engine
    real = engine._verify
    calls: list[tuple[list[int], int, bool]] = []

    def spy(seq: Any, logits: Any, *, keep_cells: bool) -> bool:
        draft, before = list(seq.draft), engine.accepted_tokens
        freed = bool(real(seq, logits, keep_cells=keep_cells))
        calls.append((draft, engine.accepted_tokens - before, seq.finished))
        return freed

    monkeypatch.setattr(engine, "_verify", spy)
    return calls


def greedy(**kw: Any) -> SamplingParams:
    return SamplingParams(**{"max_tokens": MAX_TOKENS, "temperature": 0.0, **kw})


async def run(model: Any, ids: list[int], params: SamplingParams) -> list[TokenDelta]:
    async with aclosing(model.generate(ids, params)) as stream:
        return [d async for d in stream]


def alone(model: Any, prompts: list[list[int]], params: SamplingParams) -> list[list[TokenDelta]]:
    out = []
    for ids in prompts:
        fresh(model)
        out.append(asyncio.run(run(model, ids, params)))
    return out


def together(model: Any, prompts: list[list[int]], params: SamplingParams) -> list[list[TokenDelta]]:
    fresh(model)

    async def all_at_once() -> list[list[TokenDelta]]:
        return list(await asyncio.gather(*(run(model, ids, params) for ids in prompts)))

    return asyncio.run(all_at_once())


def seen(deltas: list[TokenDelta]) -> list[tuple[Any, ...]]:
    """What a client sees of each token (logprobs included), and the finish reason."""
    return [(d.token_id, d.text, d.logprob, d.top_logprobs, d.finish_reason) for d in deltas]


class Counted:
    """The spec engine's draft counters over a block."""

    def __init__(self, model: Any) -> None:
        self.engine = model.engine

    def __enter__(self) -> Counted:
        self.before = self.engine.stats()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self.engine.stats()
        self.delta = {k: after[k] - self.before[k] for k in ("steps", "drafted_tokens", "accepted_tokens")}
        self.generated = after["tokens_generated"] - self.before["tokens_generated"]


def test_greedy_output_and_logprobs_are_unchanged_alone_and_beside_other_requests(models: tuple[Any, Any]) -> None:
    plain, spec = models
    prompts = [copy_prompt(plain, p) for p in PASSAGES]
    params = greedy(logprobs=True, top_logprobs=2)
    expected = [seen(d) for d in alone(plain, prompts, params)]
    assert all(len(e) == MAX_TOKENS or e[-1][-1] == "stop" for e in expected)

    with Counted(spec) as one:
        assert [seen(d) for d in alone(spec, prompts, params)] == expected
    # not vacuous: most tokens came from accepted drafts, in far fewer steps
    assert one.delta["drafted_tokens"] > 0 and one.delta["accepted_tokens"] > one.generated / 2, one.delta
    assert one.delta["steps"] < one.generated / 2, (one.delta, one.generated)

    # all at once, and the first prompt twice more (as n=3 would): its choices share its prefill
    with Counted(spec) as many:
        got = together(spec, [*prompts, prompts[0], prompts[0]], params)
    assert [seen(d) for d in got] == [*expected, expected[0], expected[0]]
    assert many.delta["accepted_tokens"] > 0
    assert_cache_consistent(spec)


def test_the_grounded_benchmark_prompts_all_at_once(models: tuple[Any, Any]) -> None:
    """The eight copy, extract and edit prompts of ``benchmarks/grounded_prompts.jsonl``
    decoded together, 96 tokens each. Here drafts placed right after their own
    sequence's row (instead of at the end of the batch) changed the third prompt's
    output at its 61st token: rejected rows left free cells below other sequences'
    cells, which their next rows then took."""
    plain, spec = models
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "grounded_prompts.jsonl"
    texts = [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]
    prompts = [list(plain.render_chat([{"role": "user", "content": t}], {})) for t in texts]
    params = greedy(max_tokens=96)
    expected = [seen(d) for d in together(plain, prompts, params)]
    with Counted(spec) as counted:
        got = [seen(d) for d in together(spec, prompts, params)]
    assert [g == e for g, e in zip(got, expected, strict=True)] == [True] * len(texts)
    assert counted.delta["accepted_tokens"] > counted.generated / 3, counted.delta
    assert_cache_consistent(spec)


def test_max_tokens_ending_inside_a_draft_and_penalties(models: tuple[Any, Any], verified: list[Any]) -> None:
    plain, spec = models
    prompts = [copy_prompt(plain, p) for p in PASSAGES]
    # each sequence's drafts grow 4, 8, ... and are cut to what max_tokens leaves
    for max_tokens in (6, 11):
        expected = [seen(d) for d in together(plain, prompts, greedy(max_tokens=max_tokens))]
        with Counted(spec) as counted:
            got = [seen(d) for d in together(spec, prompts, greedy(max_tokens=max_tokens))]
        assert got == expected and all(len(g) == max_tokens and g[-1][-1] == "length" for g in got)
        assert counted.delta["accepted_tokens"] > 0
        # some sequence's last token came from a draft's verification
        wait_until(lambda: any(finished and draft for draft, _, finished in verified), 10)
        assert_cache_consistent(spec)

    # penalties see each kept draft token before the next row is processed
    penalised = greedy(max_tokens=40, frequency_penalty=0.4, presence_penalty=0.2, repetition_penalty=1.05)
    expected = [seen(d) for d in together(plain, prompts, penalised)]
    with Counted(spec) as counted:
        assert [seen(d) for d in together(spec, prompts, penalised)] == expected
    assert counted.delta["drafted_tokens"] > 0
    assert_cache_consistent(spec)


def test_an_end_of_turn_accepted_inside_a_draft_ends_the_sequence_there(
    models: tuple[Any, Any], verified: list[Any]
) -> None:
    """The earlier assistant turn ends with <|im_end|>: the draft that copies it
    proposes the end of turn, which is accepted, and the draft rows after it leave."""
    plain, spec = models
    line = "The red fox jumps over the lazy dog near the old mill by the river."
    ask = {"role": "user", "content": f"Repeat this sentence exactly: {line}"}
    ids = list(plain.render_chat([ask, {"role": "assistant", "content": line}, ask], {}))
    (expected,) = alone(plain, [ids], greedy())
    assert expected[-1].finish_reason == "stop" and len(expected) < MAX_TOKENS
    with Counted(spec) as counted:
        (got,) = alone(spec, [ids], greedy())
    assert seen(got) == seen(expected)
    assert counted.delta["accepted_tokens"] > len(expected) / 2, counted.delta
    # the end of turn was a draft token, accepted, with draft rows after it that were not
    eog = spec.runtime.eog_tokens
    # (the engine records a verification once it has sent its tokens)
    draft, accepted, finished = wait_until(lambda: verified and verified[-1][2] and verified[-1], 10)
    assert finished and draft[accepted - 1] in eog and accepted < len(draft), verified[-1]
    assert_cache_consistent(spec)
    slot = next(s for s in spec.engine.slots if s.cached)
    assert slot.cached == (ids + [d.token_id for d in got])[: len(slot.cached)]


def test_a_stream_closed_at_a_stop_string_leaves_the_cache_as_without_speculation(models: tuple[Any, Any]) -> None:
    """As the core does at a stop string: the consumer closes the token stream as soon as
    the text holds it, with drafted tokens in flight."""
    plain, spec = models
    ids = copy_prompt(plain, PASSAGES[0])
    (expected,) = alone(plain, [ids], greedy())
    text = "".join(d.text for d in expected)
    assert "Fresnel" in text

    async def until_stop(model: Any) -> str:
        seen_text = ""
        async with aclosing(model.generate(ids, greedy())) as deltas:
            async for delta in deltas:
                seen_text += delta.text
                if "Fresnel" in seen_text:
                    break
        return seen_text[: seen_text.index("Fresnel")]

    fresh(spec)
    assert asyncio.run(until_stop(spec)) == text[: text.index("Fresnel")]
    # the next request reuses the prompt's cells, and nothing else, and decodes as before
    assert_cache_consistent(spec)
    assert seen(asyncio.run(run(spec, ids, greedy()))) == seen(expected)


def test_sampled_requests_draft_unless_seeded(models: tuple[Any, Any]) -> None:
    _, spec = models
    ids = copy_prompt(spec, PASSAGES[1])
    # unseeded, a sampled run may by chance keep no draft token (seen once in many runs):
    # up to three runs, each a fresh draw, so a real regression still fails every time
    accepted = 0
    for _ in range(3):
        with Counted(spec) as counted:
            got = asyncio.run(run(spec, ids, greedy(temperature=0.7, top_p=0.95)))
        assert got[-1].finish_reason is not None and counted.delta["drafted_tokens"] > 0
        accepted += counted.delta["accepted_tokens"]
        if accepted:
            break
    assert accepted > 0
    # a seed means the same tokens whatever the load: drawn once per token, never per draft
    with Counted(spec) as counted:
        asyncio.run(run(spec, ids, greedy(temperature=0.7, seed=1)))
    assert counted.delta["drafted_tokens"] == 0
    assert_cache_consistent(spec)


def test_rows_are_batch_invariant_with_q8_0_and_one_sequence_slot_suffices(
    models: tuple[Any, Any], smollm_gguf: Path, load_model: Any
) -> None:
    from flexserv_llamacpp.binding import rows_batch_invariant

    _, spec = models
    fresh(spec)
    assert spec.runtime.kv_cache_type == "q8_0" and spec.runtime.n_threads == 2
    assert rows_batch_invariant(spec.runtime)
    assert_cache_consistent(spec)  # the probe left its sequences empty
    single = load_model(
        smollm_gguf,
        name="single",
        llamacpp_parallel=1,
        llamacpp_kv_cache_tokens=512,
        llamacpp_speculative_draft_tokens=4,
    )
    try:
        assert single.engine.max_draft == 4  # the probe needs no second sequence
    finally:
        single.unload()


def test_an_f16_cache_with_two_threads_does_not_speculate_and_says_why(
    smollm_gguf: Path, load_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="flexserv_llamacpp.backend"):
        model = load_model(
            smollm_gguf,
            name="f16",
            llamacpp_kv_cache_type="f16",
            llamacpp_threads=2,
            llamacpp_kv_cache_tokens=512,
            llamacpp_speculative_draft_tokens=8,
        )
    try:
        assert model.runtime.kv_cache_type == "f16" and model.engine.max_draft == 0
        message = next(r.getMessage() for r in caplog.records if "speculative decoding off" in r.getMessage())
        assert "f16 KV cache and several threads" in message and "q8_0" in message
    finally:
        model.unload()
