"""Texts to rows: embedded with an embedding model through the registry (loaded, leased, expired like any model)."""

from __future__ import annotations

import numpy as np
from flexserv_embeddings import EmbeddingModel

from flexserv_anomaly.settings import AnomalySettings
from flexserv_core import FlexServer, InvalidRequest, ModelKind

#: Texts per ``embed`` call: the embeddings route accepts 2048 per request by default.
CHUNK = 256


def embedding_model_name(server: FlexServer, requested: str | None) -> str:
    """The request's embedding model, else ``--anomaly-embedding-model``, else the server's default."""
    name = requested or server.settings.get(AnomalySettings).anomaly_embedding_model
    if name:
        return name
    spec = server.catalog.default(ModelKind.EMBEDDING)
    if spec is None:
        raise InvalidRequest(
            "Text data needs an embedding model and this server has none; configure one "
            "(--model embedding:NAME=SOURCE) or send numeric rows.",
            param="embedding_model",
            code="no_embedding_model",
        )
    return spec.name


async def embed(server: FlexServer, model_name: str, texts: list[str]) -> np.ndarray:
    """One row per text (L2-normalised vectors), in order."""
    async with server.registry.acquire(model_name, EmbeddingModel) as lease:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), CHUNK):
            result = await lease.model.embed(texts[start : start + CHUNK], truncate=True)
            vectors.extend(result.vectors)
    return np.asarray(vectors, dtype=np.float64)
