"""What a model *is* before it is loaded: its kind and where its weights come from."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import msgspec


class ModelKind(enum.StrEnum):
    """The kinds of models the core's own routes serve.

    Kinds are an open vocabulary: a backend may declare any other string (say
    ``"rerank"``) and the catalog accepts it, so annotations that may carry a
    plugin's kind use ``str``. Members compare equal to their string values.
    """

    TEXT = "text"
    EMBEDDING = "embedding"
    TRANSCRIPTION = "transcription"


#: Other spellings configuration accepts for a kind. ``serve`` is the FlexServ
#: spec's wire name for text models (still reported by ``/v1/flexserv/models/loaded``).
KIND_ALIASES: dict[str, str] = {
    "serve": ModelKind.TEXT,
    "chat": ModelKind.TEXT,
    "asr": ModelKind.TRANSCRIPTION,
}

#: Wire names that differ from the kind's own name, for gateways that follow the spec.
_LOADED_WIRE_NAMES: dict[str, str] = {ModelKind.TEXT: "serve"}


def canonical_kind(value: str, known: Iterable[str] = ModelKind) -> str | None:
    """The kind ``value`` names (aliases resolved), or ``None`` if it is not one of ``known``."""
    kind = KIND_ALIASES.get(value, value)
    known = {str(k) for k in known}
    if kind not in known:
        return None
    return ModelKind(kind) if kind in ModelKind.__members__.values() else kind


def loaded_wire_kind(kind: str) -> str:
    """The kind as ``/v1/flexserv/models/loaded`` reports it (text models: ``"serve"``)."""
    return _LOADED_WIRE_NAMES.get(kind, str(kind))


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A configured model: the name clients use and the source a backend loads.

    Attributes:
        name: the id clients put in the request's ``model`` field.
        kind: which kind of backend serves it: a :class:`ModelKind` or a kind a
            plugin's backend declares.
        source: a Hub id, a local directory or a file (GGUF, CTranslate2 dir...).
            Only configuration sets it; a request never does.
        backend: name of the backend that must load it, or ``None`` to let the
            first backend of ``kind`` that accepts the source load it.
        options: backend-specific options (e.g. ``gguf_file``) from configuration.
        revision: the revision (branch, tag or commit) of a Hub ``source``, for
            backends that fetch from the Hub; ``None`` means the default branch.
        aliases: extra names that select this model in requests.
        origin: who declared it: ``"config"``, ``"embedded"`` (a plugin's default
            shipped in a package) or ``"hub"`` (allowed by ``--allow-hub-models``).
        may_be_default: for a model a plugin offers through ``flexserv_default_models``:
            whether it may become the default of its kind (see :mod:`flexserv_core.models.defaults`).
            ``False`` serves it by name only.
    """

    name: str
    kind: str = ModelKind.TEXT
    source: str
    backend: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    revision: str | None = None
    aliases: tuple[str, ...] = ()
    origin: str = "config"
    may_be_default: bool = True
