"""FlexServ's built-in tool-call formats: ``hermes``, ``llama3_json`` and ``mistral``."""

from flexserv_tool_parsers.json_calls import CallSyntax, JsonCallStream, parse_with_stream
from flexserv_tool_parsers.parsers import (
    BUILT_IN,
    HermesToolParser,
    JsonToolParser,
    Llama3JsonToolParser,
    MistralToolParser,
    call_schema,
)

__all__ = [
    "BUILT_IN",
    "CallSyntax",
    "HermesToolParser",
    "JsonCallStream",
    "JsonToolParser",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "call_schema",
    "parse_with_stream",
]
