"""An incremental JSON object checker that says where the object's top-level
members lie, so a tool-call parser can stream a call's arguments while the model
is still writing them."""

from __future__ import annotations

import json
import re
from enum import Enum, auto

__all__ = ["JsonObjectScanner", "ScanEvent"]

_WS = frozenset(" \t\r\n")
_SCALAR_CHARS = frozenset("0123456789+-.eEtruefalsn")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")


class ScanEvent(Enum):
    """What :meth:`JsonObjectScanner.scan` stopped for."""

    MORE = auto()  #: the text ran out; feed more
    KEY = auto()  #: a top-level key was read (:attr:`JsonObjectScanner.key`)
    VALUE_BEGIN = auto()  #: a top-level value starts at :attr:`JsonObjectScanner.value_start`
    VALUE_END = auto()  #: that value ends at :attr:`JsonObjectScanner.value_end` (exclusive)
    DONE = auto()  #: the object closed at :attr:`JsonObjectScanner.end` (exclusive)
    ERROR = auto()  #: the text is not JSON at :attr:`JsonObjectScanner.pos`


class _S(Enum):
    OPEN = auto()  # expecting the object's own "{"
    VALUE = auto()
    VALUE_OR_CLOSE = auto()  # just after "["
    KEY_OR_CLOSE = auto()  # just after "{"
    KEY = auto()  # after "," in an object
    COLON = auto()
    AFTER = auto()  # after a value: "," or the container's close
    STRING = auto()
    ESCAPE = auto()
    UNICODE = auto()
    SCALAR = auto()
    DONE = auto()
    ERROR = auto()


class JsonObjectScanner:
    """Checks one JSON object in ``text`` from index ``start``, a character at a time,
    stopping at every top-level key and value boundary.

    The caller passes the whole text each time (it only grows); :attr:`pos` is how
    far the scan got. Strings are checked as strictly as :func:`json.loads` does
    (no raw control characters, valid escapes); numbers and literals are checked
    when they end.
    """

    __slots__ = (
        "_hex_left",
        "_is_key",
        "_stack",
        "_state",
        "_token_start",
        "end",
        "key",
        "pos",
        "value_end",
        "value_start",
    )

    def __init__(self, start: int) -> None:
        self.pos = start
        self._state = _S.OPEN
        self._stack: list[str] = []
        self._is_key = False
        self._token_start = start
        self._hex_left = 0
        #: the top-level key whose value comes next (or is being read)
        self.key: str | None = None
        self.value_start = -1
        self.value_end = -1
        self.end = -1

    @property
    def finished(self) -> bool:
        return self._state in (_S.DONE, _S.ERROR)

    def scan(self, text: str) -> ScanEvent:
        """Advance through ``text`` until an event or its end."""
        n = len(text)
        while self.pos < n:
            event = self._step(text, text[self.pos])
            if event is not None:
                return event
        return ScanEvent.MORE

    def _fail(self) -> ScanEvent:
        self._state = _S.ERROR
        return ScanEvent.ERROR

    def _step(self, text: str, ch: str) -> ScanEvent | None:
        state = self._state
        if state is _S.STRING:
            if ch == '"':
                return self._string_end(text)
            if ch == "\\":
                self._state = _S.ESCAPE
            elif ch < " ":
                return self._fail()
            self.pos += 1
            return None
        if state is _S.ESCAPE:
            if ch == "u":
                self._state, self._hex_left = _S.UNICODE, 4
            elif ch in _ESCAPES:
                self._state = _S.STRING
            else:
                return self._fail()
            self.pos += 1
            return None
        if state is _S.UNICODE:
            if ch not in _HEX:
                return self._fail()
            self._hex_left -= 1
            if not self._hex_left:
                self._state = _S.STRING
            self.pos += 1
            return None
        if state is _S.SCALAR:
            if ch in _SCALAR_CHARS:
                self.pos += 1
                return None
            if not _SCALAR.fullmatch(text, self._token_start, self.pos):
                return self._fail()
            self._state = _S.AFTER  # ``ch`` is read again in that state
            return self._value_end(self.pos)
        if ch in _WS and state is not _S.OPEN:
            self.pos += 1
            return None
        if state is _S.OPEN:
            if ch != "{":
                return self._fail()
            self._stack.append("{")
            self._state = _S.KEY_OR_CLOSE
            self.pos += 1
            return None
        if state is _S.KEY_OR_CLOSE or state is _S.KEY:
            if ch == '"':
                self._state, self._is_key, self._token_start = _S.STRING, True, self.pos
                self.pos += 1
                return None
            if ch == "}" and state is _S.KEY_OR_CLOSE:
                return self._close()
            return self._fail()
        if state is _S.COLON:
            if ch != ":":
                return self._fail()
            self._state = _S.VALUE
            self.pos += 1
            return None
        if state is _S.AFTER:
            top = self._stack[-1]
            if ch == ",":
                self._state = _S.KEY if top == "{" else _S.VALUE
                self.pos += 1
                return None
            if (ch == "}" and top == "{") or (ch == "]" and top == "["):
                return self._close()
            return self._fail()
        if state is _S.VALUE_OR_CLOSE and ch == "]":
            return self._close()
        return self._value(ch)  # VALUE or VALUE_OR_CLOSE

    def _value(self, ch: str) -> ScanEvent | None:
        top_level = len(self._stack) == 1
        start = self.pos
        if ch in "{[":
            self._stack.append(ch)
            self._state = _S.KEY_OR_CLOSE if ch == "{" else _S.VALUE_OR_CLOSE
        elif ch == '"':
            self._state, self._is_key, self._token_start = _S.STRING, False, start
        elif ch in "-0123456789tfn":
            self._state, self._token_start = _S.SCALAR, start
        else:
            return self._fail()
        self.pos += 1
        if top_level:
            self.value_start = start
            return ScanEvent.VALUE_BEGIN
        return None

    def _string_end(self, text: str) -> ScanEvent | None:
        self.pos += 1
        if self._is_key:
            self._state = _S.COLON
            if len(self._stack) == 1:
                self.key = json.loads(text[self._token_start : self.pos])
                return ScanEvent.KEY
            return None
        self._state = _S.AFTER
        return self._value_end(self.pos)

    def _close(self) -> ScanEvent | None:
        self._stack.pop()
        self.pos += 1
        if not self._stack:
            self._state, self.end = _S.DONE, self.pos
            return ScanEvent.DONE
        self._state = _S.AFTER
        return self._value_end(self.pos)

    def _value_end(self, end: int) -> ScanEvent | None:
        if len(self._stack) == 1:
            self.value_end = end
            return ScanEvent.VALUE_END
        return None
