"""``GET /v1/models`` and ``GET /v1/models/{id}``."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from flexserv_core.errors import ModelNotFound
from flexserv_core.models.spec import ModelSpec
from flexserv_core.server import FlexServer


def _model_object(server: FlexServer, spec: ModelSpec) -> dict[str, Any]:
    return {
        "id": spec.name,
        "object": "model",
        "created": int(server.started_at),
        "owned_by": "flexserv",
        "kind": spec.kind.value,
        "state": server.registry.state_of(spec.name).value,
    }


@get("/v1/models", summary="List models")
async def list_models(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server: FlexServer = request.app.state.flexserv
    return {"object": "list", "data": [_model_object(server, s) for s in server.catalog.specs()]}


@get("/v1/models/{model_id:path}", summary="Retrieve a model")
async def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> dict[str, Any]:
    server: FlexServer = request.app.state.flexserv
    model_id = model_id.lstrip("/")
    for spec in server.catalog.specs():
        if spec.name == model_id:
            return _model_object(server, spec)
    raise ModelNotFound(f"The model '{model_id}' does not exist or is not served here.", param="model")


ROUTES = [list_models, retrieve_model]
