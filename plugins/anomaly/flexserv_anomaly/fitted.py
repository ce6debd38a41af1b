"""A fitted anomaly model: input scaling, the detector, and the training-score
statistics that turn raw scores into normalised ones.

Score normalisation (what ``score`` means in responses):

* ``standardization`` (the default): ``1 / (1 + exp(-(raw - m) / (2 * IQR)))``
  where ``m`` and ``IQR`` are the median and inter-quartile range of the raw
  scores of the training rows. A typical training row scores about 0.5, the
  score grows with the raw score (ranking, hence ROC AUC, is the detector's)
  and stays in [0, 1].
* ``zscore``: ``(raw - mean) / std`` of the training raw scores (unbounded).
* ``raw``: the detector's raw score, higher meaning more anomalous.

If the IQR (or std) is 0 the standard deviation (or 1) is used instead.

The statistics come from the raw scores of at most 2048 training rows (all of
them when there are fewer; otherwise the first 64 and a fixed seeded sample);
for the Local Outlier Factor, from the factors its fit computed for every
training row (``negative_outlier_factor_``: each row among the other rows),
so no training row is scored again; for the One-Class SVM, from its kernel
expansion evaluated with numpy (the same scores as libsvm's within float rounding,
~10x faster). The fitted threshold is the ``1 - contamination`` quantile of those rows'
scores in the chosen normalisation, so that about ``contamination`` of the
training rows are flagged. A point is anomalous when ``score >= threshold``: a
requested threshold of 0.0 flags every point under ``standardization``, and 1.0
flags only points whose score is exactly 1.0 (a raw score about 75 IQRs above
the training median, where the sigmoid reaches 1.0 in float64).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from flexserv_anomaly import detectors

Normalization = Literal["standardization", "zscore", "raw"]
NORMALIZATIONS: tuple[str, ...] = ("standardization", "zscore", "raw")
ScalerType = Literal["robust", "standard", "none"]
#: Training rows whose raw scores are kept to check that a reload reproduces the model.
FINGERPRINT_ROWS = 64
#: Most training rows scored for the score statistics (the first FINGERPRINT_ROWS and a
#: fixed, seeded sample of the rest): scoring every row again would add a second pass
#: as long as the fit for some detectors (One-Class SVM, LOF) and change little.
STATS_ROWS = 2048


@dataclass(frozen=True)
class FitSpec:
    """What a fit request asks for, already checked."""

    backend: str
    params: dict[str, Any]
    contamination: float
    scaler: ScalerType = "robust"
    features: list[str] | None = None
    input_type: Literal["numeric", "text"] = "numeric"
    embedding_model: str | None = None
    schema: dict[str, str] | None = None


@dataclass(frozen=True)
class ScoreStats:
    median: float
    iqr: float
    mean: float
    std: float
    quantile: float  # raw score at 1 - contamination

    def normalise(self, raw: np.ndarray, how: str) -> np.ndarray:
        if how == "raw":
            return raw
        if how == "zscore":
            return (raw - self.mean) / _positive(self.std, 1.0)
        spread = 2 * _positive(self.iqr, _positive(self.std, 1.0))
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-(raw - self.median) / spread))

    def threshold(self, how: str) -> float:
        return float(self.normalise(np.array([self.quantile]), how)[0])

    def as_dict(self) -> dict[str, Any]:
        """The ``training_stats`` of a fit's answer."""
        return {
            "raw_score_median": self.median,
            "raw_score_iqr": self.iqr,
            "raw_score_mean": self.mean,
            "raw_score_std": self.std,
            "raw_threshold": self.quantile,
        }


def _positive(value: float, fallback: float) -> float:
    return value if value > 0 and np.isfinite(value) else fallback


@dataclass
class FittedModel:
    """Immutable once built: scoring never changes it, a refit builds a new one."""

    spec: FitSpec
    center: np.ndarray
    scale: np.ndarray
    train: np.ndarray  # the scaled training rows: the detector is refitted from them on load
    detector: detectors.Detector
    stats: ScoreStats
    fingerprint: np.ndarray
    training_time_ms: float
    fitted_at: float = field(default_factory=time.time)

    @property
    def n_features(self) -> int:
        return int(self.train.shape[1])

    @property
    def samples(self) -> int:
        return int(self.train.shape[0])

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        return self.detector.raw_scores((x - self.center) / self.scale)

    def training_stats(self) -> dict[str, Any]:
        return self.stats.as_dict()


def _scaler(x: np.ndarray, kind: ScalerType) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    if kind == "none":
        return np.zeros(n), np.ones(n)
    if kind == "standard":
        center, spread = x.mean(axis=0), x.std(axis=0)
    else:
        # The three quantiles in one call (the median is the 50th percentile: the same value
        # as np.median's to the last bit or two), and the std only for a feature whose IQR
        # is 0. np.percentile of each feature's values sorted first (one contiguous copy,
        # then numpy's vectorised sort) gives the same values bit for bit as of the rows
        # as they are, in a third of the time: selecting along a strided axis is slow.
        q25, center, q75 = np.percentile(np.sort(np.ascontiguousarray(x.T), axis=1), [25, 50, 75], axis=1)
        spread = q75 - q25
        if not (spread > 0).all():
            spread = np.where(spread > 0, spread, x.std(axis=0))
    return center, np.where(spread > 0, spread, 1.0)


def stats_rows(n: int) -> np.ndarray:
    """Indices of the training rows scored for the statistics, the same for every fit of ``n`` rows."""
    if n <= STATS_ROWS:
        return np.arange(n)
    rest = np.random.default_rng(n).choice(np.arange(FINGERPRINT_ROWS, n), STATS_ROWS - FINGERPRINT_ROWS, replace=False)
    return np.concatenate([np.arange(FINGERPRINT_ROWS), np.sort(rest)])


def fit_detector(spec: FitSpec, train: np.ndarray) -> tuple[detectors.Detector, np.ndarray, np.ndarray]:
    """Fit the detector on already-scaled rows: ``(detector, fingerprint, raw)``, the raw
    scores of the first ``FINGERPRINT_ROWS`` rows scored as new ones (what a reload must
    reproduce) and the raw scores the statistics come from: the fit's own scores of every
    training row where the detector has them (LOF), else those of the :func:`stats_rows`."""
    detector = detectors.build(spec.backend, spec.params, spec.contamination)
    detector.fit(train)
    own = detector.training_raw_scores()
    if own is not None:
        return detector, detector.raw_scores(train[:FINGERPRINT_ROWS]), own
    rows = train[stats_rows(len(train))]
    # The fingerprint is always what scoring returns (a reload compares it with its own
    # scores); the statistics may come from a faster computation of the same scores.
    raw = detector.statistics_raw_scores(rows)
    if raw is None:
        raw = detector.raw_scores(rows)
        return detector, raw[:FINGERPRINT_ROWS], raw
    return detector, detector.raw_scores(train[:FINGERPRINT_ROWS]), raw


def scale_rows(x: np.ndarray, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(x - center) / scale`` as one new C-ordered float64 array, without a temporary:
    element by element the same IEEE operations, so the same values in any process."""
    train: np.ndarray = np.subtract(x, center, order="C", dtype=np.float64)
    np.divide(train, scale, out=train)
    return train


def fit(spec: FitSpec, x: np.ndarray, scaled: Callable[[np.ndarray, np.ndarray], None] | None = None) -> FittedModel:
    """Scale, fit and measure ``x`` (rows of finite floats, at least 2); ``scaled(center,
    scale)`` is told the scaler before the detector is fitted."""
    started = time.perf_counter()
    center, scale = _scaler(x, spec.scaler)
    if scaled is not None:
        scaled(center, scale)
    train = scale_rows(x, center, scale)
    detector, fingerprint, raw = fit_detector(spec, train)
    return assemble(spec, center, scale, train, detector, fingerprint, raw, (time.perf_counter() - started) * 1000)


def assemble(
    spec: FitSpec,
    center: np.ndarray,
    scale: np.ndarray,
    train: np.ndarray,
    detector: detectors.Detector,
    fingerprint: np.ndarray,
    raw: np.ndarray,
    training_time_ms: float,
) -> FittedModel:
    q75, q25 = np.percentile(raw, [75, 25])
    stats = ScoreStats(
        median=float(np.median(raw)),
        iqr=float(q75 - q25),
        mean=float(raw.mean()),
        std=float(raw.std()),
        quantile=float(np.quantile(raw, 1 - spec.contamination)),
    )
    return FittedModel(
        spec=spec,
        center=center,
        scale=scale,
        train=train,
        detector=detector,
        stats=stats,
        fingerprint=fingerprint.copy(),
        training_time_ms=training_time_ms,
    )
