"""The built-in tool-call formats:

* ``hermes`` (Hermes, Qwen 2/2.5/3, SmolLM3 and most ChatML tool templates)::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

* ``llama3_json`` (Llama 3.1+ JSON tool calling): ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``, several joined by ``; ``;
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from flexserv_core import Constraint
from flexserv_tool_parsers.base import ParsedToolCall, ParsedToolOutput, ToolParser
from flexserv_tool_parsers.json_calls import CallSyntax, JsonCallStream, parse_with_stream

__all__ = ["HermesToolParser", "JsonToolParser", "Llama3JsonToolParser", "MistralToolParser", "call_schema"]


def call_schema(tools: list[dict[str, Any]], arguments_key: str = "arguments") -> dict[str, Any]:
    """The JSON schema of one call to any of ``tools`` (OpenAI function dicts)."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["name"]},
                arguments_key: tool.get("parameters") or {"type": "object"},
            },
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


class JsonToolParser(ToolParser):
    """A format that writes each call as a JSON object with ``name`` and ``arguments``
    (or ``parameters``) in the markup :attr:`syntax` describes. Its calls stream
    incrementally, and :meth:`parse` runs the same machine over the whole output, so
    both give the same calls with the same ``arguments`` text: the JSON the model
    wrote (arguments written as a JSON string are unwrapped)."""

    syntax: ClassVar[CallSyntax]

    def stream(self) -> JsonCallStream:
        return JsonCallStream(self.syntax)

    def parse(self, text: str) -> ParsedToolOutput:
        content, calls = parse_with_stream(self.stream(), text)
        return ParsedToolOutput(content=content, calls=[ParsedToolCall(n, a) for n, a in calls])


class HermesToolParser(JsonToolParser):
    name = "hermes"
    markers = ("<tool_call>",)
    close_markers = ("</tool_call>",)
    syntax = CallSyntax(markers=markers, close=close_markers[0])

    def constraint(self, tools: list[dict[str, Any]], *, parallel: bool) -> Constraint:
        return Constraint(
            kind="json_schema",
            spec=json.dumps(call_schema(tools)),
            prefix="<tool_call>\n",
            suffix="\n</tool_call>",
            repeat=parallel,
            separator="\n",
            param="tools",
        )

    def format_calls(self, calls: list[ParsedToolCall]) -> str:
        return "\n".join(
            f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n</tool_call>' for c in calls
        )


class Llama3JsonToolParser(JsonToolParser):
    name = "llama3_json"
    markers = ("<|python_tag|>",)
    syntax = CallSyntax(markers=markers, bare=True)

    def constraint(self, tools: list[dict[str, Any]], *, parallel: bool) -> Constraint:
        return Constraint(
            kind="json_schema",
            spec=json.dumps(call_schema(tools, "parameters")),
            repeat=parallel,
            separator="; ",
            param="tools",
        )

    def format_calls(self, calls: list[ParsedToolCall]) -> str:
        return "; ".join(f'{{"name": {json.dumps(c.name)}, "parameters": {c.arguments}}}' for c in calls)


class MistralToolParser(JsonToolParser):
    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    syntax = CallSyntax(markers=markers, array=True)

    def constraint(self, tools: list[dict[str, Any]], *, parallel: bool) -> Constraint:
        schema: dict[str, Any] = {"type": "array", "items": call_schema(tools), "minItems": 1}
        if not parallel:
            schema["maxItems"] = 1
        return Constraint(kind="json_schema", spec=json.dumps(schema), prefix="[TOOL_CALLS]", param="tools")

    def format_calls(self, calls: list[ParsedToolCall]) -> str:
        items = ", ".join(f'{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}' for c in calls)
        return f"[TOOL_CALLS][{items}]"


BUILT_IN: list[type[ToolParser]] = [HermesToolParser, Llama3JsonToolParser, MistralToolParser]
