"""The transformers engines' side of the platform's constraint service.

The platform compiles a request's constraint (the ``constraints`` plugin, through
the core); each sequence holds a :class:`~flexserv_constraints.TokenMatcher`. Here: the
vocabulary handed to it (the serialized Rust tokenizer behind the model's tokenizer), and
setting the blocked logits of a batch to ``-inf`` with torch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from flexserv_constraints import BlockedMasks, ConstraintVocabulary, TokenMatcher, fill_blocked_masks

from flexserv_core import InvalidRequest

if TYPE_CHECKING:
    from flexserv_transformers.text_tokenizer import TextTokenizer

__all__ = ["apply_blocked_masks", "constraint_vocabulary", "tokenizer_json"]


def tokenizer_json(text_tokenizer: TextTokenizer) -> str:
    """The ``tokenizer.json`` text of the Rust tokenizer behind ``text_tokenizer`` (a
    FastTokenizer's or a transformers fast tokenizer's), padding and truncation off."""
    backend = getattr(text_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise InvalidRequest(
            "Structured outputs need a fast (tokenizer.json) tokenizer; this model's is not one.",
            param="response_format",
            code="constraints_not_supported",
        )
    backend = copy.copy(backend)  # padding and truncation off on a copy, not on the shared one
    backend.no_padding()
    backend.no_truncation()
    return str(backend.to_str())


def constraint_vocabulary(
    text_tokenizer: TextTokenizer, vocab_size: int, eos_token_ids: Iterable[int]
) -> ConstraintVocabulary:
    """The model's vocabulary for the platform's constraint service (read on first use)."""
    return ConstraintVocabulary.from_tokenizer_json(
        lambda: tokenizer_json(text_tokenizer), vocab_size=vocab_size, eos_token_ids=sorted(eos_token_ids)
    )


def apply_blocked_masks(
    logits: torch.Tensor, matchers: Sequence[TokenMatcher | None], masks: BlockedMasks | None = None
) -> torch.Tensor:
    """``logits`` (float32) with every token a row's matcher does not allow set to
    ``-inf`` (rows without one are untouched); a new tensor. ``masks``: this step's,
    computed ahead by :func:`~flexserv_constraints.fill_blocked_masks` (else computed here)."""
    if masks is None:
        masks = fill_blocked_masks(matchers, logits.shape[-1])
    if masks is None:
        return logits
    blocked = masks.blocked
    if len(masks.rows) != logits.shape[0]:
        full = np.zeros(tuple(logits.shape), dtype=np.bool_)
        full[masks.rows] = blocked
        blocked = full
    if logits.device.type == "cpu":
        out = logits.float().numpy().copy()
        np.putmask(out, blocked, -np.inf)
        return torch.from_numpy(out)
    return logits.float().masked_fill(torch.from_numpy(blocked).to(logits.device), float("-inf"))
