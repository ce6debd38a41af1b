"""FlexServ's tool calling, and the library of tool-call formats: a plugin that adds
a format subclasses :class:`ToolParser` (or, for calls written as JSON objects,
:class:`JsonToolParser` with a :class:`CallSyntax`; its parse results :class:`ParsedToolOutput`
and :class:`ParsedToolCall`; its stream a :class:`ToolCallStream` of
:class:`ToolStreamEvent` s, calls as :class:`ToolCallFragment` s) and returns the class
from ``flexserv_register_tool_parsers`` (a hook this distribution owns). These names
are the public API; the submodules (the built-in formats, the per-app registry, the
tool calling the plugin serves) are internal.

The names load on first use: every plugin manager imports this package for the
hook's entry point (:mod:`flexserv_tool_parsers.hookspecs`), which should cost
nothing, ``-p no:tool-parsers`` or not."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flexserv_tool_parsers.base import ParsedToolCall, ParsedToolOutput, ToolParser
    from flexserv_tool_parsers.json_calls import CallSyntax
    from flexserv_tool_parsers.parsers import JsonToolParser
    from flexserv_tool_parsers.stream import ToolCallFragment, ToolCallStream, ToolStreamEvent

__all__ = [
    "CallSyntax",
    "JsonToolParser",
    "ParsedToolCall",
    "ParsedToolOutput",
    "ToolCallFragment",
    "ToolCallStream",
    "ToolParser",
    "ToolStreamEvent",
]

_LAZY = {
    **{name: "flexserv_tool_parsers.base" for name in ("ParsedToolCall", "ParsedToolOutput", "ToolParser")},
    "CallSyntax": "flexserv_tool_parsers.json_calls",
    "JsonToolParser": "flexserv_tool_parsers.parsers",
    **{name: "flexserv_tool_parsers.stream" for name in ("ToolCallFragment", "ToolCallStream", "ToolStreamEvent")},
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flexserv_tool_parsers' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
