"""The embeddings route's settings, request and (for ``/openapi.json``) response shape."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Struct

#: What OpenAI accepts: a string, strings, token ids, or lists of token ids. msgspec
#: allows one array type per union, so items are checked by ``routes.normalise_input``.
EmbeddingInput = str | list[str | int | list[int]]


class EmbeddingSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of ``POST /v1/embeddings``.

    Prefixed with the plugin's name, so that under ``-p no:embeddings`` a config file
    or environment that sets them is ignored with a warning; the names they had as
    core settings (``max_embedding_inputs``, ``embedding_truncate``, hence
    ``--max-embedding-inputs`` and ``--no-embedding-truncate``) are aliases."""

    embeddings_max_inputs: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Most inputs one /v1/embeddings request may carry (OpenAI: 2048).",
            extra={"aliases": ["max_embedding_inputs"]},
        ),
    ] = 2048
    embeddings_truncate: Annotated[
        bool,
        msgspec.Meta(
            description=(
                "Truncate embedding inputs longer than the model's maximum; with --no-embeddings-truncate they get a 400."
            ),
            extra={"aliases": ["embedding_truncate"]},
        ),
    ] = True


class EmbeddingRequest(Struct, kw_only=True):
    """The body of ``POST /v1/embeddings`` (OpenAI's fields)."""

    input: EmbeddingInput
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, msgspec.Meta(ge=1)] | None = None
    user: str | None = None


# --- documented shape (the route builds plain values) -------------------------------


class EmbeddingObject(Struct, kw_only=True):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32 (encoding_format="base64")


class EmbeddingUsage(Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: EmbeddingUsage
