"""The ``anomaly`` kind: a fitted detector as a registry model, and the backend that loads it from the store."""

from __future__ import annotations

import asyncio
import logging
import os

import numpy as np

from flexserv_anomaly import codec
from flexserv_anomaly.fitted import FittedModel
from flexserv_anomaly.store import parse_registry_name
from flexserv_core import Backend, LoadedModel, ModelLoadError, ModelSpec, ProgressCallback, Settings

log = logging.getLogger(__name__)

KIND = "anomaly"
BACKEND = "anomaly-store"
SOURCE_PREFIX = "anomaly:"

#: Fewest rows a request needs before it is split (each chunk repeats the per-call
#: cost: ~3 ms for 100 trees).
PARALLEL_ROWS = 8192


def chunk_count(rows: int, threads: int) -> int:
    """How many row chunks a request of ``rows`` is scored in (at most one per CPU)."""
    if rows < PARALLEL_ROWS or threads <= 1:
        return 1
    return max(1, min(threads, os.cpu_count() or 1, rows // (PARALLEL_ROWS // 2)))


class AnomalyModel(LoadedModel):
    """A fitted model, read-only: a refit of the same name is a new ``AnomalyModel``
    (requests holding this one finish on it)."""

    kind = KIND

    def __init__(self, spec: ModelSpec, fitted: FittedModel, checksum: str, threads: int = 1) -> None:
        super().__init__(spec, device="cpu", dtype="float64")
        self.fitted = fitted
        self.checksum = checksum
        self.threads = threads

    async def raw_scores(self, x: np.ndarray) -> np.ndarray:
        """Scores in a worker thread; a large request in ``threads`` row chunks at once
        where the detector allows it (``parallel_scoring``: a row's score depends on that
        row alone, so the chunks give the same values as one call, bit for bit)."""
        chunks = chunk_count(len(x), self.threads) if self.fitted.detector.parallel_scoring else 1
        if chunks == 1:
            return await asyncio.to_thread(self.fitted.raw_scores, x)
        parts = await asyncio.gather(
            *(asyncio.to_thread(self.fitted.raw_scores, part) for part in np.array_split(x, chunks))
        )
        return np.concatenate(parts)

    def unload(self) -> None:
        del self.fitted


class AnomalyStoreBackend(Backend):
    """Loads models the fit route stored: specs ``anomaly:<name>`` made by the plugin's resolver."""

    name = BACKEND
    kind = KIND

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source.startswith(SOURCE_PREFIX)

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        from flexserv_anomaly.service import service_for

        service = service_for(self.settings)
        parsed = parse_registry_name(spec.source.removeprefix(SOURCE_PREFIX))
        if parsed is None or service.loop is None:
            raise ModelLoadError(f"'{spec.source}' is not an anomaly model this server stores.", param="model")
        name, owner = parsed
        # load() runs in a worker thread; the state store belongs to the server's event loop.
        for attempt in (1, 2):
            stored = asyncio.run_coroutine_threadsafe(service.store.get(name, owner=owner), service.loop).result()
            if stored is None:
                raise ModelLoadError(
                    f"The anomaly model '{name}' is not stored (deleted?); fit it again.", param="model"
                )
            header, blob = stored
            checksum = str(header.get("checksum"))
            fitted = service.take_fresh(spec.name, checksum)
            if fitted is not None:
                break
            progress(f"checking and refitting stored anomaly model '{name}'", None)
            try:
                fitted = codec.decode(header, blob, max_bytes=service.limits.anomaly_max_model_bytes)
                break
            except codec.CorruptModel as exc:
                # A refit may replace the record between reading its header and its blob: read once more.
                if attempt == 2 or "checksum" not in str(exc):
                    raise corrupt(name, exc) from None
        assert fitted is not None
        return AnomalyModel(spec, fitted, checksum, threads=service.limits.anomaly_score_threads)


class CorruptModelError(ModelLoadError):
    """A stored model that fails its checks: retrying cannot help (409, not the 503 of a failed load)."""

    status_code = 409


def corrupt(name: str, exc: Exception) -> ModelLoadError:
    log.error("refusing stored anomaly model '%s': %s", name, exc)
    return CorruptModelError(
        f"The stored anomaly model '{name}' was refused: {exc}. Delete it or fit it again.",
        param="model",
        code="anomaly_model_corrupt",
    )
