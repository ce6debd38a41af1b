"""Incremental detokenization: text deltas that never split a UTF-8 character.

Decoding one token at a time is wrong for byte-level BPE (a character may span
tokens) and for SentencePiece (a token's leading space depends on its left
neighbour). :class:`IncrementalDetokenizer` decodes a short window ending at the
new token and emits only the text that is new and complete: a window whose
decoding ends in U+FFFD (an incomplete character) is held back until the next
token completes it. The concatenated deltas equal the decoding of the whole
completion (what a non-streaming response returns).
"""

from __future__ import annotations

from flexserv_transformers.text_tokenizer import TextTokenizer, decode_text

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Turns generated ids, one at a time, into text deltas.

    ``prompt_ids``' last few tokens seed the window so that the first generated
    token decodes with the right leading space.
    """

    __slots__ = ("_ids", "_prefix", "_read", "_tokenizer")

    def __init__(self, tokenizer: TextTokenizer, prompt_ids: list[int], context: int = 4) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_ids[-context:])
        self._prefix = 0
        self._read = len(self._ids)

    def _decode(self, ids: list[int]) -> str:
        return decode_text(self._tokenizer, ids, skip_special_tokens=True)

    def _pending(self) -> tuple[str, str]:
        return self._decode(self._ids[self._prefix : self._read]), self._decode(self._ids[self._prefix :])

    def add(self, token_id: int) -> str:
        """Feed one generated id; return the text it completes (possibly ``""``)."""
        self._ids.append(token_id)
        before, after = self._pending()
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            return self._advance(after[len(before) :])
        return ""

    def flush(self) -> str:
        """At the end of the sequence: whatever is held back, even incomplete."""
        before, after = self._pending()
        return self._advance(after[len(before) :]) if len(after) > len(before) else ""

    def _advance(self, text: str) -> str:
        self._prefix, self._read = self._read, len(self._ids)
        return text
