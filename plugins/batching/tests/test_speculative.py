"""Prompt-lookup drafts: the n-gram lookup and the adaptive draft length."""

from __future__ import annotations

from flexserv_batching import DraftState, may_speculate, propose
from flexserv_batching.speculative import COOLDOWN_STEPS

from flexserv_core import SamplingParams


def test_propose_continues_the_latest_occurrence_of_the_longest_ngram() -> None:
    #            0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [5, 1, 2, 3, 9, 9, 7, 2, 3, 4, 1, 2, 3]
    # "1 2 3" (3-gram) occurred at 1..3: continue with what followed it
    assert propose(tokens, 4) == [9, 9, 7, 2]
    assert propose(tokens, 2) == [9, 9]
    # no 3-gram match, the 2-gram "2 3" last occurred at 7..8: continue from 9
    assert propose([8, 2, 3, 4, 6, 2, 3, 4, 5, 7, 2, 3], 3) == [4, 5, 7]
    # a continuation stops at the end of what is known
    assert propose([1, 2, 3, 1, 2], 8) == [3, 1, 2]
    assert propose([1, 2, 3, 4], 8) == []  # nothing repeats
    assert propose([1, 2, 1, 2], 0) == []
    assert propose([7], 4) == []


def test_draft_length_adapts_and_backs_off_when_nothing_is_accepted() -> None:
    state = DraftState(8)
    assert state.want() == 4
    state.update(4, 4)
    assert state.want() == 8  # accepted whole: doubles
    state.update(8, 8)
    assert state.want() == 8  # capped
    state.update(8, 2)
    assert state.want() == 3  # accepted under half: what was accepted plus one
    state.update(3, 0)
    assert state.length == 1
    assert [state.want() for _ in range(COOLDOWN_STEPS)] == [0] * COOLDOWN_STEPS
    assert state.want() == 1
    state.update(1, 0)  # a second failure in a row waits twice as long
    assert [state.want() for _ in range(2 * COOLDOWN_STEPS)] == [0] * (2 * COOLDOWN_STEPS)
    assert state.want() == 1
    state.update(1, 1)
    assert state.failures == 0 and state.want() == 2


def test_draft_length_starts_at_four_and_doubles_up_to_the_cap() -> None:
    state = DraftState(32)
    lengths = []
    for _ in range(5):
        lengths.append(state.want())
        state.update(lengths[-1], lengths[-1])
    assert lengths == [4, 8, 16, 32, 32]
    state.update(32, 10)  # accepted under half: falls as before
    assert state.want() == 11
    assert DraftState(2).want() == 2  # a cap under four is the first length


def test_constrained_and_seeded_sampled_sequences_do_not_speculate() -> None:
    assert may_speculate(SamplingParams(max_tokens=8, temperature=0.7), constrained=False)
    assert may_speculate(SamplingParams(max_tokens=8, temperature=0.0, seed=3), constrained=False)
    assert not may_speculate(SamplingParams(max_tokens=8, temperature=0.7, seed=3), constrained=False)
    assert not may_speculate(SamplingParams(max_tokens=8, temperature=0.0), constrained=True)
