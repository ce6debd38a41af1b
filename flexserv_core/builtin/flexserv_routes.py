"""FlexServ's own routes: liveness, health, info, loaded models, unload."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
from litestar import Request, Response, get, post

from flexserv_core import __version__, hooks
from flexserv_core.api.body import read_json_object, unknown_fields, validate
from flexserv_core.api.wire_schemas import (
    HealthResponse,
    Liveness,
    LoadedModels,
    ServerInfo,
    UnloadRequest,
    UnloadResponse,
)
from flexserv_core.errors import InvalidRequest, ModelNotFound, quote
from flexserv_core.events import EvictionReason
from flexserv_core.models.registry import ModelState
from flexserv_core.models.spec import ModelKind, ModelSpec, loaded_wire_kind
from flexserv_core.plugin_report import plugin_report
from flexserv_core.server import FlexServer

log = logging.getLogger(__name__)


def server_of(request: Request[Any, Any, Any]) -> FlexServer:
    server: FlexServer = request.app.state.flexserv
    return server


@get(["/health", "/v1/health"], opt={"public": True, "response": Liveness}, summary="Liveness")
async def liveness() -> dict[str, str]:
    """``/v1/health`` is the OpenAI-style path ``transformers serve`` answers."""
    return {"status": "ok"}


def _model_status(server: FlexServer, kind: str) -> dict[str, Any] | None:
    spec = server.catalog.default(kind)
    if spec is None:
        return None
    # No source here: /v1/flexserv/health stays public under --api-key, and a
    # source is often a filesystem path (it is in the guarded /info).
    status: dict[str, Any] = {"model_id": spec.name, "state": server.registry.state_of(spec.name).value}
    model = server.registry.model_if_loaded(spec.name)
    if model is not None:
        status.update(device=model.device, dtype=model.dtype)
    else:
        status.update(_planned(server, spec))
    return status


def _planned(server: FlexServer, spec: ModelSpec) -> dict[str, Any]:
    """Device and dtype the backend would load ``spec`` with (``None`` when it cannot tell)."""
    try:
        placement = server.registry.backend_for(spec).placement(spec)
    except Exception:  # health must answer whatever a backend does
        log.exception("model '%s': the backend's placement() failed", spec.name)
        placement = None
    return {"device": placement.device if placement else None, "dtype": placement.dtype if placement else None}


@get(
    "/v1/flexserv/health",
    opt={"public": True, "response": HealthResponse},
    summary="Backend health (readiness)",
)
async def health(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """200 once every ``--preload`` model is ready; 503 while one loads, after one failed,
    or while a resident model reports it can no longer serve (until a request replaces it)."""
    server = server_of(request)
    preloader = server.preloader
    broken = server.registry.failed()
    ready = preloader.ready and not broken
    status = "ok" if ready else ("error" if preloader.failed or broken else "loading")
    body: dict[str, Any] = {
        "status": status,
        "version": __version__,
        "uptime_seconds": round(time.time() - server.started_at, 1),
        "model": _model_status(server, ModelKind.TEXT),
        "embedding_model": _model_status(server, ModelKind.EMBEDDING),
        "transcription_model": _model_status(server, ModelKind.TRANSCRIPTION),
        "active_requests": server.registry.active_requests,
        "preload": preloader.report(),
    }
    if preloader.failed:
        body["error"] = "preload failed for " + ", ".join(f"'{s.model_id}': {s.error}" for s in preloader.failed)
    if broken:  # its engine died: health must not say ok while it cannot serve
        body["error"] = "; ".join([*filter(None, [body.get("error")]), *(f"'{n}': {why}" for n, why in broken)])
    body.update(hooks.health(server))
    return Response(body, status_code=200 if ready else 503)


#: What the chat API implements beyond plain text, for clients (the playground) that
#: show controls only for what a server serves. A model whose backend cannot enforce
#: a schema answers such a request with a 400 naming the parameter.
TEXT_FEATURES = ("response_format", "json_schema", "tools")


def api_features(server: FlexServer) -> list[str]:
    """Optional API features this server serves: the text ones once it has a text backend
    (``tools`` only with tool calling, the structured outputs only with a constraint
    compiler)."""
    if not any(b.kind == ModelKind.TEXT for b in server.backends):
        return []
    tools, constrained = server.tool_calling is not None, server.constraints is not None
    return [f for f in TEXT_FEATURES if (tools if f == "tools" else constrained)]


@get("/v1/flexserv/info", summary="Configuration and plugins", opt={"response": ServerInfo, "scope": "operations"})
async def info(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    return {
        "version": __version__,
        "settings": server.settings.summary(),
        "plugins": plugin_report(server.pm, server.routes_by_plugin),
        "backends": [{"name": b.name, "kind": str(b.kind)} for b in server.backends],
        "models": [
            {
                "model_id": s.name,
                "kind": str(s.kind),
                "aliases": list(s.aliases),
                "source": s.source,
                "origin": s.origin,
            }
            for s in server.catalog.specs()
        ],
        "defaults": {str(k): v for k, v in server.catalog.defaults.items()},
        "features": api_features(server),
    }


@get(
    "/v1/flexserv/models/loaded",
    summary="Models resident in memory",
    opt={"response": LoadedModels, "scope": "operations"},
)
async def loaded_models(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    # Text models are "serve" here: the wire name gateways match on.
    models = [msgspec.to_builtins(m) for m in server.registry.loaded()]
    for m in models:
        m["kind"] = loaded_wire_kind(m["kind"])
    return {"models": models}


@post(
    "/v1/flexserv/models/unload",
    status_code=200,
    summary="Unload one model or all",
    opt={"body": UnloadRequest, "body_required": False, "response": UnloadResponse, "scope": "operations"},
)
async def unload_models(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    raw = await request.body()
    body = await read_json_object(request) if raw.strip() else {}
    # Every unknown field is refused, whatever --block-on-unexpected-fields says: dropped,
    # a misspelt name ({"model": "x"}) would leave the default, "*", and unload every model.
    unknown = unknown_fields(body, UnloadRequest)
    if unknown:
        hint = " (the model is named by 'model_id')" if unknown[0] == "model" else ""
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {quote(unknown[0])}{hint}; this route takes "
            "'model_id' (a model or alias, or '*' for all) and 'oom_triggered'.",
            param=unknown[0],
            code="unexpected_field",
        )
    unload = validate(body, UnloadRequest, endpoint="/v1/flexserv/models/unload")
    model_id = None if unload.model_id == "*" else _unload_target(server, unload.model_id)
    oom_triggered = unload.oom_triggered
    active_total = server.registry.active_requests
    if oom_triggered:  # the caller reacts to an out-of-memory condition: an OOM eviction, logged and counted so
        results = await server.registry.unload(
            model_id, reason=EvictionReason.OOM, detail="reported by the caller (oom_triggered)"
        )
    else:
        results = await server.registry.unload(model_id)
    warnings: list[str] = []
    for r in results:
        if r.pending:
            warnings.append(
                f"Model '{r.model_id}' was still loading; it will be unloaded as soon as its load finishes."
            )
        if r.had_active_requests:
            warnings.append(
                f"Model '{r.model_id}' had {r.active_requests} active request(s); they finish on the model, which is freed afterwards."
            )
    return {
        "unloaded": [
            {
                "model_id": r.model_id,
                "was_loaded": r.was_loaded,
                "had_active_requests": r.had_active_requests,
                "pending": r.pending,
            }
            for r in results
        ],
        "warnings": warnings,
        "active_requests_at_eviction": active_total,
        "oom_triggered": oom_triggered,
    }


def _unload_target(server: FlexServer, model_id: str) -> str:
    """The registry name ``model_id`` selects: an alias resolves as in request routing;
    a name neither configured nor loaded is a 404, as on every route."""
    spec = server.catalog.get(model_id)
    if spec is not None:
        return spec.name
    if server.registry.state_of(model_id) is not ModelState.UNLOADED:
        return model_id  # loaded under a name only a plugin resolves (an anomaly model of an API key)
    raise ModelNotFound(
        f"The model '{quote(model_id)}' does not exist or is not served here. See GET /v1/models.", param="model_id"
    )


ROUTES = [liveness, health, info, loaded_models, unload_models]
