"""Request parameters OpenAI defines that FlexServ does not implement: none is dropped silently.

Per endpoint:

* :data:`UNSUPPORTED`: parameters that would change the output. Sent with a value
  other than their neutral one, they are a 400 naming the parameter, code
  ``unsupported_parameter``.
* :data:`IGNORED`: bookkeeping (billing, storage, caching hints, end-user ids):
  accepted and dropped, so common clients keep working; docs/api.md lists them.

Anything else the request schema does not know is not an OpenAI parameter: it is
dropped with one warning per field name and endpoint, or refused under
``--block-on-unexpected-fields`` (nested fields included; see ``body.validate``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from flexserv_core.errors import UnsupportedParameter

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _never(value: Any) -> bool:
    """Neutral only when absent or null."""
    return value is None


def _none_or_empty(value: Any) -> bool:
    return value is None or value == []


def _not_true(value: Any) -> bool:
    return value is None or value is False


def _text_only(value: Any) -> bool:
    return value is None or value == ["text"]


_STOP_TOKEN_IDS = (_none_or_empty, "vLLM's stop token ids are not supported; send 'stop' strings")

#: parameter -> (is the value neutral?, why it is refused)
Refusals = Mapping[str, tuple[Callable[[Any], bool], str]]

#: endpoint -> its refusals
UNSUPPORTED: dict[str, Refusals] = {
    CHAT: {
        "audio": (_never, "audio output is not supported"),
        "modalities": (_text_only, "only the 'text' output modality is supported"),
        "prediction": (_never, "predicted outputs are not supported"),
        "web_search_options": (_never, "web search is not supported"),
        "functions": (_never, "the deprecated 'functions' parameter is not supported; send 'tools'"),
        "function_call": (_never, "the deprecated 'function_call' parameter is not supported; send 'tool_choice'"),
        "reasoning_effort": (
            _never,
            "'reasoning_effort' is not supported; use chat_template_kwargs where a model has it",
        ),
        "verbosity": (_never, "'verbosity' is not supported"),
        "moderation": (_never, "moderation is not supported; the output is not checked"),
        "store": (_not_true, "stored chat completions are not supported (the Responses API stores responses)"),
        "stop_token_ids": _STOP_TOKEN_IDS,
    },
    COMPLETIONS: {"stop_token_ids": _STOP_TOKEN_IDS},
}

#: endpoint -> parameter -> (OpenAI ``type`` values of it that are not served, why):
#: a 400 ``unsupported_parameter`` on the item's ``type``, not a schema error.
UNSUPPORTED_TYPES: dict[str, dict[str, tuple[frozenset[str], str]]] = {
    CHAT: {
        "tools": (frozenset({"custom"}), "custom (free-form) tools are not supported; send function tools"),
        "tool_choice": (
            frozenset({"allowed_tools", "custom"}),
            "only 'none', 'auto', 'required' and a named function are supported",
        ),
    },
}

#: endpoint -> bookkeeping parameters accepted and ignored.
IGNORED: dict[str, frozenset[str]] = {
    CHAT: frozenset(
        {
            "user",
            "metadata",
            "service_tier",
            "prompt_cache_key",
            "prompt_cache_retention",
            "prompt_cache_options",
            "safety_identifier",
        }
    ),
    COMPLETIONS: frozenset({"user"}),
}


def refuse_unsupported(body: dict[str, Any], refusals: Refusals) -> None:
    """Refuse the first parameter of ``refusals`` that ``body`` sends with a value that
    is not neutral (400, code ``unsupported_parameter``, naming it); remove the neutral
    ones from ``body`` (in place), so nothing downstream reads them."""
    for key, (neutral, why) in refusals.items():
        if key in body and not neutral(body[key]):
            raise UnsupportedParameter(f"'{key}' is not supported: {why}.", param=key)
        body.pop(key, None)


def check_openai_parameters(body: dict[str, Any], endpoint: str, declared: Collection[str] = ()) -> None:
    """Refuse unsupported parameters; remove ignored ones from ``body`` (in place),
    except those the request schema ``declared`` (like ``user``): they stay to have
    their type checked, and nothing reads them."""
    refuse_unsupported(body, UNSUPPORTED.get(endpoint, {}))
    for key in IGNORED.get(endpoint, ()):
        if key not in declared:
            body.pop(key, None)
    for key, (types, why) in UNSUPPORTED_TYPES.get(endpoint, {}).items():
        value = body.get(key)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, dict) and item.get("type") in types:
                where = f"{key}[{i}]" if isinstance(value, list) else key
                raise UnsupportedParameter(
                    f"'{where}.type' '{item['type']}' is not supported: {why}.", param=f"{where}.type"
                )
