"""A Responses request -> the chat request the chat path plans and runs.

The conversation (a stored previous response's history, then this request's
``input``) becomes chat ``messages`` with ``instructions`` as a leading system
message; ``max_output_tokens`` becomes ``max_completion_tokens``. Errors the chat
path raises name the Responses parameter (``input``, ``max_output_tokens``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from flexserv_core import (
    ChatCompletionRequest,
    CoreSettings,
    FlexServError,
    InvalidRequest,
    Refusals,
    check_chat_request,
    refuse_unsupported,
)
from flexserv_responses.items import Conversation, add_input, unsupported
from flexserv_responses.schemas import ResponsesRequest
from flexserv_responses.store import StoredResponse
from flexserv_responses.tools import function_tools, response_format, tool_choice

ENDPOINT = "/v1/responses"


def _absent(value: Any) -> bool:
    return value is None


def _false(value: Any) -> bool:
    return value in (None, False)


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def _zero(value: Any) -> bool:
    return value in (None, 0)


def _one(value: Any) -> bool:
    return value in (None, 1)


#: OpenAI parameters that would change the output and are not served -> (neutral?, why).
UNSUPPORTED: Refusals = {
    "background": (_false, "background responses are not supported"),
    "conversation": (_absent, "conversations are not supported; continue with 'previous_response_id'"),
    "prompt": (_absent, "prompt templates are not supported"),
    "include": (_empty, "'include' (extra output data) is not supported"),
    "max_tool_calls": (_absent, "'max_tool_calls' is not supported"),
    "top_logprobs": (_zero, "logprobs are not supported on /v1/responses; use /v1/chat/completions"),
    "context_management": (_absent, "'context_management' is not supported"),
    "moderation": (_absent, "moderation is not supported; the output is not checked"),
    "background_options": (_absent, "background responses are not supported"),
    "image": (_absent, "image generation options are not supported"),
    "access_programs": (_absent, "access programs are not supported"),
    # Chat Completions' names, which the Responses API does not define: dropped as unknown
    # fields, they would silently not do what the client asked for.
    "max_tokens": (_absent, "it is a Chat Completions parameter; the Responses API's cap is 'max_output_tokens'"),
    "max_completion_tokens": (
        _absent,
        "it is a Chat Completions parameter; the Responses API's cap is 'max_output_tokens'",
    ),
    "n": (_one, "a response has one output; send one request per completion, or use /v1/chat/completions"),
    "stop": (_empty, "stop sequences are not a Responses API parameter; use /v1/chat/completions"),
    "seed": (_absent, "'seed' is not a Responses API parameter; use /v1/chat/completions"),
    "logit_bias": (_empty, "'logit_bias' is not a Responses API parameter; use /v1/chat/completions"),
    "frequency_penalty": (_zero, "penalties are not Responses API parameters; use /v1/chat/completions"),
    "presence_penalty": (_zero, "penalties are not Responses API parameters; use /v1/chat/completions"),
    "response_format": (_absent, "it is a Chat Completions parameter; the Responses API's is 'text.format'"),
    "logprobs": (_false, "logprobs are not supported on /v1/responses; use /v1/chat/completions"),
    # vLLM's sampling extensions, which chat and completions take: not on this route
    **{
        name: (_absent, f"vLLM's '{name}' is taken by /v1/chat/completions and /v1/completions, not here")
        for name in ("top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos")
    },
}
#: Bookkeeping parameters accepted and dropped.
IGNORED = frozenset(
    {
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "stream_options",
    }
)


def check_parameters(body: dict[str, Any]) -> None:
    """Refuse unsupported parameters, drop bookkeeping ones (in place)."""
    refuse_unsupported(body, UNSUPPORTED)
    for key in IGNORED:
        body.pop(key, None)


#: OpenAI's bounds on ``metadata``: key-value pairs, characters per key, per value.
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def check_metadata(metadata: dict[str, str] | None) -> None:
    """``metadata`` within OpenAI's bounds: it is echoed and stored with the response."""
    if metadata is None:
        return
    if len(metadata) > METADATA_PAIRS:
        raise InvalidRequest(
            f"'metadata' has {len(metadata)} key-value pairs; at most {METADATA_PAIRS} are allowed.",
            param="metadata",
            code="invalid_value",
        )
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"'metadata' keys are at most {METADATA_KEY_CHARS} characters; one has {len(key)}.",
                param="metadata",
                code="invalid_value",
            )
        if len(value) > METADATA_VALUE_CHARS:
            raise InvalidRequest(
                f"'metadata' values are at most {METADATA_VALUE_CHARS} characters; the value of '{key}' has "
                f"{len(value)}.",
                param="metadata",
                code="invalid_value",
            )


def check_request(body: ResponsesRequest) -> None:
    check_metadata(body.metadata)
    reasoning = body.reasoning
    if reasoning is not None and any(
        v is not None for v in (reasoning.effort, reasoning.summary, reasoning.generate_summary)
    ):
        raise unsupported(
            "'reasoning' options are not supported; a thinking model's reasoning is returned as a reasoning "
            "item, and templates that can switch it take 'enable_thinking' (template-kwargs plugin).",
            "reasoning",
        )
    if reasoning is not None and reasoning.context == "all_turns":
        # reasoning items sent back are dropped, as chat templates drop past reasoning: "current_turn"
        raise unsupported(
            "'reasoning.context: all_turns' is not supported: past turns' reasoning is not shown to the model.",
            "reasoning.context",
        )
    if body.truncation == "auto":
        raise unsupported("'truncation: auto' is not supported; a prompt beyond the context is a 400.", "truncation")
    if body.text is not None and body.text.verbosity is not None:
        raise unsupported("'text.verbosity' is not supported.", "text.verbosity")


@dataclass(slots=True)
class ResponsePlan:
    body: ResponsesRequest
    chat: ChatCompletionRequest
    #: This request's input (messages and their items)
    current: Conversation
    #: The previous response's history and this input: what the next turn continues
    history: list[dict[str, Any]]


def plan_response(body: ResponsesRequest, previous: StoredResponse | None, core: CoreSettings) -> ResponsePlan:
    """``previous``: the stored response ``previous_response_id`` names (``ResponseStore.previous``)."""
    check_request(body)
    history: list[dict[str, Any]] = []
    if previous is not None:
        history = copy.deepcopy(list(previous.history))
    current = Conversation(call_ids={c["id"] for m in history for c in m.get("tool_calls", ())})
    add_input(current, body.input)
    if not current.messages and not history:
        raise InvalidRequest("'input' is required (a string or a list of items).", param="input")
    history = history + current.messages
    messages = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + history
    chat_body: dict[str, Any] = {
        "model": body.model,
        "messages": copy.deepcopy(messages),
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
    }
    try:
        chat = msgspec.convert(chat_body, ChatCompletionRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"Invalid 'input': {exc}", param="input") from None
    chat = msgspec.structs.replace(
        chat,
        response_format=response_format(body.text.format if body.text is not None else None),
        tools=function_tools(body.tools),
        tool_choice=tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls,
    )
    try:  # the edge bounds and per-role rules chat requests have, before a model is loaded
        check_chat_request(chat, core)
    except FlexServError as exc:
        raise responses_param(exc) from None
    return ResponsePlan(body=body, chat=chat, current=current, history=history)


_PARAMS = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "max_tokens x n": "max_output_tokens",
}
#: Chat parameter paths -> Responses ones (first match wins): the API's nesting differs.
_PATHS = (
    (re.compile(r"^response_format\.json_schema(?=\.|$)"), "text.format"),
    (re.compile(r"^response_format(?=\.|$)"), "text.format"),
    (re.compile(r"^(tools\[\d+\])\.function(?=\.|$)"), r"\1"),
    (re.compile(r"^tool_choice\.function(?=\.|$)"), "tool_choice"),
)


def responses_param(exc: FlexServError) -> FlexServError:
    """Rename a chat parameter in ``exc`` to the Responses one (in place)."""
    if exc.param is None:
        return exc
    for pattern, replacement in _PATHS:
        renamed = pattern.sub(replacement, exc.param)
        if renamed != exc.param:
            exc.message = exc.message.replace(f"'{exc.param}'", f"'{renamed}'")
            exc.param = renamed
            return exc
    head, sep, rest = exc.param.partition(".")
    base = head.split("[")[0]
    if base in _PARAMS:
        exc.param = _PARAMS[base] + head[len(base) :] + sep + rest
        # a quoted path in the message may go deeper than param ('messages[0].content[0].file')
        quoted = re.sub(rf"'{re.escape(base)}(?=[\[.'])", f"'{_PARAMS[base]}", exc.message)
        exc.message = quoted.replace(f"the {base}", f"the {_PARAMS[base]}")
    return exc
