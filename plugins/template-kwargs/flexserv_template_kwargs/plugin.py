"""The ``template-kwargs`` plugin: two hooks, per-request state only.

``flexserv_preprocess_request`` takes the variables out of the chat request body
(before schema validation) into ``context.state``; ``flexserv_chat_template_kwargs``
hands the merged dict to the core, which passes it to the model's ``render_chat``
for that request alone. No patching of tokenizer methods, no thread-locals: two
concurrent requests each render with their own values.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import ModelSpec, RequestContext, Settings, StashKey, hookimpl
from flexserv_template_kwargs.merge import merge_template_kwargs, request_template_kwargs
from flexserv_template_kwargs.settings import TemplateKwargsSettings, parse_defaults

REQUEST_KWARGS_KEY = StashKey[dict[str, Any]]("template-kwargs")
CHAT_ENDPOINT = "/v1/chat/completions"
#: Routes whose prompt goes through the chat template (``/tokenize`` counts chat's prompt).
TEMPLATE_ENDPOINTS = frozenset({CHAT_ENDPOINT, "/v1/responses", "/tokenize"})


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return TemplateKwargsSettings


@hookimpl
def flexserv_configure(settings: Settings) -> None:
    """Parse the JSON defaults once, so a bad value stops start-up (exit 2)."""
    value = settings.get(TemplateKwargsSettings).template_kwargs_defaults
    settings.replace(TemplateKwargsSettings, template_kwargs_defaults=parse_defaults(value))


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    if endpoint not in TEMPLATE_ENDPOINTS:
        return
    values = request_template_kwargs(body)
    if values is not None:
        context.state[REQUEST_KWARGS_KEY] = values


@hookimpl(tryfirst=True)
def flexserv_chat_template_kwargs(model: ModelSpec, context: RequestContext) -> dict[str, Any] | None:
    """Called first so that, in the core's merge, the request's values win over
    other plugins' contributions."""
    defaults = context.server.settings.get(TemplateKwargsSettings).template_kwargs_defaults
    merged = merge_template_kwargs(
        parse_defaults(defaults), model.options.get("chat_template_kwargs"), context.state.get(REQUEST_KWARGS_KEY)
    )
    return merged or None
