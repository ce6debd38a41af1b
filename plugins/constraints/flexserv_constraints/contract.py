"""The backend half of constrained decoding's contract: what a text backend gives
the compiler and honours per sequence.

A backend that serves constrained requests depends on ``flexserv-constraints``:

* it declares its tokenizer as a :class:`ConstraintVocabulary` (plain data: it needs
  no grammar library) on :attr:`~flexserv_core.TextGenerationModel.constraint_vocabulary`;
* the platform's compiler (``flexserv_constraint_compiler``) turns a request's
  :class:`~flexserv_core.Constraint` and that vocabulary into a
  :class:`CompiledConstraint`, which the backend receives as ``params.grammar``;
* per sequence, the backend honours a :class:`TokenMatcher`:

  1. ``matcher = params.grammar.matcher()`` when the sequence starts;
  2. before sampling each token, block what ``matcher.fill_blocked(row)`` marks
     (or let :func:`fill_blocked_masks` fill a whole batch's rows at once);
  3. ``matcher.advance(token_id)`` with the token it kept.

The matcher allows an end-of-sequence token exactly when the output is complete.
The core only passes these values through (it types them loosely). This module
needs no grammar library. See "Writing a text backend" in ``docs/plugins.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from flexserv_core import Constraint


class ConstraintVocabulary:
    """What the platform needs of a model's tokenizer to enforce constraints.

    Build it with one of the two constructors when the model loads (cheap: nothing
    is read until the first constrained request, when the compiler builds its own
    view of it) and set it as the model's
    :attr:`~flexserv_core.TextGenerationModel.constraint_vocabulary`.
    ``vocab_size`` is the width of the model's logits (masks have that many columns;
    ids beyond the tokenizer's own vocabulary are always blocked). Exactly one of
    ``tokenizer_json`` and ``tokens`` is set.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        eos_token_ids: Sequence[int],
        tokenizer_json: str | Callable[[], str] | None = None,
        tokens: Sequence[bytes] | Callable[[], Sequence[bytes]] | None = None,
        encode: Callable[[bytes], list[int]] | None = None,
        bos_token_id: int | None = None,
        special_token_ids: Sequence[int] = (),
    ) -> None:
        if (tokenizer_json is None) == (tokens is None):
            raise ValueError("a constraint vocabulary takes either tokenizer_json or tokens")
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(set(eos_token_ids))
        #: A Hugging Face ``tokenizer.json`` text, or a callable returning it.
        self.tokenizer_json = tokenizer_json
        #: Every token's bytes in id order, or a callable returning them; with ``encode``.
        self.tokens = tokens
        self.encode = encode
        self.bos_token_id = bos_token_id
        self.special_token_ids = list(special_token_ids)

    @classmethod
    def from_tokenizer_json(
        cls, tokenizer_json: str | Callable[[], str], *, vocab_size: int, eos_token_ids: Sequence[int]
    ) -> ConstraintVocabulary:
        """From a Hugging Face ``tokenizer.json`` text (or a callable returning it,
        called once on first use): what a fast tokenizer's ``backend_tokenizer.to_str()`` gives."""
        return cls(vocab_size=vocab_size, eos_token_ids=eos_token_ids, tokenizer_json=tokenizer_json)

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes] | Callable[[], Sequence[bytes]],
        *,
        encode: Callable[[bytes], list[int]],
        eos_token_ids: Sequence[int],
        bos_token_id: int | None = None,
        special_token_ids: Sequence[int] = (),
        vocab_size: int | None = None,
    ) -> ConstraintVocabulary:
        """From every token's bytes, in id order (special tokens as their text), and the
        model's tokenizer (``encode``: UTF-8 bytes -> ids, without special tokens): what
        a backend with its own tokenizer (llama.cpp) can give."""
        if not eos_token_ids:
            raise ValueError("a constraint vocabulary needs the model's end-of-sequence token id(s)")
        width = vocab_size if vocab_size is not None else (len(tokens) if not callable(tokens) else 0)
        if width < 1:
            raise ValueError("vocab_size is needed when tokens is a callable")
        return cls(
            vocab_size=width,
            eos_token_ids=eos_token_ids,
            tokens=tokens,
            encode=encode,
            bos_token_id=bos_token_id,
            special_token_ids=special_token_ids,
        )


@runtime_checkable
class TokenMatcher(Protocol):
    """Per sequence: which tokens may come next, and the tokens that came.

    Owned by one thread at a time (a backend's engine thread). A preempted and
    recomputed sequence keeps its matcher, so its tokens and its grammar never
    diverge. An implementation may also define a class or static method
    ``fill_blocked_batch(matchers, vocab) -> np.ndarray`` (bool ``[len(matchers),
    vocab]``) that :func:`fill_blocked_masks` uses for rows whose matchers are all of
    its class (a parallel fill); without it rows are filled one by one. And it may
    define ``error`` (``str | None``): why it gave up on the grammar on the way (too
    complex to follow); the text session reads it when a choice ends and fails the
    choice (400 ``invalid_grammar``) instead of reporting a finish.
    """

    @property
    def accepting(self) -> bool:
        """The output so far is complete: an end-of-sequence token is allowed now."""

    @property
    def stopped(self) -> bool:
        """Nothing more may follow (the grammar is complete and allows no continuation)."""

    def advance(self, token_id: int) -> None:
        """Consume the token the sequence kept (after the mask it is always allowed)."""

    def fill_blocked(self, row: np.ndarray) -> None:
        """Set ``row`` (bool, the logits' width) to True for every token not allowed
        next, False for the others (end-of-sequence ids only where the output is complete)."""

    def blocked(self) -> np.ndarray:
        """A new bool row: True for every token not allowed next."""


@runtime_checkable
class CompiledConstraint(Protocol):
    """A request's constraint compiled for one vocabulary (``params.grammar``)."""

    @property
    def constraint(self) -> Constraint:
        """What was compiled."""

    def matcher(self) -> TokenMatcher:
        """A fresh matcher at the start of the output (cheap: the grammar is compiled)."""


@dataclass(slots=True)
class BlockedMasks:
    """One step's masks: for each batch row in ``rows`` (those with a matcher), the
    tokens it may not take (``blocked``, bool ``[len(rows), vocab]``)."""

    rows: list[int]
    blocked: np.ndarray


def fill_blocked_masks(matchers: Sequence[TokenMatcher | None], vocab: int) -> BlockedMasks | None:
    """The masks of the rows of a batch that carry a matcher (``None`` if none do).

    Reads the matchers only, so it may run on another thread while the forward pass
    runs, as long as no matcher advances meanwhile. Matchers of one class with a
    ``fill_blocked_batch`` are filled in one call (the constraints plugin's, by
    llguidance's thread pool).
    """
    rows = [i for i, m in enumerate(matchers) if m is not None]
    if not rows:
        return None
    chosen = [m for m in matchers if m is not None]
    kind = type(chosen[0])
    batch = getattr(kind, "fill_blocked_batch", None)
    if batch is not None and all(type(m) is kind for m in chosen):
        return BlockedMasks(rows, batch(chosen, vocab))
    blocked = np.empty((len(rows), vocab), dtype=np.bool_)
    for j, matcher in enumerate(chosen):
        matcher.fill_blocked(blocked[j])
    return BlockedMasks(rows, blocked)
