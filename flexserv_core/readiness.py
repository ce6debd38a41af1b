"""Readiness: models loaded at start-up (``--preload``) and what health reports meanwhile.

``--preload NAME`` (repeatable, or ``all`` for every configured and default
model) loads those models in the background once the server has started, one
after the other, with the backends' progress in the log. Until every one is
ready, ``GET /v1/flexserv/health`` answers 503 with each model's state; a failed
preload keeps it at 503 and names the model and the error. Once ready, the
server stays ready: a later unload or TTL eviction only means the next request
loads the model again. ``GET /health`` never waits for models (liveness).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Iterable, Sequence

import msgspec

from flexserv_core.errors import UsageError
from flexserv_core.models.catalog import ModelCatalog
from flexserv_core.models.registry import ModelRegistry
from flexserv_core.models.spec import ModelSpec

log = logging.getLogger(__name__)

ALL = "all"


class PreloadState(enum.StrEnum):
    PENDING = "pending"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class PreloadStatus(msgspec.Struct, kw_only=True):
    model_id: str
    kind: str
    state: PreloadState = PreloadState.PENDING
    seconds: float | None = None
    error: str | None = None


def preload_specs(catalog: ModelCatalog, names: Iterable[str]) -> list[ModelSpec]:
    """The specs ``--preload`` names (``all``: every known model), in order, once each.

    Raises :class:`UsageError` naming the setting for a name the catalog does not know.
    """
    wanted = list(names)
    if ALL in wanted:
        return catalog.specs()
    specs: list[ModelSpec] = []
    for name in wanted:
        spec = catalog.get(name)
        if spec is None:
            known = ", ".join(s.name for s in catalog.specs()) or "none"
            raise UsageError(
                f"invalid value for setting 'preload' (--preload): no model named {name!r} is configured"
                f" (known: {known}; or use 'all')"
            )
        if spec not in specs:
            specs.append(spec)
    return specs


class Preloader:
    """Loads ``specs`` in the background and reports their states."""

    def __init__(self, registry: ModelRegistry, specs: Sequence[ModelSpec]) -> None:
        self.registry = registry
        self.statuses = [PreloadStatus(model_id=s.name, kind=str(s.kind)) for s in specs]
        self._specs = list(specs)
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Every preload finished successfully (true when there is none)."""
        return all(s.state is PreloadState.READY for s in self.statuses)

    @property
    def failed(self) -> list[PreloadStatus]:
        return [s for s in self.statuses if s.state is PreloadState.FAILED]

    def start(self) -> None:
        if self._specs and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="preload")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        total = len(self._specs)
        log.info("preloading %d model(s): %s", total, ", ".join(s.name for s in self._specs))
        for i, (spec, status) in enumerate(zip(self._specs, self.statuses, strict=True), start=1):
            status.state = PreloadState.LOADING
            log.info("preload %d/%d: loading %s model '%s'", i, total, spec.kind, spec.name)
            started = time.perf_counter()
            try:
                await self.registry.ensure_loaded(spec)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                status.state, status.error = PreloadState.FAILED, str(exc)
                log.error("preload %d/%d: model '%s' failed: %s", i, total, spec.name, exc)
                continue
            status.state, status.seconds = PreloadState.READY, round(time.perf_counter() - started, 2)
            log.info("preload %d/%d: model '%s' ready in %.1f s", i, total, spec.name, status.seconds)
        if self.ready:
            log.info("preload done: all %d model(s) ready", total)
        else:
            log.error("preload done with failures: %s", ", ".join(s.model_id for s in self.failed))

    def report(self) -> dict[str, object]:
        """The ``preload`` object of the health response."""
        return {"ready": self.ready, "models": [msgspec.to_builtins(s) for s in self.statuses]}
