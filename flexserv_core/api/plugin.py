"""The essential built-in plugin that serves the OpenAI-compatible API."""

from __future__ import annotations

from typing import Any

from flexserv_core.api import models_routes
from flexserv_core.hookspecs import hookimpl
from flexserv_core.server import FlexServer


@hookimpl
def flexserv_register_routes(server: FlexServer) -> list[Any]:
    return [*models_routes.ROUTES]
