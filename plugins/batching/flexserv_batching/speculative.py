"""Prompt-lookup (n-gram) drafts for speculative decoding, and how long they get.

Shared by the continuous-batching engines that speculate (the transformers
plugin's paged engine, the llama.cpp plugin's engine); each verifies a draft its
own way. A decoding sequence whose last few tokens (an n-gram, the longest of
``MAX_NGRAM`` down to ``MIN_NGRAM``) occurred earlier in its prompt or output
proposes the tokens that followed that earlier occurrence (the most recent one)
as a *draft* (:func:`propose`); :class:`DraftState` adapts its length to what
verification accepts, and stops drafting for a sequence where it does not pay.

Copy-, extract- and edit-style requests repeat long runs of their prompt, so most
drafted tokens are accepted and a step emits several tokens for about the cost of
one (a decode step reads every weight once; a few more query positions cost
little more on a memory-bound CPU or GPU).
"""

from __future__ import annotations

from array import array

from flexserv_core import SamplingParams

__all__ = ["COOLDOWN_STEPS", "FIRST_DRAFT", "LOOKUP_WINDOW", "DraftState", "may_speculate", "propose"]


def may_speculate(params: SamplingParams, constrained: bool) -> bool:
    """Whether a new sequence drafts at all: not when constrained (its matcher would
    have to be advanced and a mask computed per drafted position), nor when seeded and
    sampled (verification draws from its generator a number of times that depends on
    the drafts, hence on the load: without drafts a seed gives the same tokens
    whatever the load, and the same as with speculation off)."""
    return not constrained and (params.seed is None or params.temperature == 0)


#: The n-gram lengths looked up, longest first.
MAX_NGRAM = 3
MIN_NGRAM = 2
#: How far back the lookup searches (tokens): bounds its cost on long contexts.
LOOKUP_WINDOW = 4096
#: Steps a sequence waits before drafting again after its drafts kept failing.
COOLDOWN_STEPS = 8
#: The first draft's length (or the cap, when lower): short, since most drafts of a
#: request that does not copy are rejected, and doubled while drafts are accepted whole.
FIRST_DRAFT = 4


def propose(tokens: list[int], max_tokens: int) -> list[int]:
    """Up to ``max_tokens`` tokens following the most recent earlier occurrence of
    the longest n-gram ending ``tokens``; ``[]`` when there is none.

    It runs for every drafting sequence at every step: the search is ``bytes.rfind``
    over the window as 4-byte ids (C speed), not a Python loop over 4,096 tokens."""
    if max_tokens <= 0:
        return []
    window = tokens[max(0, len(tokens) - LOOKUP_WINDOW) :]
    data = array("i", window).tobytes()
    for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
        if len(window) <= n:
            continue
        needle = data[-4 * n :]
        # the latest start before the tail's own: the match ends before the last token
        end = 4 * (len(window) - 1)
        pos = data.rfind(needle, 0, end)
        while pos > 0 and pos % 4:  # a match across id boundaries: look further back
            pos = data.rfind(needle, 0, pos + len(needle) - 1)
        if pos >= 0 and pos % 4 == 0:
            start = pos // 4 + n
            return window[start : start + max_tokens]
    return []


class DraftState:
    """One sequence's adaptive draft length.

    It starts at ``FIRST_DRAFT`` tokens; a draft accepted whole doubles it (up to
    ``max_draft``: 4, 8, 16, 32 under the default cap, so a request copying a long
    passage soon verifies 32 tokens per forward pass), one accepted less than half
    shrinks it to what was accepted plus one. ``COOLDOWN_STEPS`` steps without drafting follow a draft of which
    nothing was accepted, twice as many after each further one (up to 64 steps):
    a request whose output does not repeat its context soon stops paying for
    drafts, while one that starts copying later still gets them.
    """

    __slots__ = ("cooldown", "failures", "length", "max_draft", "wait")

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft
        self.length = max(1, min(FIRST_DRAFT, max_draft))
        self.failures = 0  # consecutive drafts with nothing accepted
        self.cooldown = 0
        self.wait = 0  # steps left before drafting again

    def want(self) -> int:
        """How many tokens to draft this step (0: none; counts a waiting step)."""
        if self.wait > 0:
            self.wait -= 1
            return 0
        return self.length

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        if accepted == 0:
            self.failures += 1
            self.length = max(1, self.length // 2)
            self.wait = min(64, COOLDOWN_STEPS << (self.failures - 1))
            return
        self.failures = 0
        if accepted == drafted:
            self.length = min(self.max_draft, self.length * 2)
        elif 2 * accepted < drafted:
            self.length = max(1, accepted + 1)
