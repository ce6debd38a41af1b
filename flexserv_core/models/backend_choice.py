"""Which backend loads a model: the one the spec names, or the one that recognises it.

* A spec that names a backend (``backend = "x"``, ``spec.backend``) is loaded by
  the backend of that name, whatever its ``accepts`` says.
* A spec that names none is loaded by the backend of its kind whose
  :meth:`~flexserv_core.Backend.accepts` recognises it. The base class's
  ``accepts`` recognises nothing, so a backend claims unnamed specs only by
  saying which sources it knows.
* Of several backends recognising the spec, the one whose
  :meth:`~flexserv_core.Backend.preference` for it is highest loads it (llama.cpp
  ranks ``.gguf`` sources above transformers, which can also read them).
* Two backends recognising the same spec with the same preference is an error naming both: at start-up
  for the models the catalog knows then (a :class:`UsageError`), at request time
  for a model resolved later (an OpenAI-shaped 503, ``code: "ambiguous_backend"``).
  Two backends registered under one name are a start-up error too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from flexserv_core.backends.base import Backend
from flexserv_core.errors import ModelLoadError, UsageError
from flexserv_core.models.spec import ModelSpec

log = logging.getLogger(__name__)


class RegisteredBackend(NamedTuple):
    """A backend and the plugin (and distribution) that registered it."""

    backend: Backend
    plugin: str = ""
    distribution: str | None = None

    def describe(self) -> str:
        where = ""
        if self.plugin:
            where = f" (plugin {self.plugin}, distribution {self.distribution or 'none'})"
        return f"backend '{self.backend.name}'{where}"


def _conflict(spec: ModelSpec, claimants: Sequence[RegisteredBackend]) -> str:
    claimants = sorted(claimants, key=lambda c: c.backend.name)
    names = " and ".join(c.describe() for c in claimants)
    return (
        f"model '{spec.name}' ({spec.kind}, source {spec.source!r}) is claimed by {names}; "
        f'name the one to use: backend = "{claimants[0].backend.name}" in its [[models]] table, '
        f"or block the other plugin with -p no:NAME"
    )


class BackendChoice:
    """The registered backends and the rule that picks one for a spec."""

    def __init__(self, backends: Iterable[Backend | RegisteredBackend]) -> None:
        self.registered = [b if isinstance(b, RegisteredBackend) else RegisteredBackend(b) for b in backends]
        by_name: dict[str, RegisteredBackend] = {}
        for entry in self.registered:
            earlier = by_name.setdefault(entry.backend.name, entry)
            if earlier is not entry:
                raise UsageError(
                    f"two backends are named '{entry.backend.name}': {earlier.describe()} and {entry.describe()}; "
                    "block one of the plugins with -p no:NAME"
                )

    @property
    def backends(self) -> list[Backend]:
        return [entry.backend for entry in self.registered]

    def claimants(self, spec: ModelSpec) -> list[RegisteredBackend]:
        """The backends that would load ``spec``: the named one, or all that recognise it."""
        if spec.backend is not None:
            return [e for e in self.registered if e.backend.name == spec.backend]
        found = [e for e in self.registered if e.backend.kind == spec.kind and e.backend.accepts(spec)]
        if len(found) > 1:
            ranks = [e.backend.preference(spec) for e in found]
            found = [e for e, rank in zip(found, ranks, strict=True) if rank == max(ranks)]
        return found

    def choose(self, spec: ModelSpec) -> Backend:
        """The backend that loads ``spec``; an OpenAI-shaped error when none or several would."""
        found = self.claimants(spec)
        if len(found) > 1:
            raise ModelLoadError(_conflict(spec, found), param="model", code="ambiguous_backend")
        if not found:
            if spec.backend is not None:
                wanted = f"backend {spec.backend!r}"
            else:
                wanted = f"a {spec.kind} backend that recognises the source {spec.source!r}"
            raise ModelLoadError(
                f"No plugin provides {wanted} for model '{spec.name}'. Is the plugin installed and not blocked "
                "(flexserv plugins)? A backend that only loads models naming it needs backend = NAME in the "
                "model's [[models]] table.",
                param="model",
            )
        backend = found[0].backend
        if backend.kind != spec.kind:
            raise ModelLoadError(
                f"Model '{spec.name}' is a {spec.kind} model, but backend '{backend.name}' loads {backend.kind} models.",
                param="model",
            )
        return backend

    def check(self, specs: Iterable[ModelSpec]) -> None:
        """At start-up: a spec two backends claim is a :class:`UsageError` naming both;
        a spec no backend would load is logged (requests for it answer 503)."""
        for spec in specs:
            found = self.claimants(spec)
            if len(found) > 1:
                raise UsageError(_conflict(spec, found))
            if not found:
                log.warning(
                    "no installed backend loads %s model '%s' (source %r%s): requests for it will fail",
                    spec.kind,
                    spec.name,
                    spec.source,
                    f", backend {spec.backend!r}" if spec.backend else "",
                )
