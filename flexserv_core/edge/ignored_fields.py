"""The ``X-FlexServ-Ignored-Fields`` response header: the request fields dropped unread.

Under the default "trim unexpected fields" mode a body field this server does not
know (at any depth: ``messages[0].foo``) is dropped, and the client would otherwise
learn of it only from the server's log. Request validation records the dropped
fields' paths here (:func:`note_ignored`), and the edge adds them to the response's
headers (:func:`header_value`), on streaming and non-streaming responses and on
error responses alike.

The paths come from the client, so the value is bounded: each path is
percent-encoded (a header carries no control characters or non-ASCII text), paths
are joined by ``,``, and at most :data:`MAX_CHARS` characters are listed; when some
paths do not fit, the last item is ``+N``, the number of paths left out (``+``
itself is always encoded in a path, so it cannot be mistaken for one).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Final
from urllib.parse import quote

HEADER: Final = "x-flexserv-ignored-fields"
#: Most characters of the header's value (the ``+N`` item included).
MAX_CHARS: Final = 1024

_current: ContextVar[list[Sequence[str]] | None] = ContextVar("flexserv_ignored_fields", default=None)


def collecting() -> tuple[list[Sequence[str]], object]:
    """Start collecting the current request's ignored fields: ``(collector, token)``;
    pass the token to :func:`stop_collecting` when the request is done."""
    collector: list[Sequence[str]] = []
    return collector, _current.set(collector)


def stop_collecting(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]


def note_ignored(paths: Sequence[str]) -> None:
    """Record the paths of fields the request being served had dropped (no-op
    outside a request, or for none)."""
    collector = _current.get()
    if collector is not None and paths:
        collector.append(paths)


def header_value(collected: Sequence[Sequence[str]], max_chars: int = MAX_CHARS) -> str | None:
    """The header's value for the paths collected (``None``: no field was ignored)."""
    total = sum(len(paths) for paths in collected)
    if not total:
        return None
    items: list[str] = []
    used = 0
    for paths in collected:
        for path in paths:
            item = quote(path, safe="[]")
            left = total - len(items) - 1  # paths after this one
            # room for this item, and for the "+N" that ends the value if more do not fit
            reserve = len(f",+{left}") if left else 0
            cost = len(item) + (1 if items else 0)
            if used + cost + reserve > max_chars:
                return ",".join([*items, f"+{total - len(items)}"])
            items.append(item)
            used += cost
    return ",".join(items)
