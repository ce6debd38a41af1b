"""msgspec structs of ``POST /v1/responses``: the request and the response object.

``input`` items are kept as raw objects here and checked one by one in
:mod:`.items`, because a message item may omit its ``type`` (OpenAI's "easy"
form), which a tagged union cannot express, and so every error can name its
``input[i]...`` path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

# The bounds of the chat request's fields these become (checked again there).
PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(ge=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1, description="Sample from the k most likely tokens (0 or -1: no limit). Extension.")]


ResponseStatus = Literal["completed", "incomplete", "failed", "in_progress"]


class TextConfig(Struct, kw_only=True):
    """``text``: the output's ``format`` (``text``, ``json_object``, ``json_schema``)."""

    format: dict[str, Any] | None = None
    verbosity: str | None = None


class ReasoningConfig(Struct, kw_only=True):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None


class ResponsesRequest(Struct, kw_only=True):
    """``POST /v1/responses``: OpenAI's fields that FlexServ serves or accepts."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    max_output_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    text: TextConfig | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningConfig | None = None
    truncation: Literal["disabled", "auto"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None


# --- the response object ------------------------------------------------------------


class OutputText(Struct, kw_only=True, tag="output_text", tag_field="type"):
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class ReasoningText(Struct, kw_only=True, tag="reasoning_text", tag_field="type"):
    text: str


class InputText(Struct, kw_only=True, tag="input_text", tag_field="type"):
    text: str


class InputImage(Struct, kw_only=True, tag="input_image", tag_field="type"):
    image_url: str
    detail: str = "auto"


class InputFile(Struct, kw_only=True, omit_defaults=True, tag="input_file", tag_field="type"):
    """A document: an uploaded file's ``file_id``, or ``file_data`` inline (``filename`` optional)."""

    file_id: str | None = None
    file_data: str | None = None
    filename: str | None = None


class OutputMessage(Struct, kw_only=True, tag="message", tag_field="type"):
    id: str
    role: Literal["assistant"] = "assistant"
    status: ResponseStatus = "completed"
    content: list[OutputText] = []


class InputMessage(Struct, kw_only=True, tag="message", tag_field="type"):
    """An input message as ``GET /v1/responses/{id}/input_items`` lists it."""

    id: str
    role: str
    status: ResponseStatus = "completed"
    content: list[InputText | OutputText | InputImage | InputFile] = []


class ReasoningItem(Struct, kw_only=True, tag="reasoning", tag_field="type"):
    id: str
    summary: list[Any] = []
    content: list[ReasoningText] = []
    status: ResponseStatus = "completed"


class FunctionCall(Struct, kw_only=True, tag="function_call", tag_field="type"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: ResponseStatus = "completed"


class FunctionCallOutput(Struct, kw_only=True, tag="function_call_output", tag_field="type"):
    id: str
    call_id: str
    output: str
    status: ResponseStatus = "completed"


OutputItem = OutputMessage | ReasoningItem | FunctionCall
InputItem = InputMessage | FunctionCall | FunctionCallOutput


class InputTokensDetails(Struct, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(Struct, kw_only=True):
    reasoning_tokens: int = 0


class ResponseUsage(Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(Struct, kw_only=True):
    code: str
    message: str


class IncompleteDetails(Struct, kw_only=True):
    reason: Literal["max_output_tokens"]


class Response(Struct, kw_only=True):
    """OpenAI's ``response`` object."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = []
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningConfig | None = None
    store: bool = True
    temperature: float | None = None
    text: TextConfig
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = []
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}


class DeletedResponse(Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[InputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class StreamEvent(Struct, kw_only=True):
    """One streamed event (documentation shape: ``type``, ``sequence_number`` and the
    fields of that event type, as in OpenAI's API)."""

    type: str
    sequence_number: int
