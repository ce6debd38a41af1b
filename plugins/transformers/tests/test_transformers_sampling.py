"""The shared sampling module, on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch
from flexserv_transformers.sampling import SamplerState, sample_next

from flexserv_core import SamplingParams

V = 8


def state(**params: object) -> SamplerState:
    return SamplerState(SamplingParams(max_tokens=10, **params), vocab_size=V)  # type: ignore[arg-type]


def test_greedy_is_argmax_and_needs_no_generator():
    s = state(temperature=0)
    logits = torch.tensor([[0.1, 3.0, 2.0, 0, 0, 0, 0, 0]])
    assert s.generator is None
    assert sample_next(logits, [s])[0].token_id == 1


def test_penalties_follow_openai():
    logits = torch.tensor([[0.0, 3.0, 2.5, 0, 0, 0, 0, 0]])
    s = state(temperature=0, presence_penalty=0.4, frequency_penalty=0.2, logprobs=True, top_logprobs=V)
    for token in (1, 1):  # token 1 used twice: 3.0 - 0.4 - 2 * 0.2 = 2.2 < 2.5
        s.observe(token)
    out = sample_next(logits, [s])[0]
    assert out.token_id == 2
    expected = torch.tensor([[0.0, 2.2, 2.5, 0, 0, 0, 0, 0]]).log_softmax(-1)[0]
    assert dict(out.top_logprobs)[1] == pytest.approx(expected[1].item(), abs=1e-6)


def test_penalties_count_generated_tokens_only():
    s = state(temperature=0, frequency_penalty=5.0)
    assert s.counts is not None and float(s.counts.sum()) == 0.0  # nothing from the prompt


def test_seeded_generators_are_per_request():
    logits = torch.zeros(1, V)
    a, b = state(temperature=1.0, seed=5), state(temperature=1.0, seed=5)
    torch.manual_seed(0)
    draws_a = [sample_next(logits, [a])[0].token_id for _ in range(20)]
    torch.manual_seed(1)  # the global RNG plays no part
    draws_b = [sample_next(logits, [b])[0].token_id for _ in range(20)]
    assert draws_a == draws_b and len(set(draws_a)) > 1


def test_top_k_and_top_p_restrict_the_draw():
    logits = torch.tensor([[5.0, 4.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    k = state(temperature=1.0, top_k=2, seed=1)
    assert {sample_next(logits, [k])[0].token_id for _ in range(200)} <= {0, 1}
    probs = logits.softmax(-1)[0]
    p = state(temperature=1.0, top_p=float(probs[0]) + 1e-3, seed=1)  # needs the top two tokens
    assert {sample_next(logits, [p])[0].token_id for _ in range(200)} <= {0, 1}
    only = state(temperature=1.0, top_p=0.01, seed=1)
    assert {sample_next(logits, [only])[0].token_id for _ in range(50)} == {0}


def test_temperature_scales_logprobs():
    logits = torch.tensor([[2.0, 1.0, 0, 0, 0, 0, 0, 0]])
    out = sample_next(logits, [state(temperature=0.5, seed=3, logprobs=True, top_logprobs=2)])[0]
    expected = (logits / 0.5).log_softmax(-1)[0]
    assert [t for t, _ in out.top_logprobs] == [0, 1]
    assert out.top_logprobs[0][1] == pytest.approx(expected[0].item(), abs=1e-6)
    assert all(math.isfinite(lp) for _, lp in out.top_logprobs)


def test_rows_are_independent():
    logits = torch.tensor([[0.0, 9.0, 0, 0, 0, 0, 0, 0], [9.0, 0.0, 0, 0, 0, 0, 0, 0]])
    rows = [state(temperature=0), state(temperature=0, logprobs=True, top_logprobs=1)]
    a, b = sample_next(logits, rows)
    assert (a.token_id, a.logprob, a.top_logprobs) == (1, None, None)
    assert b.token_id == 0 and b.top_logprobs is not None and b.top_logprobs[0][0] == 0


# --- vLLM's extensions -----------------------------------------------------------------


def test_min_p_drops_the_unlikely_tokens():
    logits = torch.tensor([[4.0, 3.5, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])  # p1/p0 = e^-0.5 = 0.61
    s = state(temperature=1.0, min_p=0.5, seed=1)
    assert {sample_next(logits, [s])[0].token_id for _ in range(300)} == {0, 1}
    off = state(temperature=1.0, seed=1)
    assert len({sample_next(logits, [off])[0].token_id for _ in range(300)}) > 2


def test_repetition_penalty_covers_the_prompt_and_the_output():
    logits = torch.tensor([[3.0, 2.0, -1.0, -1.5, 0, 0, 0, 0]])
    seen_in_prompt = SamplerState(
        SamplingParams(max_tokens=10, temperature=0, repetition_penalty=2.0, logprobs=True, top_logprobs=V),
        vocab_size=V,
        prompt_ids=[0, 2],
    )
    out = sample_next(logits, [seen_in_prompt])[0]
    assert out.token_id == 1  # 3.0 / 2 = 1.5 < 2.0
    lp = dict(out.top_logprobs or [])
    expected = torch.tensor([[1.5, 2.0, -2.0, -1.5, 0, 0, 0, 0]]).log_softmax(-1)[0]
    assert lp[2] == pytest.approx(expected[2].item(), abs=1e-6)  # a negative logit is multiplied
    seen_in_prompt.observe(1)  # generated tokens count too: 2.0 / 2 = 1.0 < 1.5
    assert sample_next(logits, [seen_in_prompt])[0].token_id == 0
    assert sample_next(logits, [state(temperature=0)])[0].token_id == 0


def test_min_tokens_and_ignore_eos_hold_the_end_of_sequence_back():
    logits = torch.tensor([[0.0, 1.0, 9.0, 0, 0, 0, 0, 0]])  # 2 is the end-of-sequence token

    def held(**params: object) -> SamplerState:
        return SamplerState(SamplingParams(max_tokens=10, temperature=0, **params), vocab_size=V, eos_token_ids=[2])  # type: ignore[arg-type]

    s = held(min_tokens=2)
    picks = []
    for _ in range(3):
        picks.append(sample_next(logits, [s])[0].token_id)
        s.observe(picks[-1])
    assert picks == [1, 1, 2]
    forever = held(ignore_eos=True)
    for _ in range(5):
        assert sample_next(logits, [forever])[0].token_id == 1
        forever.observe(1)
    assert sample_next(logits, [held()])[0].token_id == 2


def test_held_back_eos_stays_when_a_constraint_allows_nothing_else():
    only_eos = torch.full((1, V), float("-inf"))
    only_eos[0, 2] = 0.0
    s = SamplerState(SamplingParams(max_tokens=10, temperature=0, ignore_eos=True), vocab_size=V, eos_token_ids=[2])
    assert sample_next(only_eos, [s])[0].token_id == 2
