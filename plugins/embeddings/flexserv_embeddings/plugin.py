"""Hook implementations of the ``embeddings`` plugin: ``POST /v1/embeddings`` and its settings."""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import RequestContext, Settings, hookimpl, refuse_unsupported
from flexserv_embeddings import routes
from flexserv_embeddings.metrics import embedding_counters
from flexserv_embeddings.schemas import EmbeddingSettings


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [EmbeddingSettings]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return routes.ROUTES


@hookimpl
def flexserv_metrics_collectors(settings: Settings) -> list[Any]:
    return list(embedding_counters(settings))


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    if endpoint == routes.ENDPOINT:
        refuse_unsupported(body, routes.UNSUPPORTED)
