"""Reading a request's template variables: ``chat_template_kwargs`` and the
top-level ``enable_thinking``, which wins over it. Reserved names are the core's to
refuse, in its one merge (:mod:`flexserv_core.template_variables`)."""

from __future__ import annotations

from typing import Any

from flexserv_core import InvalidRequest

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
