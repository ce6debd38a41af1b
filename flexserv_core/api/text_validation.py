"""The one place a text request is checked, in the order the checks run.

Models and engines only ``assert`` what these functions guarantee, so every check
has one message, one error class and the parameter the client should fix. Three
phases, each cheaper than what follows it:

1. **Edge bounds**, before a model is acquired or a prompt tokenised: core settings
   (``--max-messages``, ``--max-content-parts``, ``--max-stop-strings``,
   ``--max-stop-chars``, ``--max-prompt-chars``, ``--max-request-tokens``), so a
   hostile body costs a scan of what was already parsed and nothing more; each
   violation is a 400 naming the ``param`` to fix.
2. **Request rules**, still before a model is acquired: OpenAI's rules for chat
   messages role by role, and parameters that contradict each other
   (``top_logprobs`` without ``logprobs``, ``best_of`` below ``n``...).
3. **Against the model's limits** (:class:`TextLimits`), once the prompt is tokenised:

   * an empty prompt: ``invalid_value`` on ``messages`` / ``prompt`` / ``prompt[i]``;
   * a token id outside the vocabulary: on ``prompt[j]`` / ``prompt[i][j]``;
   * ``max_tokens`` above the model's cap: on ``max_tokens`` or ``max_completion_tokens``
     (whichever the request set);
   * prompt (+ completion) beyond the context: ``context_length_exceeded`` on the prompt's
     parameter, as OpenAI reports it. A text prompt longer than any prompt that fits
     (``limits.max_token_bytes`` per token) is refused so before it is tokenised
     (:func:`check_prompt_text`), with the same error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexserv_core.api.text_schemas import ChatCompletionRequest, CompletionRequest
from flexserv_core.backends.base import TextLimits
from flexserv_core.errors import ContextLengthExceeded, InvalidRequest, UnsupportedParameter, quote
from flexserv_core.settings import CoreSettings

#: ``max_tokens`` of a ``/v1/completions`` request that sets none: OpenAI's legacy
#: default (chat completions keep the model's ``default_max_tokens``).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
#: Most sequences (prompts x n) one completions request may start.
MAX_SEQUENCES = 64


def stop_strings(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def requested_max_tokens(body: ChatCompletionRequest | CompletionRequest) -> tuple[int | None, str]:
    """The completion budget the request set and the field it set it with: chat's
    ``max_completion_tokens`` when given, else ``max_tokens``."""
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        return body.max_completion_tokens, "max_completion_tokens"
    return body.max_tokens, "max_tokens"


# --- 1. edge bounds ----------------------------------------------------------------


def _too_many(what: str, count: int, limit: int, param: str, flag: str) -> InvalidRequest:
    return InvalidRequest(
        f"Too many {what}: {count}; this server accepts at most {limit} ({flag}).",
        param=param,
        code="invalid_value",
    )


def check_stop(stop: str | list[str] | None, core: CoreSettings) -> None:
    stops = stop_strings(stop)
    if len(stops) > core.max_stop_strings:
        raise _too_many("stop strings", len(stops), core.max_stop_strings, "stop", "--max-stop-strings")
    for i, text in enumerate(stops):
        if len(text) > core.max_stop_chars:
            param = "stop" if isinstance(stop, str) else f"stop[{i}]"
            raise InvalidRequest(
                f"A stop string is {len(text)} characters long; this server accepts at most {core.max_stop_chars}"
                " (--max-stop-chars).",
                param=param,
                code="invalid_value",
            )


def check_prompt_chars(count: int, core: CoreSettings, param: str) -> None:
    if count > core.max_prompt_chars:
        raise InvalidRequest(
            f"The prompt is {count} characters long; this server accepts at most {core.max_prompt_chars}"
            " per request (--max-prompt-chars).",
            param=param,
            code="prompt_too_long",
        )


def check_stream_options(stream: bool | None, stream_options: object | None) -> None:
    """``stream_options`` only with ``stream: true`` (as OpenAI and vLLM answer)."""
    if stream_options is not None and not stream:
        raise InvalidRequest(
            "'stream_options' is only allowed when 'stream' is true.", param="stream_options", code="invalid_value"
        )


def _check_generation_bounds(
    body: ChatCompletionRequest | CompletionRequest,
    core: CoreSettings,
    *,
    requested: int | None,
    sequences: int,
    param: str,
) -> None:
    """What chat and completions bound alike, after the prompt: stop strings,
    ``requested x sequences`` tokens (``param`` set ``requested``) and ``stream_options``."""
    check_stop(body.stop, core)
    if requested is not None and requested * sequences > core.max_request_tokens:
        raise InvalidRequest(
            f"'{param}' x sequences is {requested} x {sequences} = {requested * sequences} tokens; this server"
            f" generates at most {core.max_request_tokens} per request (--max-request-tokens).",
            param=param,
            code="invalid_value",
        )
    check_stream_options(body.stream, body.stream_options)


def check_chat_bounds(body: ChatCompletionRequest, core: CoreSettings) -> None:
    """Messages, content parts, prompt characters, stop strings and ``max_tokens x n``."""
    messages = body.messages
    if len(messages) > core.max_messages:
        raise _too_many("messages", len(messages), core.max_messages, "messages", "--max-messages")
    chars = 0
    for i, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            if len(content) > core.max_content_parts:
                raise _too_many(
                    "content parts",
                    len(content),
                    core.max_content_parts,
                    f"messages[{i}].content",
                    "--max-content-parts",
                )
            chars += sum(len(part.text or part.refusal or "") for part in content)
        elif content is not None:
            chars += len(content)
        chars += len(message.refusal or "")
        check_prompt_chars(chars, core, "messages")
    requested, param = requested_max_tokens(body)
    _check_generation_bounds(body, core, requested=requested, sequences=body.n or 1, param=param)


def _prompt_size(prompt: str | list[Any]) -> tuple[int, int]:
    """``(units, prompts)``: characters (or token ids) over all prompts, and how many prompts."""
    if isinstance(prompt, str):
        return len(prompt), 1
    if prompt and all(isinstance(p, str | list) for p in prompt):
        return sum(len(p) for p in prompt), len(prompt)
    return len(prompt), 1


def check_completion_bounds(body: CompletionRequest, core: CoreSettings) -> None:
    """Prompt characters (token ids count one each), stop strings and ``max_tokens x n x prompts``."""
    units, prompts = _prompt_size(body.prompt)
    check_prompt_chars(units, core, "prompt")
    # best_of generates max(n, best_of) candidates per prompt: that is what the bound counts
    candidates = max(body.n or 1, body.best_of or 1)
    _check_generation_bounds(body, core, requested=body.max_tokens, sequences=candidates * prompts, param="max_tokens")


# --- 2. request rules --------------------------------------------------------------
#
# OpenAI's rules for chat messages, role by role:
#
# * ``system`` / ``developer``: ``content`` is required: a string or text parts.
# * ``user``: ``content`` is required: a string or parts (text parts; ``image_url``
#   parts for models that take images and ``file`` parts, read when the session
#   opens; other types are refused when the prompt is built).
# * ``assistant``: ``content`` (a string, or text / refusal parts), ``refusal`` or
#   ``tool_calls`` is required; a refusal is read as the assistant's text. The
#   deprecated ``function_call`` and an ``audio`` reply are refused unless null.
# * ``tool``: ``content`` (a string or text parts) and ``tool_call_id`` are required.
#
# Every violation is a 400 on the field to fix (``messages[i].content``,
# ``messages[i].tool_call_id``...). Tool-call fields are read with ``getattr`` so
# these checks work whatever tool-calling fields the message schema carries; whether
# a ``tool_call_id`` answers an earlier call is tool calling's own check.

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
        if part.type == "refusal" and part.refusal is None:
            raise InvalidRequest(
                "A refusal content part needs 'refusal'.", param=f"{param}.refusal", code="missing_required_parameter"
            )


def check_messages(messages: Sequence[Any]) -> None:
    """Raise a 400 for the first message that breaks its role's rules."""
    for i, message in enumerate(messages):
        role = message.role
        content = message.content
        tool_calls = getattr(message, "tool_calls", None)
        if role == "assistant":
            if content is None and not tool_calls and getattr(message, "refusal", None) is None:
                raise _missing(i, "content", "an assistant message needs 'content', 'refusal' or 'tool_calls'")
            for field in ("function_call", "audio"):
                if getattr(message, field, None) is not None:
                    raise UnsupportedParameter(
                        f"An assistant message's '{field}' is not supported: "
                        + ("send its call in 'tool_calls'." if field == "function_call" else "audio replies are not."),
                        param=f"messages[{i}].{field}",
                    )
        else:
            for field in ("refusal", "function_call", "audio"):
                if getattr(message, field, None) is not None:
                    raise InvalidRequest(f"Only assistant messages carry '{field}'.", param=f"messages[{i}].{field}")
            if content is None:
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


def check_tool_history(messages: Sequence[Any]) -> None:
    """Every ``tool`` message answers a call an earlier assistant message made (after
    :func:`check_messages`). Wire rules, checked whether or not tool calling is loaded."""
    calls: set[str] = set()
    for i, message in enumerate(messages):
        if message.role == "assistant":
            calls.update(call.id for call in message.tool_calls or ())
        elif message.role == "tool":
            # a missing tool_call_id is check_messages' 400, checked before this
            if message.tool_call_id not in calls:
                raise InvalidRequest(
                    f"tool_call_id '{quote(message.tool_call_id)}' does not match a tool call of an earlier assistant message.",
                    param=f"messages[{i}].tool_call_id",
                )
        elif message.tool_calls or message.tool_call_id:
            raise InvalidRequest(
                "Only assistant messages carry 'tool_calls' and only tool messages 'tool_call_id'.",
                param=f"messages[{i}]",
            )


def check_chat_request(body: ChatCompletionRequest, core: CoreSettings) -> None:
    """The checks a chat request passes before a session opens (no model is loaded
    for a request that fails them): the edge bounds, the per-role message rules and
    the tool-call history."""
    check_chat_bounds(body, core)
    check_messages(body.messages)
    check_tool_history(body.messages)


def check_chat(body: ChatCompletionRequest) -> None:
    if body.top_logprobs is not None and body.top_logprobs > 0 and not body.logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")


def check_completion(body: CompletionRequest) -> None:
    if body.best_of is not None and body.best_of < (body.n or 1):
        raise InvalidRequest("'best_of' must be at least 'n'.", param="best_of")
    if body.best_of is not None and body.best_of > (body.n or 1) and body.stream:
        raise InvalidRequest("'best_of' greater than 'n' cannot be streamed.", param="best_of")
    if body.suffix:
        raise UnsupportedParameter("'suffix' (insertion) is not supported by this server.", param="suffix")
    if body.echo and body.logprobs is not None:
        raise InvalidRequest(
            "'echo' together with 'logprobs' is not supported (prompt logprobs are not computed).", param="echo"
        )


def check_sequences(prompts: int, n: int) -> None:
    """At most :data:`MAX_SEQUENCES` sequences (``prompts x max(n, best_of)``) per completions request."""
    if prompts * n > MAX_SEQUENCES:
        raise InvalidRequest(
            f"At most {MAX_SEQUENCES} sequences (prompts x max(n, best_of)) per request; this asks for {prompts * n}.",
            param="prompt",
        )


# --- 3. against the model's limits -------------------------------------------------


def is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_token_ids(limits: TextLimits, ids: list[Any], param: str) -> list[int]:
    """A client-given token-id prompt: every id an integer in ``[0, vocab_size)``."""
    vocab = limits.vocab_size
    for j, token in enumerate(ids):
        if not is_token_id(token) or token < 0 or (vocab is not None and token >= vocab):
            bound = f" in [0, {vocab})" if vocab is not None else " (non-negative integers)"
            raise InvalidRequest(
                f"Invalid token id {quote(token)}: token ids must be{bound}.",
                param=f"{param}[{j}]",
                code="invalid_value",
            )
    return list(ids)


def _take(param: str) -> str:
    return "take" if param == "messages" else "takes"  # the messages take, the prompt (prompt[i]) takes


def check_prompt(limits: TextLimits, prompt_len: int, param: str) -> None:
    """The prompt has at least one token and leaves room for one more."""
    if prompt_len < 1:
        raise InvalidRequest("The prompt is empty.", param=param, code="invalid_value")
    limit = limits.context_length
    if prompt_len >= limit:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens, and the {param} alone {_take(param)} {prompt_len} tokens. "
            f"Please reduce the length of the {param}.",
            param=param,
        )


def _counted_size(text: str, dropped: bytes) -> int:
    """The UTF-8 bytes of ``text`` that some token stands for: all but ``dropped`` ones."""
    if not dropped and text.isascii():  # a flag of the string: the usual prompt is not copied
        return len(text)
    data = text.encode("utf-8", "surrogatepass")
    return len(data.translate(None, dropped)) if dropped else len(data)


def check_prompt_text(limits: TextLimits, text: str, param: str) -> None:
    """Before ``text`` is tokenised: refuse it when it certainly takes the whole context.

    No token stands for more than ``limits.max_token_bytes`` bytes of text, so a text
    of ``size`` such bytes (``limits.dropped_bytes`` take none) takes at least
    ``ceil(size / max_token_bytes)`` tokens; beyond ``(context_length - 1) *
    max_token_bytes`` bytes that is ``context_length`` or more, which
    :func:`check_prompt` would refuse once it was tokenised. Nothing that fits is
    refused; without a known bound nothing is checked."""
    per_token = limits.max_token_bytes
    if per_token is None:
        return
    limit = limits.context_length
    size = _counted_size(text, limits.dropped_bytes)
    if size > (limit - 1) * per_token:
        at_least = -(-size // per_token)
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens, and the {param} alone {_take(param)} at least "
            f"{at_least} tokens. Please reduce the length of the {param}.",
            param=param,
        )


def max_tokens_for(
    body: ChatCompletionRequest | CompletionRequest,
    limits: TextLimits,
    prompt_len: int,
    core: CoreSettings,
    *,
    sequences: int,
    prompt_param: str,
    default: int | None = None,
) -> int:
    """Check one prompt and return its completion budget: the request's (see
    :func:`requested_max_tokens`), else ``default``, the model's ``default_max_tokens``
    and what is left of the context, cut so that ``budget x sequences`` fits
    ``--max-request-tokens``. ``min_tokens`` may not exceed it (vLLM's rule).

    ``prompt_param`` names the prompt (``messages``, ``prompt``, ``prompt[i]``),
    ``default`` the endpoint's own default (:data:`COMPLETIONS_DEFAULT_MAX_TOKENS`), if
    it has one, and ``sequences`` how many the request generates in all.
    """
    check_prompt(limits, prompt_len, prompt_param)
    requested, max_tokens_param = requested_max_tokens(body)
    limit = limits.context_length
    left = limit - prompt_len
    if requested is not None:
        cap = limits.max_max_tokens
        if cap is not None and requested > cap:
            raise InvalidRequest(
                f"'{max_tokens_param}' is {requested}; this model allows at most {cap}.",
                param=max_tokens_param,
                code="invalid_value",
            )
        if requested > left:
            raise ContextLengthExceeded(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + requested} tokens ({prompt_len} in the {prompt_param}, {requested} in the completion). "
                f"Please reduce the length of the {prompt_param} or completion.",
                param=prompt_param,
            )
        budget = requested
    else:
        budget = left
        for cap in (default, limits.default_max_tokens, limits.max_max_tokens):
            if cap is not None:
                budget = min(budget, cap)
        budget = max(1, min(budget, core.max_request_tokens // max(1, sequences)))
    if body.min_tokens is not None and body.min_tokens > budget:
        raise InvalidRequest(
            f"'min_tokens' ({body.min_tokens}) must be at most the request's '{max_tokens_param}' ({budget}).",
            param="min_tokens",
        )
    return budget
