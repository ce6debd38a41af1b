"""Chat-template variables: the one merge of their four layers, and the one check of
the names the renderer reserves.

Later layers win: the server's defaults < the model's ``chat_template_kwargs``
option < what plugins add (``flexserv_chat_template_kwargs``) < the request's own
values (its ``chat_template_kwargs``, then a top-level ``enable_thinking``). The
first and last layers belong to whoever reads them from the command line and the
request body (the first-party ``template-kwargs`` plugin): it puts them in the
request's state under :data:`CHAT_TEMPLATE_DEFAULTS` and :data:`CHAT_TEMPLATE_REQUEST`
while preprocessing, and the core merges here, so no plugin's call order decides
the precedence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flexserv_core.backends.base import RESERVED_TEMPLATE_KWARGS
from flexserv_core.errors import InvalidRequest, TemplateVariablesMisconfigured
from flexserv_core.stash import StashKey

#: The server's default variables for this request (lowest layer).
CHAT_TEMPLATE_DEFAULTS = StashKey[Mapping[str, Any]]("chat-template-defaults")
#: The request's own variables, ``enable_thinking`` already folded in (highest layer).
CHAT_TEMPLATE_REQUEST = StashKey[Mapping[str, Any]]("chat-template-request")


def reserved_template_names(values: Mapping[str, Any]) -> list[str]:
    """The names in ``values`` that the chat-template renderer takes as its own arguments."""
    return sorted(RESERVED_TEMPLATE_KWARGS.intersection(values))


def merge_template_variables(
    defaults: Mapping[str, Any] | None,
    model_options: Mapping[str, Any] | None,
    contributions: Mapping[str, Any] | None,
    request: Mapping[str, Any] | None,
    *,
    model: str,
) -> dict[str, Any]:
    """The four layers merged, later winning; a reserved name in the request is a 400
    naming it, in any other layer a server error naming the layer."""
    layers = (
        ("the server's default template variables", defaults),
        (f"the 'chat_template_kwargs' option of the model '{model}'", model_options),
        ("a plugin's flexserv_chat_template_kwargs", contributions),
    )
    merged: dict[str, Any] = {}
    for origin, values in layers:
        reserved = reserved_template_names(values or {})
        if reserved:
            raise TemplateVariablesMisconfigured(
                f"{origin} sets '{reserved[0]}', which the chat-template renderer reserves for itself."
            )
        merged.update(values or {})
    reserved = reserved_template_names(request or {})
    if reserved:
        raise InvalidRequest(
            f"'chat_template_kwargs' may not set '{reserved[0]}': the server controls that argument of the chat template.",
            param=f"chat_template_kwargs.{reserved[0]}",
            code="invalid_value",
        )
    merged.update(request or {})
    return merged
