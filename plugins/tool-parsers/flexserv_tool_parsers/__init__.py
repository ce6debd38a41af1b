"""FlexServ's tool calling: the parsers' contract (:class:`ToolParser`, its stream
types), the per-app registry and the built-in formats ``hermes``, ``llama3_json``
and ``mistral``. A plugin that adds a format subclasses :class:`ToolParser` and
returns the class from ``flexserv_register_tool_parsers`` (a hook this
distribution owns)."""

from flexserv_tool_parsers.base import ParsedToolCall, ParsedToolOutput, ToolParser, ToolParsers, guess_tool_parser
from flexserv_tool_parsers.calling import FunctionCalling, FunctionPlan, ToolStreamer
from flexserv_tool_parsers.json_calls import CallSyntax, JsonCallStream, parse_with_stream
from flexserv_tool_parsers.parsers import (
    BUILT_IN,
    HermesToolParser,
    JsonToolParser,
    Llama3JsonToolParser,
    MistralToolParser,
    call_schema,
)
from flexserv_tool_parsers.stream import BufferedCallStream, ToolCallFragment, ToolCallStream, ToolStreamEvent

__all__ = [
    "BUILT_IN",
    "BufferedCallStream",
    "CallSyntax",
    "FunctionCalling",
    "FunctionPlan",
    "HermesToolParser",
    "JsonCallStream",
    "JsonToolParser",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "ParsedToolCall",
    "ParsedToolOutput",
    "ToolCallFragment",
    "ToolCallStream",
    "ToolParser",
    "ToolParsers",
    "ToolStreamEvent",
    "ToolStreamer",
    "call_schema",
    "guess_tool_parser",
    "parse_with_stream",
]
