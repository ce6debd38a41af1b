"""Reading a request's template variables and merging them with the defaults.

Precedence, later winning:
server defaults (``--template-kwargs-defaults``) < the model's configured options
(``chat_template_kwargs`` in the model spec) < the request's
``chat_template_kwargs`` < the request's top-level ``enable_thinking``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flexserv_core import RESERVED_TEMPLATE_KWARGS, InvalidRequest

#: Template variable names a request may not set; one list with the core's
#: transformers backend (re-exported here under the plugin's historical name).
RESERVED_KEYS = RESERVED_TEMPLATE_KWARGS

#: Top-level request fields that are shorthands for a template variable.
SHORTHANDS = ("enable_thinking",)


def request_template_kwargs(body: dict[str, Any]) -> dict[str, Any] | None:
    """Pop ``chat_template_kwargs`` and the shorthands from ``body`` and return the
    request's variables (``None`` when it set none). Raises
    :class:`InvalidRequest` naming the offending param."""
    raw = body.pop("chat_template_kwargs", None)
    shorthands = {key: body.pop(key) for key in SHORTHANDS if key in body}
    if raw is None and all(v is None for v in shorthands.values()):
        return None
    if raw is not None and not isinstance(raw, dict):
        raise InvalidRequest(
            f"'chat_template_kwargs' must be a JSON object of template variables, got {_json_type(raw)}.",
            param="chat_template_kwargs",
            code="invalid_type",
        )
    merged: dict[str, Any] = dict(raw or {})
    reserved = sorted(RESERVED_KEYS.intersection(merged))
    if reserved:
        raise InvalidRequest(
            f"'chat_template_kwargs' may not set '{reserved[0]}': the server controls that argument of the chat template.",
            param=f"chat_template_kwargs.{reserved[0]}",
            code="invalid_value",
        )
    if (
        "enable_thinking" in merged
        and merged["enable_thinking"] is not None
        and not isinstance(merged["enable_thinking"], bool)
    ):
        raise InvalidRequest(
            f"'chat_template_kwargs.enable_thinking' must be true or false, got {_json_type(merged['enable_thinking'])}.",
            param="chat_template_kwargs.enable_thinking",
            code="invalid_type",
        )
    for key, value in shorthands.items():
        if value is None:
            continue
        if not isinstance(value, bool):
            raise InvalidRequest(
                f"'{key}' must be true or false, got {_json_type(value)}.", param=key, code="invalid_type"
            )
        merged[key] = value  # the top-level shorthand wins over chat_template_kwargs
    return merged


def merge_template_kwargs(
    defaults: Mapping[str, Any], model_options: Mapping[str, Any] | None, request: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Defaults < per-model options < the request (already shorthand-resolved)."""
    merged = dict(defaults)
    merged.update(model_options or {})
    merged.update(request or {})
    return merged


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null" if value is None else type(value).__name__
