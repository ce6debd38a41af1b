"""The allowed-token masks of a batch's constrained rows, filled at once."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexserv_core.constraints.matcher import TokenMatcher

_executor: Any = None
_executor_lock = threading.Lock()


def _llg_executor() -> Any:
    global _executor
    with _executor_lock:
        if _executor is None:
            import llguidance

            _executor = llguidance.LLExecutor()
        return _executor


@dataclass(slots=True)
class BlockedMasks:
    """One step's masks: for each batch row in ``rows`` (those with a matcher), the
    tokens it may not take (``blocked``, bool ``[len(rows), vocab]``)."""

    rows: list[int]
    blocked: np.ndarray


def fill_blocked_masks(matchers: Sequence[TokenMatcher | None], vocab: int) -> BlockedMasks | None:
    """The masks of the rows of a batch that carry a matcher (``None`` if none do).

    Reads the matchers only, so it may run on another thread while the forward pass
    runs, as long as no matcher advances meanwhile. Rows are filled by the library's
    thread pool in one call. End-of-sequence ids are allowed exactly where the output
    is complete. NumPy throughout, no OpenMP team to wait on.
    """
    rows = [i for i, m in enumerate(matchers) if m is not None]
    if not rows:
        return None
    import llguidance.numpy as lnp

    words = np.full((len(rows), (vocab + 31) // 32), -1, dtype=np.int32)
    pairs = [(matchers[i].matcher, j) for j, i in enumerate(rows)]  # type: ignore[union-attr]
    lnp.fill_next_token_bitmask_par(_llg_executor(), pairs, words)
    blocked = np.unpackbits(np.invert(words).view(np.uint8), axis=1, count=vocab, bitorder="little").view(np.bool_)
    for j, i in enumerate(rows):
        matcher = matchers[i]
        assert matcher is not None
        matcher.allow_eos(blocked[j])
    return BlockedMasks(rows, blocked)
