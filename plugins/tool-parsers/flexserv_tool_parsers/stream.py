"""Incremental tool-call parsing: the types a :class:`~flexserv_tool_parsers.ToolParser`'s
stream speaks, and the default stream for parsers without an incremental form.

A :class:`ToolCallStream` is fed the model's output piece by piece. It passes on
content at once, except text that may still turn out to be part of a call marker
(held back until it is not), and turns calls into :class:`ToolCallFragment`
events: the call's name as soon as it is known, then its arguments as the model
writes them. :class:`~flexserv_tool_parsers.calling.ToolStreamer` turns these events into
OpenAI's ``tool_calls`` deltas. The built-in JSON formats stream incrementally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BufferedCallStream", "ToolCallFragment", "ToolCallStream", "ToolStreamEvent"]


@dataclass(slots=True)
class ToolCallFragment:
    """Part of call number ``index`` (0-based, in output order): the first
    fragment of a call carries its ``name`` (and no arguments), later ones
    ``arguments`` text to append."""

    index: int
    name: str | None = None
    arguments: str = ""


#: content text, or a piece of a call
ToolStreamEvent = str | ToolCallFragment


class ToolCallStream(Protocol):
    def feed(self, text: str) -> list[ToolStreamEvent]:
        """More output in; what can be sent now out, in order."""
        ...

    def finish(self) -> list[ToolStreamEvent]:
        """The output is complete; the rest out."""
        ...


class BufferedCallStream:
    """For parsers without an incremental form: content is sent until a call may
    start (``call_start``), the rest is parsed whole (``parse``) at the end."""

    def __init__(
        self,
        call_start: Callable[[str], int | None],
        parse: Callable[[str], tuple[str | None, list[tuple[str, str]]]],
    ) -> None:
        self._call_start = call_start
        self._parse = parse
        self._text = ""
        self._sent = 0
        self.calls = 0

    def feed(self, text: str) -> list[ToolStreamEvent]:
        self._text += text
        at = self._call_start(self._text[self._sent :])
        end = len(self._text) if at is None else self._sent + at
        out, self._sent = self._text[self._sent : end], max(self._sent, end)
        return [out] if out else []

    def finish(self) -> list[ToolStreamEvent]:
        rest = self._text[self._sent :]
        content, calls = self._parse(rest) if rest else (None, [])
        if not calls:
            return [rest] if rest else []
        events: list[ToolStreamEvent] = [content] if content else []
        for index, (name, arguments) in enumerate(calls):
            events.append(ToolCallFragment(index, name=name))
            if arguments:
                events.append(ToolCallFragment(index, arguments=arguments))
        self.calls = len(calls)
        return events
