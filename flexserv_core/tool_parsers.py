"""Tool-call formats per model family: parse a completion into calls, and say what
constrained decoding must enforce when a call is required.

A model family writes its calls in its own syntax; a :class:`ToolParser` knows
one. Built in:

* ``hermes`` (Hermes, Qwen 2/2.5/3, SmolLM3 and most ChatML tool templates)::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

* ``llama3_json`` (Llama 3.1+ JSON tool calling): ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``, several joined by ``; ``;
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

A model picks one with the model option ``tool_parser`` (``[[models]]``
``options = {tool_parser = "mistral"}``); without it the parser is guessed from
the chat template (:func:`guess_tool_parser`), and ``hermes`` is the fallback.

A plugin adds a format by subclassing :class:`ToolParser` and calling
:func:`register_tool_parser` when it is imported (its plugin module runs at
start-up); the name is then valid in ``tool_parser`` options.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flexserv_core.backends.base import Constraint
from flexserv_core.tool_call_stream import (
    BufferedCallStream,
    CallSyntax,
    JsonCallStream,
    ToolCallStream,
    parse_with_stream,
)

__all__ = [
    "HermesToolParser",
    "JsonToolParser",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "ParsedToolCall",
    "ParsedToolOutput",
    "ToolParser",
    "get_tool_parser",
    "guess_tool_parser",
    "register_tool_parser",
    "tool_parser_names",
]


@dataclass(slots=True)
class ParsedToolCall:
    name: str
    #: the arguments as JSON text (what OpenAI's ``function.arguments`` carries)
    arguments: str


@dataclass(slots=True)
class ParsedToolOutput:
    """``content``: text outside the calls (``None`` when there is none)."""

    content: str | None
    calls: list[ParsedToolCall] = field(default_factory=list)


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


class ToolParser:
    """One model family's tool-call syntax. Subclasses set ``name`` and ``markers``."""

    name: ClassVar[str]
    #: Text whose appearance in the output means a call may be starting (streaming
    #: holds the output back from there); empty for formats that start with ``{``.
    markers: ClassVar[tuple[str, ...]] = ()

    def parse(self, text: str) -> ParsedToolOutput:
        """Split a whole completion into content and calls; text that is not a
        well-formed call stays content."""
        raise NotImplementedError

    def constraint(self, tools: list[dict[str, Any]], *, parallel: bool) -> Constraint:
        """What the output must match so that it is one call (or, with ``parallel``,
        one or more calls) to ``tools``, each with arguments valid for its schema."""
        raise NotImplementedError

    def call_start(self, text: str) -> int | None:
        """Where in ``text`` a call starts (or may start), for streaming; ``None``: not yet."""
        for marker in self.markers:
            at = text.find(marker)
            if at >= 0:
                return at
            for k in range(len(marker) - 1, 0, -1):  # a marker cut at the end of the text so far
                if text.endswith(marker[:k]):
                    return len(text) - k
        return None

    def format_calls(self, calls: list[ParsedToolCall]) -> str:
        """Calls written the way this family writes them (history for templates without tool support)."""
        raise NotImplementedError

    def stream(self) -> ToolCallStream:
        """A parser for one output fed piece by piece (streaming). This default holds
        the output back from :meth:`call_start` and :meth:`parse` s the rest at the
        end; a format that can do better overrides it."""

        def parse(text: str) -> tuple[str | None, list[tuple[str, str]]]:
            parsed = self.parse(text)
            return parsed.content, [(c.name, c.arguments) for c in parsed.calls]

        return BufferedCallStream(self.call_start, parse)


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
    syntax = CallSyntax(markers=markers, close="</tool_call>")

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


_lock = threading.Lock()
_PARSERS: dict[str, type[ToolParser]] = {p.name: p for p in (HermesToolParser, Llama3JsonToolParser, MistralToolParser)}


def register_tool_parser(parser: type[ToolParser]) -> None:
    """Make ``parser`` selectable by its ``name`` (a plugin calls this when imported)."""
    with _lock:
        _PARSERS[parser.name] = parser


def tool_parser_names() -> list[str]:
    with _lock:
        return sorted(_PARSERS)


def get_tool_parser(name: str) -> ToolParser:
    """A parser instance by name; ``KeyError`` if none is registered under it."""
    with _lock:
        return _PARSERS[name]()


def guess_tool_parser(chat_template: str | None) -> str:
    """The format a chat template writes calls in, from the markers it mentions."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3_json"
    return "hermes"
