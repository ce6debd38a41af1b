"""Warnings about request fields this server does not know, bounded.

A field OpenAI does not define is dropped with one warning per endpoint and
field name (array indexes folded: ``messages[].colour``). Names come from
clients, so what is remembered and what is logged are both bounded: at most
:data:`MAX_REMEMBERED` names are remembered for the process's life, names are cut
to :data:`~flexserv_core.errors.QUOTE_CHARS` characters, a request's first
:data:`SCANNED_PER_REQUEST` unknown fields are looked at and at most
:data:`LINES_PER_REQUEST` of them logged, then one line counts the rest. A body
with hundreds of thousands of distinct unknown keys costs a handful of lines.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Final

from flexserv_core.errors import quote

log = logging.getLogger(__name__)

MAX_REMEMBERED: Final = 1024
SCANNED_PER_REQUEST: Final = 64
LINES_PER_REQUEST: Final = 5

_INDEX = re.compile(r"\[\d+\]")


class UnknownFieldWarnings:
    """The set of field names already warned about, and the bounded warning."""

    def __init__(
        self,
        *,
        max_remembered: int = MAX_REMEMBERED,
        scanned_per_request: int = SCANNED_PER_REQUEST,
        lines_per_request: int = LINES_PER_REQUEST,
    ) -> None:
        self.max_remembered = max_remembered
        self.scanned_per_request = scanned_per_request
        self.lines_per_request = lines_per_request
        self._warned: set[tuple[str, str]] = set()
        self._full_noted = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._warned)

    def warn(self, endpoint: str, paths: Sequence[str]) -> None:
        """Log the names among ``paths`` (one request's unknown fields) not yet warned about."""
        if not paths:
            return
        new: list[str] = []
        full_now = False
        examined = 0
        with self._lock:
            for path in paths[: self.scanned_per_request]:
                examined += 1
                key = (endpoint, quote(_INDEX.sub("[]", path)))
                if key in self._warned or key[1] in new:
                    continue
                if len(self._warned) < self.max_remembered:
                    self._warned.add(key)
                elif not self._full_noted:
                    self._full_noted = full_now = True
                new.append(key[1])
                if len(new) == self.lines_per_request:
                    break
        if full_now:
            log.warning(
                "%d unknown field names remembered: further ones are logged each time they come (at most %d lines"
                " a request)",
                self.max_remembered,
                self.lines_per_request + 1,
            )
        for pattern in new:
            log.warning(
                "ignoring field %r of %s requests: not a parameter this server knows (logged once)", pattern, endpoint
            )
        # the fields not looked at; those already warned about were named before
        if new and len(paths) > examined:
            log.warning(
                "ignoring %d more unknown field(s) of this %s request, not listed", len(paths) - examined, endpoint
            )


#: The server process's warnings (field names are per endpoint, so one set serves every app).
UNKNOWN_FIELDS = UnknownFieldWarnings()
