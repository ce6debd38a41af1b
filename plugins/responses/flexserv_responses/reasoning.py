"""Reasoning items: the text a thinking model writes between ``<think>`` and
``</think>``, split from the answer as it streams.

Output that starts (after whitespace) with ``<think>`` opens reasoning; so does a
prompt whose generation prompt already opened it (templates such as Qwen3's with
``enable_thinking`` end in ``<think>\\n``), which :func:`prompt_opens_reasoning`
finds in the prompt's token ids. Whitespace around the reasoning is trimmed,
as is the whitespace between ``</think>`` and the answer. A tag that the
tokenizer marks as a *special* token never reaches the text (detokenizing skips
special tokens), so such a model's reasoning cannot be split from the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from flexserv_core import TextGenerationModel

OPEN, CLOSE = "<think>", "</think>"
Kind = Literal["reasoning", "text"]
Piece = tuple[Kind, str]


def _tag_ids(model: TextGenerationModel, tag: str) -> list[int]:
    """The tag's own token ids, without what ``encode`` adds to any text (BOS)."""
    base, ids = model.encode(""), model.encode(tag)
    return ids[len(base) :] if ids[: len(base)] == base else ids


def _last(haystack: Sequence[int], needle: Sequence[int]) -> int:
    n = len(needle)
    if n == 0:
        return -1
    for start in range(len(haystack) - n, -1, -1):
        if list(haystack[start : start + n]) == list(needle):
            return start
    return -1


def prompt_opens_reasoning(model: TextGenerationModel, prompt_ids: Sequence[int], window: int = 64) -> bool:
    """Whether the prompt's last ``window`` tokens open ``<think>`` without closing it."""
    tail = prompt_ids[-window:]
    opened = _last(tail, _tag_ids(model, OPEN))
    return opened >= 0 and opened > _last(tail, _tag_ids(model, CLOSE))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that could begin ``tag``."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Feed generated text in pieces; get ``("reasoning" | "text", chunk)`` pieces out."""

    def __init__(self, *, inside: bool = False) -> None:
        self._state: Literal["start", "inside", "text"] = "inside" if inside else "start"
        self._buf = ""
        self._lead = True  # strip the current segment's leading whitespace

    def feed(self, text: str) -> list[Piece]:
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[Piece]:
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            if self._state == "start":
                head = self._buf.lstrip()
                if head.startswith(OPEN):
                    self._buf, self._state, self._lead = head[len(OPEN) :], "inside", True
                    continue
                if not final and OPEN.startswith(head):
                    return out
                self._state, self._lead = "text", False  # no reasoning: the output is kept as it is
                continue
            if self._lead:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    return out
                self._lead = False
            if self._state == "text":
                if self._buf:
                    out.append(("text", self._buf))
                self._buf = ""
                return out
            at = self._buf.find(CLOSE)
            if at >= 0:
                chunk = self._buf[:at].rstrip()
                if chunk:
                    out.append(("reasoning", chunk))
                self._buf, self._state, self._lead = self._buf[at + len(CLOSE) :], "text", True
                continue
            if final:
                chunk, self._buf = self._buf.rstrip(), ""
            else:
                safe = self._buf[: len(self._buf) - _partial_suffix(self._buf, CLOSE)].rstrip()
                chunk, self._buf = safe, self._buf[len(safe) :]
            if chunk:
                out.append(("reasoning", chunk))
            return out


def split_reasoning(text: str, *, inside: bool = False) -> tuple[str, str]:
    """A whole output -> ``(reasoning, answer)``."""
    splitter = ReasoningSplitter(inside=inside)
    pieces = splitter.feed(text) + splitter.finish()
    reasoning = "".join(t for k, t in pieces if k == "reasoning")
    answer = "".join(t for k, t in pieces if k == "text")
    return reasoning, answer
