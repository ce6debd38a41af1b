"""One sequence's position in its grammar."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import llguidance

log = logging.getLogger(__name__)


class TokenMatcher:
    """Per sequence: which tokens may come next, and the tokens that came.

    Owned by one thread at a time (a backend's engine thread). A preempted and
    recomputed sequence keeps its matcher, so its tokens and its grammar never diverge.
    """

    __slots__ = ("_eos", "matcher", "vocab_size")

    def __init__(self, matcher: llguidance.LLMatcher, eos_token_ids: Sequence[int], vocab_size: int) -> None:
        self.matcher = matcher
        self._eos = [e for e in eos_token_ids if e < vocab_size]
        self.vocab_size = vocab_size

    @property
    def accepting(self) -> bool:
        """The output so far is complete: an end-of-sequence token is allowed now."""
        return bool(self.matcher.is_accepting())

    @property
    def stopped(self) -> bool:
        """Nothing more may follow (the grammar is complete and allows no continuation)."""
        return bool(self.matcher.is_stopped())

    def advance(self, token_id: int) -> None:
        """Consume the token the sequence kept (after the mask it is always allowed)."""
        if token_id in self._eos and self.matcher.is_accepting():
            return  # the sequence ends here
        if not self.matcher.consume_token(token_id):
            log.warning("grammar rejected token %d: %s", token_id, self.matcher.get_error())

    def fill_blocked(self, row: np.ndarray) -> None:
        """Set ``row`` (bool, length ``vocab_size``) to True for every token not allowed next."""
        from flexserv_core.constraints.masks import fill_blocked_masks

        masks = fill_blocked_masks([self], len(row))
        assert masks is not None
        row[:] = masks.blocked[0]

    def blocked(self) -> np.ndarray:
        """A new bool row: True for every token not allowed next."""
        row = np.zeros(self.vocab_size, dtype=np.bool_)
        self.fill_blocked(row)
        return row

    def allow_eos(self, blocked_row: np.ndarray) -> None:
        """Unblock every end-of-sequence id in ``blocked_row`` when the output is complete."""
        if self._eos and self.matcher.is_accepting():
            blocked_row[self._eos] = False
