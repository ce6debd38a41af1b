"""Streaming detection: points scored as they arrive against a model of a rolling window.

* **Cold start**: until ``min_samples`` points have arrived a point gets no score
  (``status: "collecting"``); the request that completes them fits the first
  model (off the event loop) and is scored with it.
* **Refits**: every ``retrain_interval`` points a new model is fitted on a copy of
  the window in a background thread while scoring goes on with the current one;
  the new model replaces it in one assignment (``model_version`` + 1).
* **Drift**: the points since the last fit are compared with the window the
  model was fitted on: the largest per-feature mean shift in reference standard
  deviations, and the observed anomaly rate against the expected one.

Detectors live in memory (at most ``--anomaly-max-stream-detectors``), keyed by id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexserv_anomaly import fitted as fitting
from flexserv_anomaly.settings import AnomalySettings

log = logging.getLogger(__name__)
RECENT = 1000


@dataclass(frozen=True)
class StreamConfig:
    backend: str
    params: dict[str, Any]
    contamination: float
    min_samples: int
    retrain_interval: int
    window_size: int
    threshold: float | None
    width: int
    features: list[str] | None


@dataclass
class PointResult:
    index: int
    score: float | None
    is_anomaly: bool | None
    raw_score: float | None
    samples_until_ready: int


class StreamDetector:
    def __init__(self, model_id: str, config: StreamConfig) -> None:
        self.model_id = model_id
        self.config = config
        self.window: deque[np.ndarray] = deque(maxlen=config.window_size)
        self.model: fitting.FittedModel | None = None
        self.model_version = 0
        self.total_processed = 0
        self.samples_since_retrain = 0
        self.refit_task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        self.ref_mean = np.zeros(config.width)
        self.ref_std = np.ones(config.width)
        self.recent_rows: deque[np.ndarray] = deque(maxlen=RECENT)
        self.recent_flags: deque[bool] = deque(maxlen=RECENT)
        self.refits_failed = 0

    @property
    def status(self) -> str:
        if self.model is None:
            return "collecting"
        return "retraining" if self.refit_task is not None and not self.refit_task.done() else "ready"

    def samples_until_ready(self) -> int:
        return 0 if self.model is not None else max(0, self.config.min_samples - len(self.window))

    def threshold(self, override: float | None) -> float | None:
        if override is not None:
            return override
        if self.config.threshold is not None:
            return self.config.threshold
        return self.model.stats.threshold("standardization") if self.model is not None else None

    def _spec(self) -> fitting.FitSpec:
        c = self.config
        return fitting.FitSpec(backend=c.backend, params=c.params, contamination=c.contamination)

    def _fit_window(self, rows: np.ndarray) -> fitting.FittedModel:
        return fitting.fit(self._spec(), rows)

    def _adopt(self, model: fitting.FittedModel, rows: np.ndarray) -> None:
        self.model = model
        self.model_version += 1
        self.samples_since_retrain = 0
        self.ref_mean = rows.mean(axis=0)
        std = rows.std(axis=0)
        self.ref_std = np.where(std > 0, std, 1.0)
        self.recent_rows.clear()
        self.recent_flags.clear()

    async def process(self, points: np.ndarray, threshold: float | None) -> list[PointResult]:
        async with self.lock:
            results: list[PointResult] = []
            appended = 0
            while appended < len(points) and self.model is None:
                self.window.append(points[appended])
                appended += 1
                self.total_processed += 1
                if len(self.window) >= self.config.min_samples:
                    rows = np.array(self.window)
                    self._adopt(await asyncio.to_thread(self._fit_window, rows), rows)
                    log.info("stream '%s' is ready: first model fitted on %d points", self.model_id, len(rows))
                    break
                results.append(PointResult(appended - 1, None, None, None, self.samples_until_ready()))
            start = len(results)  # the point that completed the cold start is scored too
            if start == len(points):
                return results
            self.window.extend(points[appended:])
            self.total_processed += len(points) - appended
            model = self.model
            assert model is not None
            rest = points[start:]
            raw = await asyncio.to_thread(model.raw_scores, rest)
            scores = model.stats.normalise(raw, "standardization")
            limit = self.threshold(threshold)
            assert limit is not None
            for j, (score, value) in enumerate(zip(scores.tolist(), raw.tolist(), strict=True)):
                flag = score >= limit
                results.append(PointResult(start + j, score, flag, value, 0))
                self.recent_flags.append(flag)
            self.recent_rows.extend(rest)
            self.samples_since_retrain += len(rest)
            self._maybe_refit()
            return results

    def _maybe_refit(self) -> None:
        if self.samples_since_retrain < self.config.retrain_interval:
            return
        if self.refit_task is not None and not self.refit_task.done():
            return
        rows = np.array(self.window)
        self.refit_task = asyncio.get_running_loop().create_task(self._refit(rows), name=f"refit {self.model_id}")

    async def _refit(self, rows: np.ndarray) -> None:
        try:
            model = await asyncio.to_thread(self._fit_window, rows)
        except Exception:
            self.refits_failed += 1
            log.exception(
                "refitting stream '%s' failed; it keeps its model version %d", self.model_id, self.model_version
            )
            return
        self._adopt(model, rows)
        log.info("stream '%s' refitted on %d points: model version %d", self.model_id, len(rows), self.model_version)

    def drift(self) -> dict[str, Any] | None:
        if self.model is None or not self.recent_rows:
            return None
        recent = np.array(self.recent_rows)
        shift = np.abs(recent.mean(axis=0) - self.ref_mean) / self.ref_std
        worst = int(np.argmax(shift))
        names = self.config.features
        return {
            "points_since_fit": len(recent),
            "max_mean_shift": float(shift[worst]),
            "max_mean_shift_feature": names[worst] if names else worst,
            "anomaly_rate": float(np.mean(self.recent_flags)) if self.recent_flags else 0.0,
            "expected_anomaly_rate": self.config.contamination,
        }

    def stats(self) -> dict[str, Any]:
        c = self.config
        return {
            "model_id": self.model_id,
            "backend": c.backend,
            "status": self.status,
            "model_version": self.model_version,
            "samples_collected": len(self.window),
            "total_processed": self.total_processed,
            "samples_since_retrain": self.samples_since_retrain,
            "min_samples": c.min_samples,
            "retrain_interval": c.retrain_interval,
            "window_size": c.window_size,
            "threshold": self.threshold(None),
            "is_ready": self.model is not None,
            "features": c.features,
            "refits_failed": self.refits_failed,
            "drift": self.drift(),
        }

    async def close(self) -> None:
        task = self.refit_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class StreamRegistry:
    def __init__(self, limits: AnomalySettings) -> None:
        self.limits = limits
        self.detectors: dict[str, StreamDetector] = {}

    def get(self, model_id: str) -> StreamDetector | None:
        return self.detectors.get(model_id)

    def create(self, model_id: str, config: StreamConfig) -> StreamDetector:
        detector = self.detectors[model_id] = StreamDetector(model_id, config)
        return detector

    def full(self) -> bool:
        return len(self.detectors) >= self.limits.anomaly_max_stream_detectors

    async def delete(self, model_id: str) -> bool:
        detector = self.detectors.pop(model_id, None)
        if detector is None:
            return False
        await detector.close()
        return True

    async def close(self) -> None:
        for model_id in list(self.detectors):
            await self.delete(model_id)
