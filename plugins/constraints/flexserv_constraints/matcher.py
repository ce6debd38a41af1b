"""One sequence's position in its grammar: the :class:`~flexserv_constraints.contract.TokenMatcher`
this plugin gives backends, and the batch fill of its masks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.numpy as lnp
import numpy as np

log = logging.getLogger(__name__)

_executor: llguidance.LLExecutor | None = None
_executor_lock = threading.Lock()


def _llg_executor() -> llguidance.LLExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = llguidance.LLExecutor()
        return _executor


class LLTokenMatcher:
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
    def error(self) -> str | None:
        """Why the library gave up on the grammar (too complex to lex or parse, or no
        way on); ``None`` while it holds. The text session fails the choice then."""
        return str(self.matcher.get_error()) if self.matcher.is_error() else None

    @property
    def stopped(self) -> bool:
        """Nothing more may follow (the grammar is complete and allows no continuation)."""
        return bool(self.matcher.is_stopped())

    def advance(self, token_id: int) -> None:
        """Consume the token the sequence kept (after the mask it is always allowed)."""
        if token_id in self._eos and self.matcher.is_accepting():
            return  # the sequence ends here
        if not self.matcher.consume_token(token_id):
            log.warning("grammar rejected token %d: %s", token_id, self.matcher.get_error().splitlines()[0])

    def fill_blocked(self, row: np.ndarray) -> None:
        """Set ``row`` (bool, length ``vocab_size``) to True for every token not allowed next."""
        row[:] = self.fill_blocked_batch([self], len(row))[0]

    def blocked(self) -> np.ndarray:
        """A new bool row: True for every token not allowed next."""
        row: np.ndarray = self.fill_blocked_batch([self], self.vocab_size)[0]
        return row

    def allow_eos(self, blocked_row: np.ndarray) -> None:
        """Unblock every end-of-sequence id in ``blocked_row`` when the output is complete."""
        if self._eos and self.matcher.is_accepting():
            blocked_row[self._eos] = False

    @staticmethod
    def fill_blocked_batch(matchers: Sequence[Any], vocab: int) -> np.ndarray:
        """The blocked tokens of each of ``matchers`` (bool ``[len(matchers), vocab]``),
        filled by the library's thread pool in one call; what
        :func:`~flexserv_constraints.contract.fill_blocked_masks` uses. End-of-sequence ids are allowed
        exactly where the output is complete. NumPy throughout, no OpenMP team to wait on."""
        words = np.full((len(matchers), (vocab + 31) // 32), -1, dtype=np.int32)
        lnp.fill_next_token_bitmask_par(_llg_executor(), [(m.matcher, j) for j, m in enumerate(matchers)], words)
        blocked = np.unpackbits(np.invert(words).view(np.uint8), axis=1, count=vocab, bitorder="little").view(np.bool_)
        for j, matcher in enumerate(matchers):
            matcher.allow_eos(blocked[j])
        return blocked
