"""Stop strings over a stream of text pieces, without leaking a partial match.

Text that could still be the start of a stop string is held back until the next
piece decides it. Because the *longest* such suffix is held, any stop string
that completes later starts inside the held text, so searching ``held + piece``
finds the earliest match even when it is split across many tokens.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Feed text pieces; get back the text that is safe to emit.

    Offsets are counted in characters of the whole generated text, so callers
    can align tokens (for logprobs) with what was released.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in dict.fromkeys(stops) if s]
        self._longest = max((len(s) for s in self.stops), default=0)
        self._held = ""
        #: Characters released so far.
        self.released = 0
        #: Whether a stop string was found; nothing more is released after it.
        self.stopped = False

    def feed(self, piece: str, *, check: bool = True) -> str:
        """Add ``piece``; return the text now safe to emit (may be empty).

        When a stop string completes, returns the text before it, sets
        :attr:`stopped`, and drops the stop string and everything after it.
        With ``check`` false (before ``min_tokens``), stop strings are not looked
        for: ``piece`` and whatever was held are released as they are.
        """
        if self.stopped:
            return ""
        if not self.stops or not check:
            piece, self._held = self._held + piece, ""
            self.released += len(piece)
            return piece
        text = self._held + piece
        cut = self._earliest_match(text)
        if cut is not None:
            self.stopped = True
            self._held = ""
            self.released += cut
            return text[:cut]
        keep = self._partial_suffix(text)
        out = text[: len(text) - keep]
        self._held = text[len(text) - keep :]
        self.released += len(out)
        return out

    def flush(self) -> str:
        """End of generation without a stop: release whatever is held."""
        out, self._held = ("" if self.stopped else self._held), ""
        self.released += len(out)
        return out

    def _earliest_match(self, text: str) -> int | None:
        best: int | None = None
        for stop in self.stops:
            at = text.find(stop)
            if at != -1 and (best is None or at < best):
                best = at
        return best

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop."""
        for size in range(min(len(text), self._longest - 1), 0, -1):
            tail = text[-size:]
            if any(stop.startswith(tail) for stop in self.stops):
                return size
        return 0
