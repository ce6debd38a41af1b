"""``text.format``, ``tools``, ``tool_choice`` of a Responses request -> the chat fields
(``response_format``, ``tools``, ``tool_choice``) that the chat path plans, so
structured outputs and tool calling run through the same code as on
``/v1/chat/completions``.

The Responses API writes a function tool flat (``{"type": "function", "name",
"parameters", ...}``) and a named choice as ``{"type": "function", "name"}``;
chat nests both under ``function``. Errors name the Responses parameter.
"""

from __future__ import annotations

from typing import Any

from flexserv_core import (
    FunctionDefinition,
    InvalidRequest,
    JsonSchemaFormat,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    Tool,
    ToolChoice,
    convert_param,
)
from flexserv_responses.items import unsupported

FORMATS = ("text", "json_object", "json_schema")
CHOICES: dict[str, ToolChoice] = {"none": "none", "auto": "auto", "required": "required"}


def response_format(fmt: dict[str, Any] | None) -> ResponseFormat | None:
    """``text.format`` -> chat's ``response_format`` (``None`` for plain text)."""
    if fmt is None:
        return None
    kind = fmt.get("type", "text")
    if kind not in FORMATS:
        raise InvalidRequest(
            f"'text.format.type' must be one of {', '.join(FORMATS)} (got {kind!r}).",
            param="text.format.type",
            code="invalid_value",
        )
    if kind != "json_schema":
        return ResponseFormat(type=kind)
    if "schema" not in fmt:
        raise InvalidRequest(
            "Missing required parameter: 'text.format.schema'.",
            param="text.format.schema",
            code="missing_required_parameter",
        )
    if not isinstance(fmt["schema"], dict):
        raise InvalidRequest("'text.format.schema' must be a JSON schema object.", param="text.format.schema")
    fields = {key: value for key, value in fmt.items() if key != "type"}
    return ResponseFormat(type="json_schema", json_schema=convert_param(fields, JsonSchemaFormat, "text.format"))


def function_tools(tools: list[dict[str, Any]] | None) -> list[Tool] | None:
    """Flat function tools -> chat's ``tools``; other tool types are refused by name."""
    if not tools:
        return None
    out: list[Tool] = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        kind = tool.get("type")
        if kind != "function":
            raise unsupported(
                f"Tool type {kind!r} is not supported; this server runs 'function' tools only "
                "(the client executes them and sends back 'function_call_output' items).",
                f"{param}.type",
            )
        if "function" in tool and "name" not in tool:
            raise InvalidRequest(
                "A Responses function tool is flat: put 'name', 'description', 'parameters' and 'strict' next to "
                "'type' (not under 'function', as in chat completions).",
                param=f"{param}.name",
                code="missing_required_parameter",
            )
        fields = {key: value for key, value in tool.items() if key != "type"}
        out.append(Tool(type="function", function=convert_param(fields, FunctionDefinition, param)))
    return out


def tool_choice(choice: str | dict[str, Any] | None) -> ToolChoice | None:
    """``tool_choice`` -> chat's; that a named function is in ``tools`` is checked by the chat path."""
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise InvalidRequest(
                f"'tool_choice' must be one of {', '.join(CHOICES)} or {{'type': 'function', 'name': ...}} "
                f"(got {choice!r}).",
                param="tool_choice",
                code="invalid_value",
            )
        return CHOICES[choice]
    kind = choice.get("type")
    if kind != "function":
        raise unsupported(
            f"'tool_choice' of type {kind!r} is not supported; use 'none', 'auto', 'required' or "
            "{'type': 'function', 'name': ...}.",
            "tool_choice",
        )
    name = choice.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            "Missing required parameter: 'tool_choice.name'.",
            param="tool_choice.name",
            code="missing_required_parameter",
        )
    return NamedToolChoice(type="function", function=NamedFunction(name=name))
