"""Which models may be served: configured ones, embedded defaults, allowed Hub ids.

A request's ``model`` field only *selects* from this catalog; it is never treated
as a path or a source. Anything the catalog does not know goes to the
``flexserv_resolve_model`` hook, whose core implementation accepts Hub ids only
with ``--allow-hub-models``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from flexserv_core.errors import InvalidRequest, ModelNotFound, UsageError
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.settings import CoreSettings

log = logging.getLogger(__name__)

_KIND_ALIASES = {
    "serve": ModelKind.TEXT,
    "text": ModelKind.TEXT,
    "chat": ModelKind.TEXT,
    "embedding": ModelKind.EMBEDDING,
    "transcription": ModelKind.TRANSCRIPTION,
    "asr": ModelKind.TRANSCRIPTION,
}


def parse_model_option(value: str) -> ModelSpec:
    """Parse ``[KIND:]NAME=SOURCE`` from ``--model``."""
    name, sep, source = value.partition("=")
    if not sep or not name or not source:
        raise UsageError(f"invalid value for setting 'model' (--model): {value!r} is not [KIND:]NAME=SOURCE")
    kind = ModelKind.TEXT
    prefix, colon, rest = name.partition(":")
    if colon:
        if prefix not in _KIND_ALIASES:
            raise UsageError(
                f"invalid value for setting 'model' (--model): unknown kind {prefix!r} in {value!r}; use one of serve, embedding, transcription"
            )
        kind, name = _KIND_ALIASES[prefix], rest
    return ModelSpec(name=name, kind=kind, source=source, origin="config")


class ModelCatalog:
    """Name -> :class:`ModelSpec`, plus the default model of each kind."""

    def __init__(
        self,
        specs: Iterable[ModelSpec],
        defaults: dict[ModelKind, str],
        force_model: str | None,
        resolver: Callable[[str, ModelKind], ModelSpec | None],
    ) -> None:
        self._specs: dict[str, ModelSpec] = {}
        for spec in specs:
            self._specs.setdefault(spec.name, spec)
        self.defaults = defaults
        self.force_model = force_model
        self._resolver = resolver
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, core: CoreSettings, embedded: list[ModelSpec], resolver: Callable[[str, ModelKind], ModelSpec | None]
    ) -> ModelCatalog:
        configured = [parse_model_option(v) for v in core.model]
        names = {s.name: s for s in configured}
        specs = list(configured)
        defaults: dict[ModelKind, str] = {}
        for kind, value in (
            (ModelKind.TEXT, core.default_model),
            (ModelKind.EMBEDDING, core.default_embedding_model),
            (ModelKind.TRANSCRIPTION, core.default_transcription_model),
        ):
            if value is None:
                continue
            if value not in names:
                spec = ModelSpec(name=value, kind=kind, source=value, origin="config")
                specs.append(spec)
                names[value] = spec
            defaults[kind] = value
        for spec in embedded:
            if spec.name not in names:
                specs.append(spec)
                names[spec.name] = spec
            defaults.setdefault(spec.kind, spec.name)
        for spec in configured:
            defaults.setdefault(spec.kind, spec.name)
        force = core.force_model
        if force is not None and force not in names:
            spec = ModelSpec(name=force, kind=ModelKind.TEXT, source=force, origin="config")
            specs.append(spec)
        return cls(specs, defaults, force, resolver)

    def specs(self) -> list[ModelSpec]:
        return list(self._specs.values())

    def default(self, kind: ModelKind) -> ModelSpec | None:
        name = self.force_model if kind is ModelKind.TEXT and self.force_model else self.defaults.get(kind)
        return self._specs.get(name) if name else None

    def resolve(self, model_id: str | None, kind: ModelKind) -> ModelSpec:
        """The spec a request's ``model`` selects; raises 404 ``model_not_found``."""
        if kind is ModelKind.TEXT and self.force_model:
            return self._specs[self.force_model]
        if not model_id:
            spec = self.default(kind)
            if spec is None:
                raise ModelNotFound(f"no {kind.value} model is configured", param="model")
            return spec
        spec = self._specs.get(model_id)
        if spec is None:
            spec = self._resolver(model_id, kind)
            if spec is None:
                raise ModelNotFound(
                    f"The model '{model_id}' does not exist or is not served here. See GET /v1/models.", param="model"
                )
            with self._lock:
                spec = self._specs.setdefault(spec.name, spec)
        if spec.kind is not kind:
            raise InvalidRequest(
                f"The model '{model_id}' is a {spec.kind.value} model and cannot serve this endpoint.",
                param="model",
                code="model_kind_mismatch",
            )
        return spec
