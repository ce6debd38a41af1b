"""msgspec request and response structs of ``/v1/chat/completions`` and ``/v1/completions``.

Request fields follow OpenAI's API; every optional field also accepts ``null``
(clients send it) and its default is applied when the request is planned
(:mod:`flexserv_core.api.text_request`). Bounds are declared here so that a bad
value is a 400 that names its ``param``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

#: Most choices (``n``) one request may ask for; each is a separate sequence.
MAX_N = 16
#: Most alternatives per token in ``top_logprobs`` (chat) or ``logprobs`` (completions).
MAX_TOP_LOGPROBS = 20

PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
TopLogprobs = Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)]
NumChoices = Annotated[int, Meta(ge=1, le=MAX_N)]
StopString = Annotated[str, Meta(min_length=1)]
#: How many stop strings, and how long, is bounded by settings (text_validation), not here.
Stop = StopString | list[StopString]
TopK = Annotated[int, Meta(ge=-1, description="Sample from the k most likely tokens (0 or -1: no limit). Extension.")]
MinP = Annotated[
    float,
    Meta(ge=0.0, le=1.0, description="Drop tokens less likely than min_p x the most likely one (0: off). Extension."),
]
RepetitionPenalty = Annotated[
    float,
    Meta(
        ge=0.01,
        le=100.0,
        description="Divide positive / multiply negative logits of tokens already in the prompt or output (1: off;"
        " 0.01-100, which keeps logits finite). Extension.",
    ),
]
MinTokens = Annotated[
    int, Meta(ge=0, description="No end of sequence or stop string before this many tokens. Extension.")
]


#: OpenAI's logit_bias: token id (as a string key) -> -100..100 (checked in ``structured``, to name the key).
LogitBias = dict[str, float]


class JsonSchemaFormat(Struct, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormat(Struct, kw_only=True):
    """``response_format``: ``text`` (default), ``json_object`` or ``json_schema``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(Struct, kw_only=True, forbid_unknown_fields=True):
    """``structured_outputs`` (extension, as vLLM names it): exactly one of these."""

    json: dict[str, Any] | bool | None = None
    json_object: bool | None = None
    regex: Annotated[str, Meta(min_length=1)] | None = None
    choice: Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1)] | None = None
    grammar: Annotated[str, Meta(min_length=1)] | None = None


class FunctionDefinition(Struct, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Struct, kw_only=True):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Struct, kw_only=True):
    name: str


class NamedToolChoice(Struct, kw_only=True):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ToolCallFunction(Struct, kw_only=True):
    name: str
    arguments: str


class ToolCall(Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class StreamOptions(Struct, kw_only=True):
    include_usage: bool | None = None


class ImageURL(Struct, kw_only=True):
    """``image_url`` of an image part: a ``data:`` URL, or an http(s) URL the server may fetch."""

    url: str
    detail: Literal["auto", "low", "high"] | None = None


class FileReference(Struct, kw_only=True):
    """``file`` of a document part: an uploaded file's ``file_id``, or the document
    inline as ``file_data`` (base64 or a ``data:`` URL) with an optional ``filename``."""

    file_id: str | None = None
    file_data: str | None = None
    filename: str | None = None


class ContentPart(Struct, kw_only=True):
    """One part of a message's content: ``{"type": "text", "text": ...}``, or (in user
    messages) ``{"type": "image_url", "image_url": {"url": ...}}`` for vision-language
    models and ``{"type": "file", "file": {"file_id": ...}}`` for a document, whose
    text and page images a plugin puts in its place (see ``flexserv_expand_file_parts``)."""

    type: str
    text: str | None = None
    #: ``{"type": "refusal", "refusal": ...}`` in assistant messages: read as their text
    refusal: str | None = None
    image_url: ImageURL | None = None
    file: FileReference | None = None
    #: OpenAI's caching hint; prefixes are cached without it, so it is accepted and unread
    prompt_cache_breakpoint: dict[str, Any] | None = None


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(Struct, kw_only=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    #: assistant messages: the calls the model made
    tool_calls: list[ToolCall] | None = None
    #: tool messages: which call this result answers
    tool_call_id: str | None = None
    #: assistant messages: a refusal instead of content (read as its text)
    refusal: str | None = None
    #: assistant messages: OpenAI's deprecated call and audio reply; refused unless null
    function_call: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    #: assistant messages as the API returned them: citations of their text, unread
    annotations: list[Any] | None = None


class _SamplingFields(Struct, kw_only=True):
    """Fields chat and completions share; ``top_k`` to ``guided_grammar`` are vLLM's
    extensions (``guided_*``: the older spellings of ``structured_outputs``)."""

    model: str | None = None
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    seed: Seed | None = None
    stop: Stop | None = None
    n: NumChoices | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    logit_bias: LogitBias | None = None
    structured_outputs: StructuredOutputs | None = None
    user: str | None = None
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    min_tokens: MinTokens | None = None
    ignore_eos: bool | None = None
    #: a schema, or (as vLLM takes it) the schema as JSON text
    guided_json: dict[str, Any] | bool | str | None = None
    guided_regex: Annotated[str, Meta(min_length=1)] | None = None
    guided_choice: Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1)] | None = None
    guided_grammar: Annotated[str, Meta(min_length=1)] | None = None


class ChatCompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/completions``. ``prompt`` is a string, a list of strings, a list
    of token ids or a list of token-id lists (checked in :mod:`text_request`, since
    msgspec unions hold one array type only)."""

    prompt: str | list[Any]
    logprobs: TopLogprobs | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: NumChoices | None = None
    #: as vLLM takes it on completions too (``structured_outputs`` is the other way)
    response_format: ResponseFormat | None = None


# --- responses ---------------------------------------------------------------------


class Usage(Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TopLogprobEntry(Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(Struct, kw_only=True):
    token: str
    logprob: float | None
    bytes: list[int] | None
    top_logprobs: list[TopLogprobEntry]


class ChoiceLogprobs(Struct, kw_only=True):
    content: list[TokenLogprob] | None
    refusal: None = None


class AssistantMessage(Struct, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(Struct, kw_only=True):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: str


class ChatCompletion(Struct, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ToolCallDeltaFunction(Struct, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Struct, kw_only=True, omit_defaults=True):
    """One streamed piece of a tool call: ``id``, ``type`` and the name come first,
    then the arguments in fragments (OpenAI's incremental form)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ToolCallDeltaFunction | None = None


class ChatDelta(Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(Struct, kw_only=True):
    index: int
    delta: ChatDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Struct, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(Struct, kw_only=True):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(Struct, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(Struct, kw_only=True):
    """A completion or, with ``object="text_completion"`` too, one streamed chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


def encode(obj: Struct) -> bytes:
    """JSON bytes of a response struct."""
    return msgspec.json.encode(obj)
