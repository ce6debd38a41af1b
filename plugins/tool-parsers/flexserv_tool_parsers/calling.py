"""Tool calling on ``/v1/chat/completions`` (and the Responses API, which plans
through it): check the request, render tools and call history for the chat
template, enforce ``required``/named calls, turn output into ``tool_calls``
(whole, or as OpenAI's incremental deltas when streaming). :class:`FunctionCalling`
is what this plugin answers ``flexserv_tool_calling`` with (the core's seam,
:class:`flexserv_core.ToolCalling`).

Templates that know tools (they mention ``tools``) get them natively:
``apply_chat_template(messages, tools=...)`` with assistant ``tool_calls`` and
``tool`` messages (``tool_call_id``) kept. For a template without tool support
the :data:`FALLBACK_PROMPT` describes the tools in a system message, past calls
are written into assistant content in the parser's syntax and tool results become
user messages (see docs/api.md, "Tool calling").
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flexserv_core import (
    ChatCompletionRequest,
    ChatMessage,
    Constraint,
    ConstraintCompiler,
    FlexServPluginManager,
    InvalidRequest,
    ModelSpec,
    NamedToolChoice,
    Settings,
    TextGenerationModel,
    ToolCall,
    ToolCallDelta,
    ToolCallDeltaFunction,
    ToolCallFunction,
    call_hook,
    hook_error,
)
from flexserv_tool_parsers.base import ParsedToolCall, ToolParser, ToolParsers, guess_tool_parser
from flexserv_tool_parsers.stream import ToolStreamEvent

#: The hook this distribution owns (:mod:`flexserv_tool_parsers.hookspecs`), and the
#: name this plugin is registered under.
HOOK = "flexserv_register_tool_parsers"
OWN_NAME = "tool-parsers"
#: System text for templates without tool support; ``{tools}`` is the JSON list of
#: function definitions, ``{example}`` one call in the model's tool-call syntax.
FALLBACK_PROMPT = (
    "You can call functions. Their JSON Schema definitions:\n{tools}\n"
    "To call a function, reply with the call only, written exactly like this example:\n{example}\n"
    "Results of calls come back in messages that start with 'Result of'."
)


def registered_parsers(pm: FlexServPluginManager, settings: Settings) -> dict[str, list[type[ToolParser]]]:
    """Each plugin's tool-parser classes (``flexserv_register_tool_parsers``), keyed by
    plugin name, this plugin's built-in formats first, then in call order; an item
    that is not a named :class:`ToolParser` subclass, or a name registered twice,
    fails naming the plugin (for a clash with a built-in name, the other plugin)."""
    out: dict[str, list[type[ToolParser]]] = {}
    owner: dict[str, str] = {}
    results = sorted(call_hook(pm, HOOK, {"settings": settings}), key=lambda result: result.plugin != OWN_NAME)
    for plugin, value in results:
        for item in value if isinstance(value, list | tuple) else [value]:
            if not (
                isinstance(item, type) and issubclass(item, ToolParser) and isinstance(getattr(item, "name", None), str)
            ):
                raise hook_error(pm, HOOK, plugin, f"returned {item!r}, expected ToolParser subclasses with a name")
            if item.name in owner:
                raise hook_error(
                    pm, HOOK, plugin, f"tool parser {item.name!r} is also registered by plugin {owner[item.name]!r}"
                )
            owner[item.name] = plugin
            out.setdefault(plugin, []).append(item)
    return out


class FunctionCalling:
    """One app's tool calling (what ``flexserv_tool_calling`` returns): its parsers,
    shared by every request."""

    def __init__(self, parsers: ToolParsers | Mapping[str, Sequence[type[ToolParser]]]) -> None:
        self.parsers = parsers if isinstance(parsers, ToolParsers) else ToolParsers(parsers)

    def plan(
        self,
        body: ChatCompletionRequest,
        model: TextGenerationModel,
        spec: ModelSpec,
        constraints: ConstraintCompiler | None,
    ) -> FunctionPlan | None:
        plan = plan_tools(body, model, spec, self.parsers, constraints)
        if plan is None and any(m.tool_calls or m.role == "tool" for m in body.messages):
            return FunctionPlan(parser=None, tools=[], choice="none", parallel=False, native=True)  # history only
        return plan


@dataclass(slots=True)
class FunctionPlan:
    """One request's tools (the core's :class:`flexserv_core.ToolPlan`); ``parser`` is
    ``None`` for a request without tools whose history holds calls."""

    parser: ToolParser | None
    tools: list[dict[str, Any]]
    #: "none", "auto", "required" or the name of the one function to call
    choice: str
    parallel: bool
    native: bool
    constraint: Constraint | None = None

    @property
    def parses(self) -> bool:
        return self.choice != "none"

    def render(self, entries: list[dict[str, Any]], messages: list[ChatMessage]) -> list[dict[str, Any]] | None:
        template_messages(entries, messages, self)
        return template_tools(self)

    def split(self, text: str) -> tuple[str | None, list[ToolCall], bool]:
        return split_output(self, text)

    def streamer(self) -> ToolStreamer:
        return ToolStreamer(self)

    @property
    def call_parser(self) -> ToolParser:
        """The parser, for a plan with tools."""
        assert self.parser is not None, "a plan without tools parses nothing"
        return self.parser


def _parser(spec: ModelSpec, model: TextGenerationModel, parsers: ToolParsers) -> ToolParser:
    name = spec.options.get("tool_parser") or guess_tool_parser(model.chat_template)
    try:
        return parsers.get(str(name))
    except KeyError:
        raise InvalidRequest(
            f"The model '{spec.name}' needs tool parser '{name}', which no plugin registered "
            f"(known: {', '.join(parsers.names()) or 'none'}).",
            param="tools",
            code="tool_parser_not_found",
        ) from None


def plan_tools(
    body: ChatCompletionRequest,
    model: TextGenerationModel,
    spec: ModelSpec,
    parsers: ToolParsers,
    constraints: ConstraintCompiler | None,
) -> FunctionPlan | None:
    """Check ``tools``/``tool_choice``/``parallel_tool_calls``; ``None`` without tools.
    Each tool's ``parameters`` are checked by ``constraints`` (the server's compiler)
    whatever ``tool_choice`` says; without one only their shape is."""
    if not body.tools:
        if body.tool_choice not in (None, "none"):
            raise InvalidRequest("'tool_choice' needs 'tools'.", param="tool_choice")
        return None
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(body.tools):
        fn = tool.function
        if fn.name in seen:
            raise InvalidRequest(f"Two tools are named '{fn.name}'.", param=f"tools[{i}].function.name")
        seen.add(fn.name)
        params = fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}}
        if params.get("type", "object") != "object":
            raise InvalidRequest(
                "A function's 'parameters' must be a JSON schema of type 'object'.",
                param=f"tools[{i}].function.parameters",
            )
        if constraints is not None:
            constraints.check_schema(params, f"tools[{i}].function.parameters")  # whatever tool_choice is
        entry: dict[str, Any] = {"name": fn.name}
        if fn.description is not None:
            entry["description"] = fn.description
        entry["parameters"] = params  # OpenAI's key order, which templates that dump tools show
        tools.append(entry)
    choice: str
    if isinstance(body.tool_choice, NamedToolChoice):
        choice = body.tool_choice.function.name
        if choice not in seen:
            raise InvalidRequest(f"tool_choice names '{choice}', which is not in 'tools'.", param="tool_choice")
    else:
        choice = body.tool_choice or "auto"
    parallel = body.parallel_tool_calls is not False
    parser = _parser(spec, model, parsers)
    plan = FunctionPlan(parser=parser, tools=tools, choice=choice, parallel=parallel, native=_native(model))
    if choice == "required":
        plan.constraint = parser.constraint(tools, parallel=parallel)
    elif choice not in ("none", "auto"):
        plan.constraint = parser.constraint([t for t in tools if t["name"] == choice], parallel=False)
    return plan


def _native(model: TextGenerationModel) -> bool:
    template = model.chat_template
    return bool(template) and "tools" in str(template)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def template_messages(entries: list[dict[str, Any]], messages: list[ChatMessage], plan: FunctionPlan | None) -> None:
    """Add tool-call history to the template ``entries`` (one per message, in place)."""
    names = {c.id: c.function.name for m in messages for c in (m.tool_calls or ())}
    native = plan is None or plan.native
    for entry, message in zip(entries, messages, strict=True):
        if message.tool_calls:
            if native:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
                    }
                    for c in message.tool_calls
                ]
            else:
                assert plan is not None  # not native
                written = plan.call_parser.format_calls(
                    [ParsedToolCall(c.function.name, c.function.arguments) for c in message.tool_calls]
                )
                entry["content"] = f"{entry['content']}\n{written}".strip()
        if message.role == "tool":
            name = names.get(message.tool_call_id or "", "")
            if native:
                entry["tool_call_id"] = message.tool_call_id
                entry["name"] = name
            else:
                entry["role"] = "user"
                entry["content"] = f"Result of {name} (call {message.tool_call_id}):\n{entry['content']}"
    if plan is not None and not plan.native and plan.choice != "none":
        _add_fallback_prompt(entries, plan)


def _add_fallback_prompt(entries: list[dict[str, Any]], plan: FunctionPlan) -> None:
    example = plan.call_parser.format_calls([ParsedToolCall("function_name", '{"argument": "value"}')])
    text = FALLBACK_PROMPT.format(tools=json.dumps(plan.tools, ensure_ascii=False), example=example)
    if entries and entries[0]["role"] == "system":
        entries[0]["content"] = f"{entries[0]['content']}\n\n{text}"
    else:
        entries.insert(0, {"role": "system", "content": text})


def template_tools(plan: FunctionPlan | None) -> list[dict[str, Any]] | None:
    """``tools`` for ``apply_chat_template`` (native templates only)."""
    if plan is None or not plan.native or plan.choice == "none":
        return None
    return [{"type": "function", "function": t} for t in plan.tools]


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def _limit(plan: FunctionPlan, calls: list[ParsedToolCall]) -> list[ParsedToolCall]:
    return calls if plan.parallel else calls[:1]


def _partial_markup(parser: ToolParser, text: str) -> int:
    """Length of the longest strict start of a call's opening or closing markup that
    ``text`` ends with (``</`` of ``</tool_call>``): what ``max_tokens`` left of it."""
    longest = 0
    for marker in (*parser.markers, *parser.close_markers):
        for k in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:k]):
                longest = k
                break
    return longest


def without_call_syntax(parser: ToolParser, text: str, *, at_end: bool = True) -> str:
    """``text`` cut where a call's markup begins: what is left of a call the model did
    not finish (cut by ``max_tokens``, or malformed) is call syntax, never content. With
    ``at_end`` (``text`` ends the output), a start of a call's opening or closing markup
    that it ends with is dropped too."""
    cuts = [at for at in (text.find(marker) for marker in parser.markers) if at >= 0]
    if cuts:
        return text[: min(cuts)].rstrip()
    tail = _partial_markup(parser, text) if at_end else 0
    return text[: len(text) - tail].rstrip() if tail else text


def _inside_call(parser: ToolParser, text: str) -> bool:
    """Whether ``text`` ends inside a call of a format that closes its calls: its last
    opening marker has no closing one after it (``max_tokens`` cut the markup)."""
    if not parser.close_markers:
        return False
    opened = max((text.rfind(marker) for marker in parser.markers), default=-1)
    closed = max(text.rfind(marker) for marker in parser.close_markers)
    return opened > closed


def _unfinished(arguments: str) -> bool:
    """A call's arguments that are not whole JSON: the output ended inside them."""
    if not arguments.strip():
        return False  # a format that writes no arguments for a call without any
    try:
        json.loads(arguments)
    except ValueError:
        return True
    return False


def split_output(plan: FunctionPlan, text: str) -> tuple[str | None, list[ToolCall], bool]:
    """A whole completion -> ``(content, tool_calls, cut)``; ``cut``: the output ended
    inside a call (its markup was dropped, or its arguments are not whole), so a
    ``length`` finish stays ``length``."""
    parser = plan.call_parser
    parsed = parser.parse(text)
    if not parsed.calls:
        left = without_call_syntax(parser, text)
        return left if left or not text else None, [], left != text
    content = parsed.content or ""
    # The content's end is the output's only where the output ends with it (not with a call).
    tail = _partial_markup(parser, text)
    at_end = bool(tail) and content.endswith(text[len(text) - tail :])
    kept = without_call_syntax(parser, content, at_end=at_end) if content else ""
    calls = [
        ToolCall(id=new_call_id(), function=ToolCallFunction(name=c.name, arguments=c.arguments))
        for c in _limit(plan, parsed.calls)
    ]
    cut = kept != content or _unfinished(parsed.calls[-1].arguments) or _inside_call(parser, text)
    return kept or None, calls, cut


class ToolStreamer:
    """Streams one choice: content as the model writes it (minus what may be a call
    marker, held back until it is not), and each call as OpenAI's incremental
    ``tool_calls`` deltas: index, id, type and name as soon as the name is known,
    then argument fragments as they are written."""

    def __init__(self, plan: FunctionPlan) -> None:
        self.plan = plan
        self.calls = 0
        #: The output ended inside a call: its markup was dropped (see :meth:`finish`).
        self.cut = False
        self._stream = plan.call_parser.stream()
        self._last_call: list[str] = []  # the last call's arguments so far, in fragments
        self._output: list[str] = []  # what came in, to see at the end whether a call was left open

    def feed(self, chunk: str) -> list[str | ToolCallDelta]:
        """New output in; what can be sent now out, in order."""
        self._output.append(chunk)
        return self._deltas(self._stream.feed(chunk))

    def finish(self) -> list[str | ToolCallDelta]:
        """The output is complete: the rest, without an unfinished call's markup."""
        out: list[str | ToolCallDelta] = []
        pieces = self._deltas(self._stream.finish())
        for i, piece in enumerate(pieces):
            if isinstance(piece, str):
                kept = without_call_syntax(self.plan.call_parser, piece, at_end=i == len(pieces) - 1)
                self.cut = self.cut or kept != piece
                piece = kept
                if not piece:
                    continue
            out.append(piece)
        if self.calls and (
            _unfinished("".join(self._last_call)) or _inside_call(self.plan.call_parser, "".join(self._output))
        ):
            self.cut = True
        return out

    def _deltas(self, events: list[ToolStreamEvent]) -> list[str | ToolCallDelta]:
        out: list[str | ToolCallDelta] = []
        for event in events:
            if isinstance(event, str):
                if out and isinstance(out[-1], str):
                    out[-1] += event
                else:
                    out.append(event)
                continue
            if event.name is not None:
                self._last_call = []
            else:
                self._last_call.append(event.arguments)
            if event.index > 0 and not self.plan.parallel:
                continue  # parallel_tool_calls=false keeps the first call only
            if event.name is not None:
                self.calls = max(self.calls, event.index + 1)
                out.append(
                    ToolCallDelta(
                        index=event.index,
                        id=new_call_id(),
                        type="function",
                        function=ToolCallDeltaFunction(name=event.name, arguments=""),
                    )
                )
            elif event.arguments:
                out.append(ToolCallDelta(index=event.index, function=ToolCallDeltaFunction(arguments=event.arguments)))
        return out
