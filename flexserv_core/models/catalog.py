"""Which models may be served: configured ones, embedded defaults, allowed Hub ids.

A request's ``model`` field only *selects* from this catalog (by a model's name or
one of its aliases); it is never treated as a path or a source. Anything the
catalog does not know goes to the ``flexserv_resolve_model`` hook, whose core
implementation accepts Hub ids only with ``--allow-hub-models``.

Kinds are open: the catalog accepts the core's :class:`ModelKind` values, the kinds
the registered backends declare, and the aliases in :data:`KIND_ALIASES`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

import msgspec

from flexserv_core.errors import InvalidRequest, ModelNotFound, UsageError, quote
from flexserv_core.models.defaults import DEFAULT_SETTING_FLAGS, ModelOffer, pick_defaults
from flexserv_core.models.spec import KIND_ALIASES, ModelKind, ModelSpec, canonical_kind
from flexserv_core.settings import CoreSettings

log = logging.getLogger(__name__)

Resolver = Callable[[str, str], ModelSpec | None]


def _kinds_hint(kinds: Iterable[str]) -> str:
    return ", ".join(sorted({str(k) for k in kinds} | set(KIND_ALIASES)))


def parse_model_option(value: str, kinds: Iterable[str] = ModelKind) -> ModelSpec:
    """Parse ``[KIND:]NAME=SOURCE`` from ``--model``; ``kinds`` are the valid kinds."""
    name, sep, source = value.partition("=")
    if not sep or not name or not source:
        raise UsageError(f"invalid value for setting 'model' (--model): {value!r} is not [KIND:]NAME=SOURCE")
    kind: str = ModelKind.TEXT
    prefix, colon, rest = name.partition(":")
    if colon:
        found = canonical_kind(prefix, kinds)
        if found is None:
            raise UsageError(
                f"invalid value for setting 'model' (--model): unknown kind {prefix!r} in {value!r}; "
                f"use one of {_kinds_hint(kinds)}"
            )
        kind, name = found, rest
    return ModelSpec(name=name, kind=kind, source=source, origin="config")


def _with_known_kind(spec: ModelSpec, where: str, kinds: Iterable[str]) -> ModelSpec:
    found = canonical_kind(spec.kind, kinds)
    if found is None:
        raise UsageError(
            f"{where}: unknown kind {spec.kind!r} for model {spec.name!r}; use one of {_kinds_hint(kinds)} "
            "(a plugin's kind needs its backend installed and not blocked)"
        )
    return msgspec.structs.replace(spec, kind=found)


def parse_alias_option(value: str) -> tuple[str, str]:
    """``ALIAS=NAME`` from ``--model-alias``."""
    alias, sep, name = value.partition("=")
    alias, name = alias.strip(), name.strip()
    if not sep or not alias or not name:
        raise UsageError(f"invalid value for setting 'model_alias' (--model-alias): {value!r} is not ALIAS=NAME")
    return alias, name


def _with_aliases(specs: list[ModelSpec], options: Sequence[str], where_declared: dict[str, str]) -> list[ModelSpec]:
    """``specs`` with the ``--model-alias`` names added to the models they name.

    An alias may not reuse a name configuration declared; it may take a name an
    embedded default offers (say ``whisper-1``): configuration wins.
    """
    by_name = {spec.name: spec for spec in specs}
    extra: dict[str, list[str]] = {}
    seen: set[str] = set()
    for value in options:
        alias, name = parse_alias_option(value)
        where = f"--model-alias {value}"
        if alias in where_declared or alias in seen:
            raise UsageError(
                f"model name {alias!r} is declared twice: by {where_declared.get(alias, where)} and by {where}"
            )
        target = by_name.get(name) or next((s for s in specs if name in s.aliases), None)
        if target is None:
            known = ", ".join(sorted(by_name)) or "none"
            raise UsageError(f"{where}: no model is named {name!r} (models: {known})")
        seen.add(alias)
        extra.setdefault(target.name, []).append(alias)
    return [
        msgspec.structs.replace(s, aliases=tuple(dict.fromkeys((*extra[s.name], *s.aliases)))) if s.name in extra else s
        for s in specs
    ]


class ModelCatalog:
    """Name or alias -> :class:`ModelSpec`, plus the default model of each kind."""

    def __init__(
        self,
        specs: Iterable[ModelSpec],
        defaults: dict[str, str],
        force_model: str | None,
        resolver: Resolver,
    ) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._by_name: dict[str, ModelSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                continue
            self._specs[spec.name] = spec
            for name in (spec.name, *spec.aliases):
                self._by_name.setdefault(name, spec)
        self.defaults = defaults
        self.force_model = force_model
        self._resolver = resolver
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls,
        core: CoreSettings,
        offered: Sequence[ModelOffer | ModelSpec],
        resolver: Resolver,
        *,
        configured: Sequence[ModelSpec] = (),
        kinds: Iterable[str] = (),
    ) -> ModelCatalog:
        """Build the catalog from ``--model`` values, ``[[models]]`` tables (``configured``),
        the default-model settings and the models plugins offer (``offered``; a bare
        spec counts as a first-party offer). Defaults follow
        :func:`~flexserv_core.models.defaults.pick_defaults`.

        ``kinds`` are the kinds the registered backends declare, on top of :class:`ModelKind`.
        A name or alias declared twice by configuration is a :class:`UsageError` naming both.
        """
        valid = {*ModelKind, *kinds}
        declared: list[tuple[ModelSpec, str]] = [(parse_model_option(v, valid), f"--model {v}") for v in core.model]
        declared += [
            (_with_known_kind(spec, f"[[models]] table models[{i}]", valid), f"[[models]] table models[{i}]")
            for i, spec in enumerate(configured)
        ]
        names: dict[str, ModelSpec] = {}
        where_declared: dict[str, str] = {}
        for spec, where in declared:
            for name in (spec.name, *spec.aliases):
                if name in where_declared:
                    raise UsageError(f"model name {name!r} is declared twice: by {where_declared[name]} and by {where}")
                where_declared[name], names[name] = where, spec
        configured_specs = [spec for spec, _ in declared]
        specs = list(configured_specs)
        offers = [o if isinstance(o, ModelOffer) else ModelOffer(o, "", True) for o in offered]
        # first-party first, then by plugin name: a name two plugins offer goes to the
        # same one whatever order their packages were installed in
        offers.sort(key=lambda o: (not o.first_party, o.plugin))
        offered_by: dict[str, str] = {}
        for offer in offers:
            name = offer.spec.name
            if name in offered_by and offered_by[name] != offer.plugin:
                log.warning(
                    "plugins %s and %s both offer a model named '%s': serving the one from %s",
                    offered_by[name],
                    offer.plugin,
                    name,
                    offered_by[name],
                )
            offered_by.setdefault(name, offer.plugin)
            if name not in names:
                specs.append(offer.spec)
                names[name] = offer.spec
        # after the offers, so that a default may name an embedded model, as --force-model may
        user_defaults: dict[str, str] = {}
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
            if names[value].kind != kind:
                raise UsageError(
                    f"{DEFAULT_SETTING_FLAGS[kind]} {value}: '{names[value].name}' is a {names[value].kind} model,"
                    f" not a {kind} model"
                )
            user_defaults[kind] = names[value].name
        defaults = pick_defaults(user_defaults, offers, configured_specs)
        specs = _with_aliases(specs, core.model_alias, where_declared)
        for spec in specs:
            for alias in spec.aliases:
                names.setdefault(alias, spec)
        force = core.force_model
        if force is not None:
            if force not in names:
                spec = ModelSpec(name=force, kind=ModelKind.TEXT, source=force, origin="config")
                specs.append(spec)
                names[force] = spec
            force = names[force].name
        return cls(specs, defaults, force, resolver)

    def specs(self) -> list[ModelSpec]:
        return list(self._specs.values())

    def get(self, name: str) -> ModelSpec | None:
        """The spec a name or alias selects, among those known now."""
        return self._by_name.get(name)

    def default(self, kind: str) -> ModelSpec | None:
        name = self.force_model if kind == ModelKind.TEXT and self.force_model else self.defaults.get(kind)
        return self._specs.get(name) if name else None

    def resolve(self, model_id: str | None, kind: str) -> ModelSpec:
        """The spec a request's ``model`` selects; raises 404 ``model_not_found``."""
        if kind == ModelKind.TEXT and self.force_model:
            return self._specs[self.force_model]
        if not model_id:
            spec = self.default(kind)
            if spec is None:
                raise ModelNotFound(f"no {kind} model is configured", param="model")
            return spec
        spec = self._by_name.get(model_id)
        if spec is None:
            spec = self._resolver(model_id, kind)
            if spec is None:
                raise ModelNotFound(
                    f"The model '{quote(model_id)}' does not exist or is not served here. See GET /v1/models.",
                    param="model",
                )
            with self._lock:
                spec = self._specs.setdefault(spec.name, spec)
                self._by_name.setdefault(spec.name, spec)
        if spec.kind != kind:
            default = self.default(kind)
            instead = f" (the default is '{default.name}')" if default else ""
            article = "an" if spec.kind[:1] in "aeiou" else "a"
            raise InvalidRequest(
                f"The model '{quote(model_id)}' is {article} {spec.kind} model; this endpoint serves {kind} models"
                f"{instead}. See GET /v1/models.",
                param="model",
                code="model_kind_mismatch",
            )
        return spec
