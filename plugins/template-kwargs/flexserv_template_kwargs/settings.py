"""The server-wide defaults setting, and its parsing."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec

from flexserv_core import UsageError, reserved_template_names


class TemplateKwargsSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    template_kwargs_defaults: Annotated[
        dict[str, Any] | str | None,
        msgspec.Meta(
            description="Default chat-template variables for every chat request, as a JSON object "
            """(e.g. '{"enable_thinking": false}'); a request's own values win.""",
            extra={"metavar": "JSON"},
        ),
    ] = None


def parse_defaults(value: dict[str, Any] | str | None) -> dict[str, Any]:
    """The setting as a dict: a JSON string from the command line or environment,
    or a table from the config file. Raises :class:`UsageError` naming the flag."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"invalid value for setting 'template_kwargs_defaults' (--template-kwargs-defaults): not valid JSON: {exc}"
            ) from None
    if not isinstance(value, dict):
        raise UsageError(
            "invalid value for setting 'template_kwargs_defaults' (--template-kwargs-defaults): "
            f"expected a JSON object such as '{{\"enable_thinking\": false}}', got {type(value).__name__}"
        )
    reserved = reserved_template_names(value)
    if reserved:
        raise UsageError(
            f"invalid value for setting 'template_kwargs_defaults' (--template-kwargs-defaults): may not set {', '.join(reserved)}"
        )
    if "enable_thinking" in value and not isinstance(value["enable_thinking"], bool):
        raise UsageError(
            "invalid value for setting 'template_kwargs_defaults' (--template-kwargs-defaults): enable_thinking must be true or false"
        )
    return value
