"""Incremental parsing of JSON tool calls: output text in, content and call
fragments out, as soon as they are known.

A :class:`~flexserv_tool_parsers.ToolCallStream` is fed the model's output piece by piece. It passes on
content at once, except text that may still turn out to be part of a call marker
(held back until it is not), and turns calls into :class:`ToolCallFragment`
events: the call's name as soon as it is known, then its arguments as the model
writes them. Whole outputs are parsed by the same machine
(:func:`parse_with_stream`), so the streamed fragments of a call, joined, are
exactly the non-streaming ``arguments``: the JSON text the model wrote.

:class:`JsonCallStream` handles the formats that write each call as a JSON
object ``{"name": ..., "arguments": {...}}`` (or ``"parameters"``) inside some
markup; :class:`CallSyntax` describes the markup.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto

from flexserv_tool_parsers.json_scan import JsonObjectScanner, ScanEvent
from flexserv_tool_parsers.stream import ToolCallFragment, ToolCallStream, ToolStreamEvent

__all__ = ["CallSyntax", "JsonCallStream", "parse_with_stream"]

_WS = " \t\r\n"
_ARGUMENT_KEYS = ("arguments", "parameters")


def parse_with_stream(stream: ToolCallStream, text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """A whole output through ``stream``: ``(content or None, [(name, arguments)])``."""
    content: list[str] = []
    calls: list[list[str]] = []
    for event in [*stream.feed(text), *stream.finish()]:
        if isinstance(event, str):
            content.append(event)
        elif event.name is not None:
            calls.append([event.name, ""])
        else:
            calls[event.index][1] += event.arguments
    return "".join(content) or None, [(name, args) for name, args in calls]


@dataclass(frozen=True, slots=True)
class CallSyntax:
    """Where a format's JSON call objects sit in the output.

    A call region opens at one of ``markers`` (anywhere in the output), or, with
    ``bare``, at a ``{`` before any content. In it come call objects separated by
    whitespace or ``;``; with ``array``, the objects may instead be written as one
    JSON array right after the marker. ``close`` (when set) ends the region after
    a call; any other text ends it too and is content again.
    """

    markers: tuple[str, ...] = ()
    bare: bool = False
    array: bool = False
    close: str | None = None


class _Mode(Enum):
    CONTENT = auto()
    OPEN = auto()  # after a marker, before the first call object
    OBJECT = auto()
    BETWEEN = auto()  # after a call object, in the region


class _Call:
    """One call object being read."""

    __slots__ = (
        "args_end",
        "args_start",
        "committed",
        "decoded_args",
        "index",
        "key",
        "name",
        "scanner",
        "sent",
        "start",
    )

    def __init__(self, start: int) -> None:
        self.start = start
        self.scanner = JsonObjectScanner(start)
        self.key: str | None = None
        self.name: str | None = None
        self.args_start = -1
        self.args_end = -1
        self.decoded_args: str | None = None  # arguments the model wrote as a JSON string
        self.committed = False
        self.index = -1
        self.sent = 0  # argument characters sent


class JsonCallStream:
    """The streaming parser for one output in a :class:`CallSyntax`.

    A call is announced (its name fragment sent) once its name is known and its
    arguments have started as a JSON object (or, written as a JSON string, have
    been read and hold an object); from then on it is a call, even if the output
    stops or breaks off inside it. Text that turns out not to be a call (not JSON,
    no name, arguments that are not an object) is content, from where its region
    started. Whitespace next to calls is dropped, the rest of the content kept.
    """

    def __init__(self, syntax: CallSyntax) -> None:
        self._syntax = syntax
        self._text = ""
        self._pos = 0
        self._mode = _Mode.CONTENT
        self._pending = ""  # whitespace not sent yet: it may only separate content from a call
        self._content_seen = False
        self._calls = 0
        self._region_start = 0
        self._region_calls = 0
        self._in_array = False
        self._call: _Call | None = None

    @property
    def calls(self) -> int:
        """How many calls have been announced."""
        return self._calls

    def feed(self, text: str) -> list[ToolStreamEvent]:
        self._text += text
        return self._run(final=False)

    def finish(self) -> list[ToolStreamEvent]:
        out = self._run(final=True)
        if self._pending and not self._calls:
            out.append(self._pending)
        self._pending = ""
        return out

    def _run(self, final: bool) -> list[ToolStreamEvent]:
        out: list[ToolStreamEvent] = []
        steps: dict[_Mode, Callable[[list[ToolStreamEvent], bool], bool]] = {
            _Mode.CONTENT: self._content,
            _Mode.OPEN: self._open,
            _Mode.OBJECT: self._object,
            _Mode.BETWEEN: self._between,
        }
        while steps[self._mode](out, final):
            pass
        return out

    # -- content ------------------------------------------------------------

    def _say(self, text: str, out: list[ToolStreamEvent]) -> None:
        """Content out, holding back trailing whitespace."""
        whole = self._pending + text
        body = whole.rstrip(_WS)
        if not body:
            self._pending = whole
            return
        self._pending = whole[len(body) :]
        if not self._content_seen and self._calls:
            body = body.lstrip(_WS)  # whitespace between a call and the first content
        out.append(body)
        self._content_seen = True

    def _content(self, out: list[ToolStreamEvent], final: bool) -> bool:
        text, pos = self._text, self._pos
        if pos >= len(text):
            return False
        found, marker = -1, ""
        for candidate in self._syntax.markers:
            at = text.find(candidate, pos)
            if at >= 0 and (found < 0 or at < found):
                found, marker = at, candidate
        if self._syntax.bare and not self._content_seen:
            rest = text[pos:]
            body = rest.lstrip(_WS)
            if body.startswith("{") and (found < 0 or pos + len(rest) - len(body) < found):
                found, marker = pos + len(rest) - len(body), ""
            elif not body and not final:
                self._say(rest, out)  # only whitespace so far: a call may still start
                self._pos = len(text)
                return False
        if found >= 0:
            self._say(text[pos:found], out)
            self._region_start, self._region_calls, self._in_array = found, 0, False
            if marker:
                self._pos, self._mode = found + len(marker), _Mode.OPEN
            else:
                self._start_call(found)
            return True
        end = len(text) if final else len(text) - self._partial_marker(text, pos)
        self._say(text[pos:end], out)
        self._pos = end
        return False

    def _partial_marker(self, text: str, pos: int) -> int:
        """Length of the longest start of a marker that ``text`` ends with."""
        longest = 0
        for marker in self._syntax.markers:
            for k in range(min(len(marker) - 1, len(text) - pos), longest, -1):
                if text.endswith(marker[:k]):
                    longest = k
                    break
        return longest

    # -- the call region ----------------------------------------------------

    def _skip(self, chars: str) -> None:
        text, pos = self._text, self._pos
        while pos < len(text) and text[pos] in chars:
            pos += 1
        self._pos = pos

    def _open(self, out: list[ToolStreamEvent], final: bool) -> bool:
        self._skip(_WS)
        if self._pos >= len(self._text):
            return self._not_a_call(out) if final else False
        ch = self._text[self._pos]
        if ch == "[" and self._syntax.array and not self._in_array:
            self._in_array = True
            self._pos += 1
            return True
        if ch == "{":
            self._start_call(self._pos)
            return True
        return self._not_a_call(out)

    def _start_call(self, at: int) -> None:
        self._call = _Call(at)
        self._pos, self._mode = at, _Mode.OBJECT

    def _between(self, out: list[ToolStreamEvent], final: bool) -> bool:
        self._skip(_WS + ("," if self._in_array else ";"))
        text, pos = self._text, self._pos
        if pos >= len(text):
            if final:
                self._mode = _Mode.CONTENT
            return False
        close = self._syntax.close
        if text[pos] == "{":
            self._start_call(pos)
        elif self._in_array and text[pos] == "]":
            self._pos, self._mode = pos + 1, _Mode.CONTENT
        elif close and text.startswith(close, pos):
            self._pos, self._mode = pos + len(close), _Mode.CONTENT
        elif close and not final and close.startswith(text[pos:]):
            return False  # maybe the close marker, cut off
        else:
            self._mode = _Mode.CONTENT
        return True

    def _not_a_call(self, out: list[ToolStreamEvent]) -> bool:
        """What was held back since the region (or, after calls in it, this object)
        started is content; carry on just after its first character."""
        start = self._region_start
        if self._region_calls and self._call is not None:
            start = self._call.start
        self._say(self._text[start], out)
        self._pos, self._mode, self._call = start + 1, _Mode.CONTENT, None
        return True

    def _object(self, out: list[ToolStreamEvent], final: bool) -> bool:
        assert self._call is not None
        return self._read_call(self._call, out, final)

    def _read_call(self, call: _Call, out: list[ToolStreamEvent], final: bool) -> bool:
        text = self._text
        scanner = call.scanner
        while True:
            event = scanner.scan(text)
            if event is ScanEvent.MORE:
                self._send_arguments(call, out, scanner.pos)
                if not final:
                    self._pos = scanner.pos
                    return False
                if not call.committed:
                    return self._not_a_call(out)
                self._pos, self._mode, self._call = len(text), _Mode.CONTENT, None
                return False
            if event is ScanEvent.ERROR:
                if not call.committed:
                    return self._not_a_call(out)
                self._send_arguments(call, out, scanner.pos)
                self._pos, self._mode, self._call = scanner.pos, _Mode.CONTENT, None
                return True
            if event is ScanEvent.KEY:
                call.key = scanner.key
            elif event is ScanEvent.VALUE_BEGIN:
                if call.key in _ARGUMENT_KEYS and call.args_start < 0:
                    call.args_start = scanner.value_start
                    if text[call.args_start] not in '{"':
                        return self._not_a_call(out)
            elif event is ScanEvent.VALUE_END:
                if not self._value_end(call, text, scanner.value_start, scanner.value_end):
                    return self._not_a_call(out)
            elif event is ScanEvent.DONE:
                if call.name is None:
                    return self._not_a_call(out)
                if call.args_start < 0:
                    call.decoded_args = "{}"
                if not call.committed:
                    self._commit(call, out)
                self._send_arguments(call, out, scanner.end)
                self._pos, self._mode, self._call = scanner.end, _Mode.BETWEEN, None
                return True
            if not call.committed and call.name is not None and self._arguments_known(call, text):
                self._commit(call, out)

    def _value_end(self, call: _Call, text: str, start: int, end: int) -> bool:
        """A top-level member was read; ``False`` if it rules out a call."""
        if call.key == "name" and call.name is None:
            name = json.loads(text[start:end]) if text[start] == '"' else None
            if not isinstance(name, str):
                return False
            call.name = name
        elif call.args_start == start:
            call.args_end = end
            if text[start] == '"':
                inner = json.loads(text[start:end])
                try:
                    decoded = json.loads(inner)
                except ValueError:
                    return False
                if not isinstance(decoded, dict):
                    return False
                call.decoded_args = inner
        return True

    @staticmethod
    def _arguments_known(call: _Call, text: str) -> bool:
        if call.args_start < 0:
            return False
        return text[call.args_start] == "{" or call.args_end >= 0

    def _commit(self, call: _Call, out: list[ToolStreamEvent]) -> None:
        call.committed, call.index = True, self._calls
        self._calls += 1
        self._region_calls += 1
        if not self._content_seen:
            self._pending = ""
        out.append(ToolCallFragment(call.index, name=call.name))

    def _send_arguments(self, call: _Call, out: list[ToolStreamEvent], upto: int) -> None:
        if not call.committed:
            return
        if call.decoded_args is not None:
            args = call.decoded_args
        elif call.args_start >= 0:
            end = call.args_end if call.args_end >= 0 else upto
            args = self._text[call.args_start : end]
        else:
            return
        if len(args) > call.sent:
            out.append(ToolCallFragment(call.index, arguments=args[call.sent :]))
            call.sent = len(args)
