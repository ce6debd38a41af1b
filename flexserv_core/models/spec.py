"""What a model *is* before it is loaded: its kind and where its weights come from."""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class ModelKind(enum.StrEnum):
    """The families of models FlexServ serves.

    The wire value of text generation is ``"serve"``, the name the FlexServ spec's
    ``/v1/flexserv/models/loaded`` route has always used for it.
    """

    TEXT = "serve"
    EMBEDDING = "embedding"
    TRANSCRIPTION = "transcription"


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A configured model: the name clients use and the source a backend loads.

    Attributes:
        name: the id clients put in the request's ``model`` field.
        kind: which family of backend serves it.
        source: a Hub id, a local directory or a file (GGUF, CTranslate2 dir...).
            Only configuration sets it; a request never does.
        backend: name of the backend that must load it, or ``None`` to let the
            first backend of ``kind`` that accepts the source load it.
        options: backend-specific options (e.g. ``gguf_file``) from configuration.
        origin: who declared it: ``"config"``, ``"embedded"`` (a plugin's default
            shipped in a package) or ``"hub"`` (allowed by ``--allow-hub-models``).
    """

    name: str
    kind: ModelKind
    source: str
    backend: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    origin: str = "config"
