"""Responses ``input`` items -> chat messages (the form the chat path renders).

Each item is checked here, so an error names its ``input[i]...`` path. Served:
messages (``role`` + string content or ``input_text``/``output_text``/``refusal``
parts, and in user messages ``input_image`` and ``input_file``; ``type: "message"`` optional), ``function_call`` and
``function_call_output``. ``reasoning`` items a client sends back are dropped,
as chat templates drop past reasoning.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from flexserv_core import InvalidRequest
from flexserv_responses.images import chat_content, input_file, input_image
from flexserv_responses.schemas import (
    FunctionCall,
    FunctionCallOutput,
    InputFile,
    InputImage,
    InputItem,
    InputMessage,
    InputText,
    OutputItem,
    OutputMessage,
    OutputText,
)

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "refusal")


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def unsupported(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="unsupported_parameter")


@dataclass(slots=True)
class Conversation:
    """Chat messages (``role``, ``content``, ``tool_calls``, ``tool_call_id``) and the
    input items they came from, as ``input_items`` lists them."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    items: list[InputItem] = field(default_factory=list)
    #: ``call_id`` s of the function calls so far (the history's and this input's)
    call_ids: set[str] = field(default_factory=set)

    def add_call(self, call_id: str, name: str, arguments: str) -> None:
        """A function call joins the assistant message right before it, if any."""
        self.call_ids.add(call_id)
        entry = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(entry)
        else:
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [entry]})


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"'{param}.{key}' must be a string.", param=f"{param}.{key}", code="invalid_value")
    return value


def _content(value: Any, param: str, role: str) -> tuple[str, list[InputText | OutputText | InputImage | InputFile]]:
    """The text of a message's content and its parts as ``input_items`` lists them: an
    assistant's text as ``output_text``, as OpenAI lists it; media only in user messages."""
    media, said = role == "user", role == "assistant"
    if isinstance(value, str):
        return value, [OutputText(text=value) if said else InputText(text=value)]
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if not isinstance(value, list):
        raise InvalidRequest(
            f"'{param}' must be a string or a list of content parts.", param=param, code="invalid_value"
        )
    if not value and not said:  # as chat refuses a message whose content is an empty list
        raise InvalidRequest(f"'{param}' must not be an empty list.", param=param, code="invalid_value")
    texts: list[str] = []
    parts: list[InputText | OutputText | InputImage | InputFile] = []
    for j, part in enumerate(value):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image" and media:
            parts.append(input_image(part, where))
            continue
        if kind == "input_file" and media:
            parts.append(input_file(part, where))
            continue
        if kind not in TEXT_PARTS:
            raise unsupported(
                f"Content part type {kind!r} is not supported; send 'input_text' parts.", param=f"{where}.type"
            )
        text = _string(part, "refusal" if kind == "refusal" else "text", where)
        texts.append(text)
        parts.append(OutputText(text=text) if said or kind != "input_text" else InputText(text=text))
    return "".join(texts), parts


def add_input(conversation: Conversation, value: str | list[dict[str, Any]] | None) -> None:
    """Append the request's ``input`` to ``conversation``."""
    if value is None:
        return
    if isinstance(value, str):
        conversation.messages.append({"role": "user", "content": value})
        conversation.items.append(InputMessage(id=item_id("msg"), role="user", content=[InputText(text=value)]))
        return
    for i, item in enumerate(value):
        _add_item(conversation, item, f"input[{i}]")


def _add_item(conversation: Conversation, item: dict[str, Any], param: str) -> None:
    kind = item.get("type") or "message"  # a message may omit its type (the "easy" form), not its role
    if kind == "message":
        role = item.get("role")
        if role is None:
            raise InvalidRequest(
                f"Missing required parameter: '{param}.role' (an input message needs a role: "
                f"{', '.join(ROLES)}; other items need their 'type').",
                param=f"{param}.role",
                code="missing_required_parameter",
            )
        if role not in ROLES:
            raise InvalidRequest(
                f"'{param}.role' must be one of {', '.join(ROLES)}.", param=f"{param}.role", code="invalid_value"
            )
        text, parts = _content(item.get("content"), f"{param}.content", role)
        content = chat_content(text, parts)
        conversation.messages.append({"role": "system" if role == "developer" else role, "content": content})
        conversation.items.append(InputMessage(id=item.get("id") or item_id("msg"), role=role, content=parts))
    elif kind == "function_call":
        call_id, name = _string(item, "call_id", param), _string(item, "name", param)
        arguments = _string(item, "arguments", param)
        conversation.add_call(call_id, name, arguments)
        conversation.items.append(
            FunctionCall(id=item.get("id") or item_id("fc"), call_id=call_id, name=name, arguments=arguments)
        )
    elif kind == "function_call_output":
        call_id = _string(item, "call_id", param)
        if call_id not in conversation.call_ids:
            raise InvalidRequest(
                f"No function call with call_id '{call_id}' precedes this output (send the 'function_call' item "
                "in 'input', or continue from the response that made it with 'previous_response_id').",
                param=f"{param}.call_id",
                code="invalid_value",
            )
        output, _parts = _content(item.get("output"), f"{param}.output", "tool")
        conversation.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        conversation.items.append(
            FunctionCallOutput(id=item.get("id") or item_id("fco"), call_id=call_id, output=output)
        )
    elif kind == "reasoning":
        return
    else:
        raise unsupported(
            f"Input item type {kind!r} is not supported; send 'message', 'function_call' or "
            "'function_call_output' items.",
            param=f"{param}.type",
        )


def add_output(conversation: Conversation, output: list[OutputItem]) -> None:
    """Append a response's output, as the next turn's history."""
    for item in output:
        if isinstance(item, OutputMessage):
            text = "".join(part.text for part in item.content)
            conversation.messages.append({"role": "assistant", "content": text})
        elif isinstance(item, FunctionCall):
            conversation.add_call(item.call_id, item.name, item.arguments)
