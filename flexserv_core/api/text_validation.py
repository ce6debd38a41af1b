"""The one place a text request is checked against the model's :class:`TextLimits`.

Models and engines only ``assert`` what these functions guarantee, so every limit
has one message, one error class and the parameter the client should fix:

* an empty prompt: ``invalid_value`` on ``messages`` / ``prompt`` / ``prompt[i]``;
* a token id outside the vocabulary: on ``prompt[j]`` / ``prompt[i][j]``;
* ``max_tokens`` above the model's cap: on ``max_tokens`` or ``max_completion_tokens``
  (whichever the request set);
* prompt (+ completion) beyond the context: ``context_length_exceeded`` on the prompt's
  parameter, as OpenAI reports it.
"""

from __future__ import annotations

from typing import Any

from flexserv_core.backends.base import TextLimits
from flexserv_core.errors import ContextLengthExceeded, InvalidRequest, quote

#: ``max_tokens`` of a ``/v1/completions`` request that sets none: OpenAI's legacy
#: default (chat completions keep the model's ``default_max_tokens``).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


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


def check_prompt(limits: TextLimits, prompt_len: int, param: str) -> None:
    """The prompt has at least one token and leaves room for one more."""
    if prompt_len < 1:
        raise InvalidRequest("The prompt is empty.", param=param, code="invalid_value")
    limit = limits.context_length
    if prompt_len >= limit:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens, and the {param} alone take {prompt_len} tokens. "
            f"Please reduce the length of the {param}.",
            param=param,
        )


def max_tokens_for(
    limits: TextLimits,
    prompt_len: int,
    requested: int | None,
    *,
    prompt_param: str,
    max_tokens_param: str,
    default: int | None = None,
) -> int:
    """Check the prompt and return the completion budget: the request's, else
    ``default`` and the model's ``default_max_tokens``, capped by what is left of the context.

    ``prompt_param`` names the prompt (``messages``, ``prompt``, ``prompt[i]``),
    ``max_tokens_param`` the field the request set the budget with, ``default`` the
    endpoint's own default (:data:`COMPLETIONS_DEFAULT_MAX_TOKENS`), if it has one.
    """
    check_prompt(limits, prompt_len, prompt_param)
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
        return requested
    budget = left
    for cap in (default, limits.default_max_tokens, limits.max_max_tokens):
        if cap is not None:
            budget = min(budget, cap)
    return budget
