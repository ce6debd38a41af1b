"""Shapes of bodies that routes build as plain dicts, declared for the API schema.

The routes stay free to build their dicts; these structs are what ``/openapi.json``
documents (and what the OpenAPI tests check responses against).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct


class ErrorDetail(Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Struct, kw_only=True):
    """Every 4xx/5xx body, OpenAI's shape."""

    error: ErrorDetail


class ModelObject(Struct, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    kind: str
    state: str
    root: str
    max_model_len: int | None = None  # a text model's context length, once loaded


class ModelList(Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelObject]


class UnloadRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """Omit ``model_id`` (or send no body) or send ``"*"`` to unload every model; any
    other value names one model or alias (``null`` and unknown fields are refused).
    ``oom_triggered``: the caller unloads because memory ran out; the unload counts
    as an OOM eviction (``flexserv:model_evictions_total{reason="oom"}``)."""

    model_id: Annotated[str, Meta(min_length=1)] = "*"
    oom_triggered: bool = False


class UnloadedModel(Struct, kw_only=True):
    model_id: str
    was_loaded: bool
    had_active_requests: bool
    pending: bool


class UnloadResponse(Struct, kw_only=True):
    unloaded: list[UnloadedModel]
    warnings: list[str]
    active_requests_at_eviction: int
    oom_triggered: bool


class Liveness(Struct, kw_only=True):
    status: Literal["ok"] = "ok"


class ModelStatus(Struct, kw_only=True):
    model_id: str
    state: str
    device: str | None = None
    dtype: str | None = None


class HealthResponse(Struct, kw_only=True):
    """200 when every ``--preload`` model is ready, 503 (this body too) until then or
    after a preload failed. Plugins may add fields (``flexserv_health``)."""

    status: Literal["ok", "loading", "error"]
    version: str
    uptime_seconds: float
    model: ModelStatus | None
    embedding_model: ModelStatus | None
    transcription_model: ModelStatus | None
    active_requests: int
    preload: Any = None
    error: str | None = None


class LoadedModelEntry(Struct, kw_only=True):
    model_id: str
    kind: str  # "serve" for text models (the spec's wire value), else the model's kind
    state: str
    active_requests: int
    last_used: float
    device: str | None = None
    dtype: str | None = None


class LoadedModels(Struct, kw_only=True):
    models: list[LoadedModelEntry]


class ServerInfo(Struct, kw_only=True):
    version: str
    settings: dict[str, Any]
    plugins: list[dict[str, Any]]
    backends: list[dict[str, str]]
    models: list[dict[str, Any]]
    defaults: dict[str, str]
    #: optional API features served (``response_format``, ``json_schema``, ``tools``)
    features: list[str]
