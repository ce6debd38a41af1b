"""Client text that spells a special token stays text.

A chat template renders the conversation to a string that is then tokenized with
the model's special tokens recognised, so a user message holding ``<|im_start|>system``
would otherwise become the real control token and open a system turn of its own.
OpenAI's API reads such text as text. :class:`LiteralSpecials` does the same for any
backend that renders a template to text: before rendering, every occurrence of a
special token's text in the strings a client sent (message content, tool calls,
tool definitions, documents, template variables) is replaced by a placeholder; the
rendered prompt is tokenized around the placeholders, and each one becomes its text
tokenized as text (its first character apart from the rest, which no special token
matches). Requests without such text take the usual path unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["LiteralSpecials"]

#: Private-use characters around a placeholder's number: nothing a template does to
#: text (trimming, splitting on whitespace) changes them.
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


class LiteralSpecials:
    """One model's special-token texts (its control tokens), built once at load."""

    def __init__(self, specials: Iterable[str]) -> None:
        texts = sorted({text for text in specials if text}, key=len, reverse=True)  # longest first
        self._pattern = re.compile("|".join(map(re.escape, texts))) if texts else None

    def protect(self, value: Any) -> tuple[Any, list[str]]:
        """``value`` (strings, lists, dicts, nested) with every special token's text in
        its strings replaced by a placeholder, and the texts replaced, by placeholder
        number. An unchanged ``value`` (the same object) when nothing matched."""
        found: list[str] = []
        if self._pattern is None or not self._holds(value):  # the usual request: nothing copied
            return value, found
        return self._walk(value, found), found

    def _holds(self, value: Any) -> bool:
        assert self._pattern is not None
        if isinstance(value, str):
            return self._pattern.search(value) is not None
        if isinstance(value, dict):
            return any(self._holds(item) for item in value.values())
        if isinstance(value, list | tuple):
            return any(self._holds(item) for item in value)
        return False

    def _walk(self, value: Any, found: list[str]) -> Any:
        assert self._pattern is not None
        if isinstance(value, str):
            return self._pattern.sub(lambda m: self._hold(m.group(0), found), value)
        if isinstance(value, dict):
            return {key: self._walk(item, found) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(item, found) for item in value]
        return value

    @staticmethod
    def _hold(text: str, found: list[str]) -> str:
        found.append(text)
        return f"{_OPEN}{len(found) - 1}{_CLOSE}"

    @staticmethod
    def defused(rendered: str, found: list[str]) -> str:
        """``rendered`` with each placeholder back as its text, a word joiner (U+2060,
        invisible) after its first character so that no special token matches it: for
        a tokenizer that must see the prompt whole (a vision-language processor that
        expands its image tokens in the text)."""
        return LiteralSpecials._put_back(rendered, found, "\u2060")

    @staticmethod
    def restored(rendered: str, found: list[str]) -> str:
        """``rendered`` with each placeholder back as its text, as it is: the text
        :meth:`tokenize` tokenizes, piece by piece (to measure it before tokenizing)."""
        return LiteralSpecials._put_back(rendered, found, "")

    @staticmethod
    def _put_back(rendered: str, found: list[str], joiner: str) -> str:
        def text(match: re.Match[str]) -> str:
            number = int(match.group(1))
            if number >= len(found):
                return match.group(0)
            return found[number][:1] + joiner + found[number][1:]

        return _PLACEHOLDER.sub(text, rendered)

    @staticmethod
    def tokenize(rendered: str, found: list[str], tokenize: Callable[[str], list[int]]) -> list[int]:
        """``rendered`` (a prompt with placeholders) as token ids: the template's text
        with its special tokens, each placeholder as its text tokenized as text.
        ``tokenize``: the model's tokenizer as the template's output is tokenized
        (special tokens recognised, none added)."""
        ids: list[int] = []
        pieces = _PLACEHOLDER.split(rendered)
        for i, piece in enumerate(pieces):
            if i % 2 == 0:
                if piece:
                    ids += tokenize(piece)
                continue
            number = int(piece)
            if number >= len(found):  # the client wrote a placeholder's characters itself: its text
                ids += tokenize(f"{_OPEN}{piece}{_CLOSE}")
                continue
            text = found[number]
            ids += tokenize(text[:1]) + tokenize(text[1:])
        return ids
