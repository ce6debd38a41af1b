"""The essential built-in plugin that serves the OpenAI-compatible API."""

from __future__ import annotations

from typing import Any

from flexserv_core.api import chat, completions, models_routes
from flexserv_core.hookspecs import hookimpl
from flexserv_core.settings import Settings


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return [
        *models_routes.ROUTES,
        *chat.ROUTES,
        *completions.ROUTES,
    ]
