"""Tool calling's seam: what the chat path asks of the plugin that serves ``tools``.

Tool calling (checking ``tools``/``tool_choice`` and the call history, rendering
them for the chat template, turning output into ``tool_calls``) is the first-party
``tool-parsers`` plugin's, which answers ``flexserv_tool_calling`` with a
:class:`ToolCalling`. The core keeps the wire schemas and calls it at three points:

1. while the chat prompt is built, ``plan(...)`` checks the request and gives a
   :class:`ToolPlan` (``None``: the request has nothing to do with tools), whose
   ``render`` adds tools and call history to the template's messages;
2. the plan's ``constraint`` (a required or named ``tool_choice``) is enforced like
   any output constraint;
3. when the plan ``parses``, output is split into content and calls, whole
   (``split``) or as OpenAI's deltas (``streamer()``).

Without it (``-p no:tool-parsers``) a request that uses tools is a 400
(``unsupported_parameter``) naming the parameter, before anything is generated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from flexserv_core.errors import UnsupportedParameter

if TYPE_CHECKING:
    from flexserv_core.api.text_schemas import ChatCompletionRequest, ChatMessage, ToolCall, ToolCallDelta
    from flexserv_core.backends.base import Constraint, TextGenerationModel
    from flexserv_core.constraints import ConstraintCompiler
    from flexserv_core.models.spec import ModelSpec

#: The first-party plugin that serves tool calling, and its distribution.
TOOL_CALLING_PLUGIN = ("tool-parsers", "flexserv-tool-parsers")


class ToolCallStreamer(Protocol):
    """Splits one streamed choice: content (``str``) and ``tool_calls`` deltas, in order."""

    #: calls started so far; ``cut``: the output ended inside a call (its markup was
    #: dropped), so a ``length`` finish stays ``length``
    calls: int
    cut: bool

    def feed(self, text: str) -> list[str | ToolCallDelta]: ...

    def finish(self) -> list[str | ToolCallDelta]: ...


class ToolPlan(Protocol):
    """One chat request's tools, checked and planned."""

    @property
    def constraint(self) -> Constraint | None:
        """What the output must match (a required or named ``tool_choice``)."""

    @property
    def parses(self) -> bool:
        """Whether the output is split into content and calls."""

    def render(self, entries: list[dict[str, Any]], messages: list[ChatMessage]) -> list[dict[str, Any]] | None:
        """Add the call history to the template ``entries`` (one per message, in
        place); return ``tools`` for the chat template (``None``: none to pass)."""

    def split(self, text: str) -> tuple[str | None, list[ToolCall], bool]:
        """A whole output -> ``(content, tool_calls, cut)``."""

    def streamer(self) -> ToolCallStreamer: ...


@runtime_checkable
class ToolCalling(Protocol):
    """What ``flexserv_tool_calling`` returns: shared by every request."""

    def plan(
        self,
        body: ChatCompletionRequest,
        model: TextGenerationModel,
        spec: ModelSpec,
        constraints: ConstraintCompiler | None,
    ) -> ToolPlan | None:
        """Check the request's tools and history (an :class:`~flexserv_core.InvalidRequest`
        naming the parameter); ``None`` when it has neither. Quick: on the event loop."""


def check_without_tool_calling(body: ChatCompletionRequest) -> None:
    """The 400 for a request that uses tools on a server without tool calling."""
    param = "tools" if body.tools else None
    if param is None and body.tool_choice not in (None, "none"):
        param = "tool_choice"
    for i, message in enumerate(body.messages):
        field = "tool_calls" if message.tool_calls else "tool_call_id" if message.tool_call_id else None
        if param is None and (field or message.role == "tool"):
            param = f"messages[{i}].{field or 'role'}"
    if param is not None:
        name, distribution = TOOL_CALLING_PLUGIN
        raise UnsupportedParameter(
            f"'{param}' needs tool calling, which this server does not offer"
            f" (the '{name}' plugin, {distribution}, is not loaded).",
            param=param,
        )
