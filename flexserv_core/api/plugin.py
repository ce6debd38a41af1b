"""The essential built-in plugin that serves the OpenAI-compatible API."""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core.api import chat, completions, embeddings, models_routes
from flexserv_core.hookspecs import hookimpl
from flexserv_core.settings import Settings


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [embeddings.EmbeddingSettings]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return [
        *models_routes.ROUTES,
        *chat.ROUTES,
        *completions.ROUTES,
        *embeddings.ROUTES,
    ]
