"""``GET /v1/models`` and ``GET /v1/models/{id}``."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from flexserv_core.api.wire_schemas import ModelList, ModelObject
from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.errors import ModelNotFound, quote
from flexserv_core.models.spec import ModelSpec
from flexserv_core.server import FlexServer


def _max_model_len(server: FlexServer, spec: ModelSpec) -> int | None:
    """A text model's context length, known once it is loaded (vLLM's ``max_model_len``)."""
    model = server.registry.model_if_loaded(spec.name)
    return model.limits.context_length if isinstance(model, TextGenerationModel) else None


def _model_object(server: FlexServer, spec: ModelSpec, model_id: str | None = None) -> dict[str, Any]:
    """The OpenAI model object; an alias is listed under its own id, with ``root``
    naming the model it selects (they share one loaded instance)."""
    return {
        "id": model_id or spec.name,
        "object": "model",
        "created": int(server.started_at),
        "owned_by": "flexserv",
        "kind": str(spec.kind),
        "state": server.registry.state_of(spec.name).value,
        "root": spec.name,
        "max_model_len": _max_model_len(server, spec),
    }


@get("/v1/models", summary="List models", opt={"response": ModelList, "scope": "inference"})
async def list_models(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server: FlexServer = request.app.state.flexserv
    catalog = server.catalog
    # a name is listed under the model it selects: an embedded default's alias that
    # configuration gave to another model is that model's
    data = [
        _model_object(server, s, name)
        for s in catalog.specs()
        for name in (s.name, *s.aliases)
        if catalog.get(name) is s
    ]
    return {"object": "list", "data": data}


@get("/v1/models/{model_id:path}", summary="Retrieve a model", opt={"response": ModelObject, "scope": "inference"})
async def retrieve_model(request: Request[Any, Any, Any]) -> dict[str, Any]:
    # read from the request rather than declared as an argument: Litestar deprecates
    # inferred path arguments, and its replacement (FromPath) is newer than our minimum
    server: FlexServer = request.app.state.flexserv
    model_id = str(request.path_params["model_id"]).lstrip("/")
    spec = server.catalog.get(model_id)
    if spec is not None:
        return _model_object(server, spec, model_id)
    raise ModelNotFound(f"The model '{quote(model_id)}' does not exist or is not served here.", param="model")


ROUTES = [list_models, retrieve_model]
