"""Tool-call formats per model family: the :class:`ToolParser` type and the
per-app lookup of the parsers plugins register.

A model family writes its calls in its own syntax; a :class:`ToolParser` knows
one. Plugins register parser classes with ``flexserv_register_tool_parsers`` (a
hook this distribution owns); each app's tool calling holds its own set
(:class:`ToolParsers`), ``flexserv tool-parsers`` lists them and ``-p no:NAME``
removes a plugin's parsers. This plugin brings ``hermes``, ``llama3_json`` and
``mistral``.

A model picks one with the model option ``tool_parser`` (``[[models]]``
``options = {tool_parser = "mistral"}``); without it the parser is guessed from
the chat template (:func:`guess_tool_parser`), and ``hermes`` is the fallback. A
request with ``tools`` for a model whose parser is not registered is a 400 that
names the parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flexserv_core import Constraint
from flexserv_tool_parsers.stream import BufferedCallStream, ToolCallStream

__all__ = ["ParsedToolCall", "ParsedToolOutput", "ToolParser", "ToolParsers", "guess_tool_parser"]


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


class ToolParser:
    """One model family's tool-call syntax. Subclasses set ``name`` and ``markers``."""

    name: ClassVar[str]
    #: Text whose appearance in the output means a call may be starting (streaming
    #: holds the output back from there); empty for formats that start with ``{``.
    markers: ClassVar[tuple[str, ...]] = ()
    #: Text that ends a call (``</tool_call>``), for formats that close their calls: the
    #: start of it (or of a marker) left at the end of an output that ``max_tokens`` cut
    #: is call syntax, never content.
    close_markers: ClassVar[tuple[str, ...]] = ()

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


class ToolParsers:
    """One app's tool parsers by name, with the plugin that registered each
    (built once at start-up from ``flexserv_register_tool_parsers``; read-only after)."""

    def __init__(self, by_plugin: Mapping[str, Sequence[type[ToolParser]]] | None = None) -> None:
        self._parsers: dict[str, type[ToolParser]] = {}
        self.plugin_of: dict[str, str] = {}
        for plugin, parsers in (by_plugin or {}).items():
            for parser in parsers:
                self._parsers.setdefault(parser.name, parser)  # the earlier in call order wins
                self.plugin_of.setdefault(parser.name, plugin)

    def names(self) -> list[str]:
        return sorted(self._parsers)

    def of_plugin(self, plugin: str) -> list[str]:
        """The names ``plugin`` registered (and that it won)."""
        return sorted(name for name, owner in self.plugin_of.items() if owner == plugin)

    def get(self, name: str) -> ToolParser:
        """A parser instance by name; ``KeyError`` if none is registered under it."""
        return self._parsers[name]()


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
