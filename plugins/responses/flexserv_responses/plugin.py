"""Hook implementations of the ``responses`` plugin."""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import RequestContext, Settings, hookimpl
from flexserv_responses import routes
from flexserv_responses.request import ENDPOINT, check_parameters
from flexserv_responses.store import ResponsesSettings


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [ResponsesSettings]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return list(routes.ROUTES)


@hookimpl(trylast=True)
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    """After other plugins' edits, before validation: OpenAI parameters that are not
    served are refused by name, bookkeeping ones dropped."""
    if endpoint == ENDPOINT:
        check_parameters(body)
