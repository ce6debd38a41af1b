"""OpenAI's rules for chat messages, role by role, checked before a model is acquired.

* ``system`` / ``developer``: ``content`` is required: a string or text parts.
* ``user``: ``content`` is required: a string or parts (text parts; ``image_url``
  parts for models that take images and ``file`` parts, read when the session
  opens; other types are refused when the prompt is built).
* ``assistant``: ``content`` (a string, or text / refusal parts) or ``tool_calls``
  is required; ``content`` may be null when it made tool calls.
* ``tool``: ``content`` (a string or text parts) and ``tool_call_id`` are required.

Every violation is a 400 on the field to fix (``messages[i].content``,
``messages[i].tool_call_id``...). Tool-call fields are read with ``getattr`` so this
module works whatever tool-calling fields the message schema carries; whether a
``tool_call_id`` answers an earlier call is tool calling's own check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexserv_core.errors import InvalidRequest, quote

#: Part types each role's content may hold (``None``: any, checked later).
_PART_TYPES: dict[str, frozenset[str] | None] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": None,
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}


def _missing(i: int, field: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: 'messages[{i}].{field}' ({why}).",
        param=f"messages[{i}].{field}",
        code="missing_required_parameter",
    )


def _check_parts(i: int, role: str, parts: Sequence[Any]) -> None:
    allowed = _PART_TYPES.get(role)
    for j, part in enumerate(parts):
        param = f"messages[{i}].content[{j}]"
        if allowed is not None and part.type not in allowed:
            kinds = " or ".join(f"'{t}'" for t in sorted(allowed))
            raise InvalidRequest(
                f"A '{role}' message's content parts must be of type {kinds}, not '{quote(part.type)}'.",
                param=f"{param}.type",
                code="invalid_value",
            )
        if part.type == "text" and part.text is None:
            raise InvalidRequest(
                "A text content part needs 'text'.", param=f"{param}.text", code="missing_required_parameter"
            )


def check_messages(messages: Sequence[Any]) -> None:
    """Raise a 400 for the first message that breaks its role's rules."""
    for i, message in enumerate(messages):
        role = message.role
        content = message.content
        tool_calls = getattr(message, "tool_calls", None)
        if role == "assistant":
            if content is None and not tool_calls:
                raise _missing(i, "content", "an assistant message needs 'content' or 'tool_calls'")
        elif content is None:
            raise _missing(i, "content", f"a '{role}' message needs 'content'")
        if role == "tool" and not getattr(message, "tool_call_id", None):
            raise _missing(i, "tool_call_id", "a 'tool' message answers the call this id names")
        if isinstance(content, list):
            if not content and role != "assistant":
                raise InvalidRequest(
                    f"A '{role}' message's content must not be an empty list.",
                    param=f"messages[{i}].content",
                    code="invalid_value",
                )
            _check_parts(i, role, content)
