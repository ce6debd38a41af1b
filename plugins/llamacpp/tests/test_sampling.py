"""The numpy sampler: every parameter changes what it picks as documented."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flexserv_llamacpp.sampling import Sampler

from flexserv_core import SamplingParams

V = 1000


def logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 3, V).astype(np.float32)


def params(**kw: object) -> SamplingParams:
    return SamplingParams(max_tokens=8, **kw)  # type: ignore[arg-type]


def test_greedy_takes_the_argmax_and_does_not_modify_the_row() -> None:
    row = logits()
    before = row.copy()
    assert Sampler(params(temperature=0), V).pick(row)[0] == int(np.argmax(row))
    assert Sampler(params(temperature=1.0, top_k=1), V).pick(row)[0] == int(np.argmax(row))
    assert np.array_equal(row, before)


def test_logit_bias_bans_and_forces() -> None:
    row = logits()
    best = int(np.argmax(row))
    assert Sampler(params(temperature=0, logit_bias={best: -100}), V).pick(row)[0] != best
    assert Sampler(params(temperature=0, logit_bias={7: 100}), V).pick(row)[0] == 7


def test_penalties_count_generated_tokens() -> None:
    row = np.zeros(V, dtype=np.float32)
    row[3], row[4] = 2.0, 1.5
    s = Sampler(params(temperature=0, frequency_penalty=0.3), V)
    assert s.pick(row)[0] == 3
    s.observe(3)
    assert s.pick(row)[0] == 3  # 2.0 - 0.3 > 1.5
    s.observe(3)
    assert s.pick(row)[0] == 4  # 2.0 - 0.6 < 1.5
    p = Sampler(params(temperature=0, presence_penalty=1.0), V)
    p.observe(3)
    assert p.pick(row)[0] == 4


def test_a_seed_reproduces_draws_and_different_seeds_differ() -> None:
    row = logits()
    draws = lambda seed: [Sampler(params(temperature=1.5, seed=seed), V).pick(row)[0] for _ in range(1)]  # noqa: E731
    one = Sampler(params(temperature=1.5, seed=11), V)
    two = Sampler(params(temperature=1.5, seed=11), V)
    a = [one.pick(row)[0] for _ in range(30)]
    assert a == [two.pick(row)[0] for _ in range(30)]
    other = Sampler(params(temperature=1.5, seed=12), V)
    assert a != [other.pick(row)[0] for _ in range(30)]
    assert draws(5) == draws(5)


def test_top_p_and_top_k_limit_the_candidates() -> None:
    row = logits(1)
    order = np.argsort(-row)
    s = Sampler(params(temperature=1.0, top_k=3, seed=1), V)
    assert {s.pick(row)[0] for _ in range(200)} <= set(order[:3].tolist())
    tiny_p = Sampler(params(temperature=1.0, top_p=1e-6, seed=1), V)
    assert {tiny_p.pick(row)[0] for _ in range(50)} == {int(order[0])}
    probs = np.exp(row - row.max())
    probs /= probs.sum()
    cumulative = np.cumsum(probs[order])
    nucleus = set(order[: int(np.searchsorted(cumulative, 0.5)) + 1].tolist())
    half = Sampler(params(temperature=1.0, top_p=0.5, seed=2), V)
    assert {half.pick(row)[0] for _ in range(300)} <= nucleus


def test_high_temperature_spreads_the_draws() -> None:
    row = logits(2)
    cold = Sampler(params(temperature=0.01, seed=3), V)
    hot = Sampler(params(temperature=5.0, seed=3), V)
    assert len({cold.pick(row)[0] for _ in range(100)}) == 1
    assert len({hot.pick(row)[0] for _ in range(100)}) > 20


def test_logprobs_are_the_log_softmax_and_top_logprobs_are_sorted() -> None:
    row = logits(3)
    token, lp, top = Sampler(params(temperature=0, logprobs=True, top_logprobs=5), V).pick(row)
    expected = row - row.max() - math.log(float(np.exp(row - row.max()).sum()))
    assert lp is not None and math.isclose(lp, float(expected[token]), rel_tol=1e-5)
    assert top is not None and [t for t, _ in top] == np.argsort(-row)[:5].tolist()
    assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
    assert Sampler(params(temperature=0), V).pick(row)[1:] == (None, None)


def test_a_blocked_mask_restricts_the_pick() -> None:
    row = logits(4)
    blocked = np.ones(V, dtype=bool)
    blocked[[10, 20]] = False
    assert Sampler(params(temperature=0), V).pick(row, blocked)[0] == (10 if row[10] > row[20] else 20)
    assert {Sampler(params(temperature=2.0, seed=s), V).pick(row, blocked)[0] for s in range(20)} <= {10, 20}


# --- vLLM's extensions -----------------------------------------------------------------


def test_min_p_drops_the_unlikely_tokens() -> None:
    row = np.zeros(V, dtype=np.float32)
    row[:3] = [4.0, 3.5, 1.0]  # p1/p0 = e^-0.5 = 0.61
    s = Sampler(params(temperature=1.0, min_p=0.5, seed=1), V)
    assert {s.pick(row)[0] for _ in range(300)} == {0, 1}
    off = Sampler(params(temperature=1.0, seed=1), V)
    assert len({off.pick(row)[0] for _ in range(300)}) > 2


def test_repetition_penalty_covers_the_prompt_and_the_output() -> None:
    row = np.zeros(V, dtype=np.float32)
    row[:4] = [3.0, 2.0, -1.0, -1.5]
    s = Sampler(params(temperature=0, repetition_penalty=2.0, logprobs=True, top_logprobs=4), V, prompt=[0, 2])
    token, _, top = s.pick(row)
    assert token == 1  # 3.0 / 2 = 1.5 < 2.0
    x = row.copy()
    x[0], x[2] = 1.5, -2.0  # a negative logit is multiplied
    lp = x - np.log(np.exp(x - x.max()).sum()) - x.max()
    assert dict(top or [])[0] == pytest.approx(float(lp[0]), abs=1e-5)
    s.observe(1)  # generated tokens count too: 2.0 / 2 = 1.0 < 1.5
    assert s.pick(row)[0] == 0
    assert Sampler(params(temperature=0), V).pick(row)[0] == 0


def test_min_tokens_and_ignore_eos_hold_the_end_of_generation_back() -> None:
    row = np.zeros(V, dtype=np.float32)
    row[1], row[2] = 1.0, 9.0  # 2 ends the generation
    s = Sampler(params(temperature=0, min_tokens=2), V, eos=[2])
    picks = []
    for _ in range(3):
        picks.append(s.pick(row)[0])
        s.observe(picks[-1])
    assert picks == [1, 1, 2]
    forever = Sampler(params(temperature=0, ignore_eos=True), V, eos=[2])
    for _ in range(5):
        assert forever.pick(row)[0] == 1
        forever.observe(1)
    assert Sampler(params(temperature=0), V, eos=[2]).pick(row)[0] == 2
    only_end = np.full(V, -np.inf, dtype=np.float32)
    only_end[2] = 0.0  # a constraint that allows nothing but the end keeps it
    assert Sampler(params(temperature=0, ignore_eos=True), V, eos=[2]).pick(only_end)[0] == 2


# --- verifying a speculative draft token -------------------------------------------------


def frequencies(sampler: Sampler, row: np.ndarray, draws: int, draft: int | None = None) -> np.ndarray:
    counts = np.zeros(row.size)
    for _ in range(draws):
        counts[sampler.pick(row, None, draft)[0]] += 1
    return counts


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = counts.sum() * p
    support = p > 0
    assert counts[~support].sum() == 0, "a token of probability 0 was drawn"
    return float(((counts[support] - expected[support]) ** 2 / expected[support]).sum())


@pytest.mark.parametrize(
    ("kw", "kept"),
    [({}, 6), ({"top_k": 4}, 4), ({"top_p": 0.8}, 3)],  # how many tokens (best first) each distribution keeps
)
def test_verifying_a_draft_token_keeps_the_distribution(kw: dict[str, object], kept: int) -> None:
    """Keeping draft ``x`` with probability p(x), else drawing from p without it,
    draws every token with its probability p, whatever ``x`` is. Over 10,000 draws
    the frequencies fit p as plain draws do: a chi-square bound above its 99.9%
    quantile for 5 degrees of freedom (20.5); a rule that kept the draft more often
    (redrawing from p with ``x`` after a rejection) scores in the hundreds or more."""
    row = np.array([2.0, 1.6, 1.1, 0.3, -0.5, -1.2, -np.inf], dtype=np.float32)
    p = np.exp(row[:kept] - row[0])
    p = np.concatenate([p / p.sum(), np.zeros(row.size - kept)])
    draws = 10_000
    plain = frequencies(Sampler(params(temperature=1.0, seed=7, **kw), row.size), row, draws)
    assert chi_square(plain, p) < 25
    # the likeliest token, a middling one, the least likely kept one, one cut or impossible
    for draft in sorted({0, 2, kept - 1, row.size - 1}):
        verified = frequencies(Sampler(params(temperature=1.0, seed=draft, **kw), row.size), row, draws, draft)
        assert chi_square(verified, p) < 25, (draft, verified / draws, p)


def test_a_draft_token_of_probability_zero_is_never_kept() -> None:
    row = np.array([1.0, 0.5, -np.inf, 0.0], dtype=np.float32)
    s = Sampler(params(temperature=1.0, seed=3), row.size)
    assert 2 not in {s.pick(row, None, 2)[0] for _ in range(2000)}  # a -inf logit
    top2 = Sampler(params(temperature=1.0, top_k=2, seed=3), row.size)
    assert {top2.pick(row, None, 3)[0] for _ in range(2000)} == {0, 1}  # cut by top-k
    one = np.array([0.0, -np.inf, -np.inf, -np.inf], dtype=np.float32)
    assert {s.pick(one, None, 0)[0] for _ in range(100)} == {0}  # p = 1: always kept


def test_a_greedy_row_ignores_the_draft() -> None:
    row = logits(5)
    s = Sampler(params(temperature=0, logprobs=True), V)
    assert s.pick(row, None, 7) == s.pick(row)
    assert s.pick(row, None, 7)[0] == int(np.argmax(row))
