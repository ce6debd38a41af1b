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
#: How many stop strings, and how long, is bounded by settings (text_bounds), not here.
Stop = StopString | list[StopString]
TopK = Annotated[int, Meta(ge=-1, description="Sample from the k most likely tokens (0 or -1: no limit). Extension.")]


class StreamOptions(Struct, kw_only=True):
    include_usage: bool | None = None


class ContentPart(Struct, kw_only=True):
    """One part of a message's content; only ``{"type": "text", "text": ...}`` is served."""

    type: str
    text: str | None = None


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(Struct, kw_only=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None


class _SamplingFields(Struct, kw_only=True):
    """Fields chat and completions share."""

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
    user: str | None = None


class ChatCompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None


class CompletionRequest(_SamplingFields, kw_only=True):
    """``POST /v1/completions``. ``prompt`` is a string, a list of strings, a list
    of token ids or a list of token-id lists (checked in :mod:`text_request`, since
    msgspec unions hold one array type only)."""

    prompt: str | list[Any]
    logprobs: TopLogprobs | None = None
    echo: bool | None = None
    suffix: str | None = None


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


class ChatDelta(Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None


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
