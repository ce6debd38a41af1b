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

import lazy_loader

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

__getattr__, __dir__, _ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "base": ["ParsedToolCall", "ParsedToolOutput", "ToolParser"],
        "json_calls": ["CallSyntax"],
        "parsers": ["JsonToolParser"],
        "stream": ["ToolCallFragment", "ToolCallStream", "ToolStreamEvent"],
    },
)
