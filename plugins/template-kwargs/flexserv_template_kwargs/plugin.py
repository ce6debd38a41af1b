"""The ``template-kwargs`` plugin: the server's default chat-template variables
(``--template-kwargs-defaults``) and a request's own (``chat_template_kwargs`` and the
top-level ``enable_thinking``).

``flexserv_preprocess_request`` takes the request's variables out of the body (before
schema validation) and leaves both layers in the request's state, where the core's one
merge reads them (:mod:`flexserv_core.template_variables`: defaults < the model's
options < other plugins' contributions < the request). No patching of tokenizer
methods, no thread-locals: two concurrent requests each render with their own values.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import CHAT_TEMPLATE_DEFAULTS, CHAT_TEMPLATE_REQUEST, RequestContext, Settings, hookimpl
from flexserv_template_kwargs.merge import request_template_kwargs
from flexserv_template_kwargs.settings import TemplateKwargsSettings, parse_defaults

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
    defaults = context.server.settings.get(TemplateKwargsSettings).template_kwargs_defaults
    if defaults:  # parsed and checked at start-up (flexserv_configure)
        context.state[CHAT_TEMPLATE_DEFAULTS] = defaults if isinstance(defaults, dict) else parse_defaults(defaults)
    values = request_template_kwargs(body)
    if values is not None:
        context.state[CHAT_TEMPLATE_REQUEST] = values
