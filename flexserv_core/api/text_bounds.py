"""Edge bounds of text requests, checked before a model is acquired or a prompt tokenised.

Each bound is a core setting (``--max-messages``, ``--max-content-parts``,
``--max-stop-strings``, ``--max-stop-chars``, ``--max-prompt-chars``,
``--max-request-tokens``) and each violation is a 400 naming the ``param`` to fix,
so a hostile body costs a scan of what was already parsed and nothing more. The
model's own limits (context, vocabulary) are checked later, in
:mod:`flexserv_core.api.text_validation`.
"""

from __future__ import annotations

from typing import Any

from flexserv_core.api.text_schemas import ChatCompletionRequest, CompletionRequest
from flexserv_core.errors import InvalidRequest
from flexserv_core.settings import CoreSettings


def _too_many(what: str, count: int, limit: int, param: str, flag: str) -> InvalidRequest:
    return InvalidRequest(
        f"Too many {what}: {count}; this server accepts at most {limit} ({flag}).",
        param=param,
        code="invalid_value",
    )


def check_stop(stop: str | list[str] | None, core: CoreSettings) -> None:
    if stop is None:
        return
    stops = [stop] if isinstance(stop, str) else stop
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


def _check_requested_tokens(requested: int | None, sequences: int, core: CoreSettings, param: str) -> None:
    if requested is not None and requested * sequences > core.max_request_tokens:
        raise InvalidRequest(
            f"'{param}' x sequences is {requested} x {sequences} = {requested * sequences} tokens; this server"
            f" generates at most {core.max_request_tokens} per request (--max-request-tokens).",
            param=param,
            code="invalid_value",
        )


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
            chars += sum(len(part.text or "") for part in content)
        elif content is not None:
            chars += len(content)
        check_prompt_chars(chars, core, "messages")
    check_stop(body.stop, core)
    if body.max_completion_tokens is not None:
        _check_requested_tokens(body.max_completion_tokens, body.n or 1, core, "max_completion_tokens")
    else:
        _check_requested_tokens(body.max_tokens, body.n or 1, core, "max_tokens")
    check_stream_options(body.stream, body.stream_options)


def check_stream_options(stream: bool | None, stream_options: object | None) -> None:
    """``stream_options`` only with ``stream: true`` (as OpenAI and vLLM answer)."""
    if stream_options is not None and not stream:
        raise InvalidRequest(
            "'stream_options' is only allowed when 'stream' is true.", param="stream_options", code="invalid_value"
        )


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
    check_stop(body.stop, core)
    # best_of generates max(n, best_of) candidates per prompt: that is what the bound counts
    candidates = max(body.n or 1, body.best_of or 1)
    _check_requested_tokens(body.max_tokens, candidates * prompts, core, "max_tokens")
    check_stream_options(body.stream, body.stream_options)


def default_budget(budget: int, sequences: int, core: CoreSettings) -> int:
    """A default completion budget cut so that ``budget x sequences`` fits ``--max-request-tokens``."""
    return max(1, min(budget, core.max_request_tokens // max(1, sequences)))
