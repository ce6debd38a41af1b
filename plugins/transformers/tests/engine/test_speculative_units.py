"""Prompt-lookup speculation's verification rule (greedy: the argmax; sampled: the standard
speculative-sampling rule, checked to leave the distribution unchanged)."""

from __future__ import annotations

import math

import torch
from flexserv_transformers.sampling import SamplerState, sample_next, verify_draft

from flexserv_core import SamplingParams


def _state(**params: object) -> SamplerState:
    return SamplerState(SamplingParams(max_tokens=100, **params), vocab_size=6)  # type: ignore[arg-type]


def test_greedy_verification_accepts_while_the_draft_is_the_argmax() -> None:
    logits = torch.tensor(
        [
            [0.0, 5.0, 0.0, 0.0, 0.0, 0.0],  # argmax 1
            [0.0, 0.0, 5.0, 0.0, 0.0, 0.0],  # argmax 2
            [0.0, 0.0, 0.0, 0.0, 5.0, 0.0],  # argmax 4, the draft says 3
            [5.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    state = _state(temperature=0)
    out, accepted = verify_draft(logits, state, [1, 2, 3], limit=10, stop_ids=frozenset())
    assert [t.token_id for t in out] == [1, 2, 4] and accepted == 2
    assert state.generated == 3  # every kept token is observed
    out, accepted = verify_draft(logits[:3], _state(temperature=0), [1, 2], limit=10, stop_ids=frozenset())
    assert [t.token_id for t in out] == [1, 2, 4] and accepted == 2  # the whole draft, plus one
    # it stops at an end-of-sequence token and at the limit, like a decode would
    out, _ = verify_draft(logits, _state(temperature=0), [1, 2, 3], limit=10, stop_ids=frozenset({2}))
    assert [t.token_id for t in out] == [1, 2]
    out, _ = verify_draft(logits, _state(temperature=0), [1, 2, 3], limit=1, stop_ids=frozenset())
    assert [t.token_id for t in out] == [1]


def test_greedy_verification_sees_the_penalties_of_the_tokens_kept_before() -> None:
    # With a frequency penalty, token 1 wins at position 0, but once kept it is
    # penalised at position 1 where 2 wins: exactly what one-at-a-time decoding does.
    logits = torch.tensor([[0.0, 3.0, 2.5, 0.0, 0.0, 0.0]] * 3)
    params = {"temperature": 0, "frequency_penalty": 1.0}
    out, accepted = verify_draft(logits, _state(**params), [1, 1], limit=10, stop_ids=frozenset())
    one_by_one, state = [], _state(**params)
    for row in logits[:2]:
        token = sample_next(row[None], [state])[0].token_id
        state.observe(token)
        one_by_one.append(token)
    assert [t.token_id for t in out] == one_by_one == [1, 2] and accepted == 1


def test_verification_gives_logprobs_like_the_sampler() -> None:
    logits = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    draft = [int(logits[0].argmax()), int(logits[1].argmax())]
    out, _ = verify_draft(
        logits, _state(temperature=0, logprobs=True, top_logprobs=2), draft, limit=10, stop_ids=frozenset()
    )
    for row, token in zip(logits, out, strict=False):
        expected = sample_next(row[None], [_state(temperature=0, logprobs=True, top_logprobs=2)])[0]
        assert token.token_id == expected.token_id
        assert token.logprob is not None and expected.logprob is not None
        assert math.isclose(token.logprob, expected.logprob, rel_tol=1e-6)
        assert token.top_logprobs == expected.top_logprobs


def test_sampled_verification_keeps_the_distribution() -> None:
    """Over many seeds, the first kept token is distributed as the sampler's ``p``
    (after temperature and top-k), and the second, given the first draft token was
    accepted, as ``p`` at the second position: the draft changes nothing but speed."""
    logits = torch.tensor(
        [
            [1.0, 2.0, 0.5, 1.5, -1.0, 0.0],
            [0.3, -0.2, 1.2, 0.9, 0.0, 2.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    params = {"temperature": 0.8, "top_k": 4}
    draft = [3, 2]  # neither is the most likely token

    def probs(row: torch.Tensor) -> torch.Tensor:
        scaled = row / 0.8
        kth = scaled.topk(4).values[-1]
        return scaled.masked_fill(scaled < kth, float("-inf")).softmax(-1)

    trials = 6000
    first = torch.zeros(6)
    second = torch.zeros(6)
    for seed in range(trials):
        out, _ = verify_draft(logits, _state(seed=seed, **params), draft, limit=10, stop_ids=frozenset())
        first[out[0].token_id] += 1
        if out[0].token_id == draft[0]:
            second[out[1].token_id] += 1
    for counts, expected in ((first, probs(logits[0])), (second, probs(logits[1]))):
        n = float(counts.sum())
        assert n > 500
        # every frequency within 4.5 standard errors of its probability
        for k in range(6):
            p = float(expected[k])
            if p == 0.0:
                assert counts[k] == 0  # top-k removed it: never drawn, not even as a draft
                continue
            assert abs(float(counts[k]) / n - p) < 4.5 * math.sqrt(p * (1 - p) / n) + 1e-9, (k, counts, expected)


def test_batched_verification_equals_the_stepwise_one() -> None:
    """The one-batch path (no penalties) keeps exactly the tokens, counts and
    logprobs that processing one position at a time keeps, greedy, with a logit
    bias and with logprobs, for drafts rejected anywhere or accepted whole."""
    from flexserv_transformers.sampling import _verify_stepwise

    gen = torch.Generator().manual_seed(3)
    for trial in range(40):
        logits = torch.randn(9, 6, generator=gen)
        best = logits.argmax(-1).tolist()
        cut = trial % 9  # the draft follows the argmax up to here, then differs
        draft = [b if j < cut else (b + 1) % 6 for j, b in enumerate(best[:8])]
        params = [
            {"temperature": 0},
            {"temperature": 0, "logit_bias": {2: 1.5}},
            {"temperature": 0, "logprobs": True, "top_logprobs": 3},
        ][trial % 3]
        limit = 10 if trial % 4 else 1 + trial % 7
        batched, stepwise = _state(**params), _state(**params)
        out_b, acc_b = verify_draft(logits, batched, draft, limit=limit, stop_ids=frozenset({5}))
        out_s, acc_s = _verify_stepwise(logits, stepwise, draft, limit=limit, stop_ids=frozenset({5}))
        assert [t.token_id for t in out_b] == [t.token_id for t in out_s]
        for b, s in zip(out_b, out_s, strict=True):
            assert (b.logprob is None) == (s.logprob is None)
            if b.logprob is not None and s.logprob is not None:
                assert math.isclose(b.logprob, s.logprob, rel_tol=1e-6, abs_tol=1e-7)
            assert [i for i, _ in b.top_logprobs or []] == [i for i, _ in s.top_logprobs or []]
        assert acc_b == acc_s and batched.generated == stepwise.generated == len(out_b)
