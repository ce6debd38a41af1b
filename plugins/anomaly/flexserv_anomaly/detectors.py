"""The detectors: a fixed table of names, their parameters and how to fit and score them.

Every detector turns rows into *raw scores where higher means more anomalous*
(scikit-learn's own convention is the opposite, so its scores are negated).
A detector is rebuilt from its name and parameters only (nothing in a stored
file selects a class), and fitting it twice on the same rows gives the same
scores: that is what lets the persistence format store rows, not objects.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from flexserv_anomaly import forest_fit

#: The extra that brings PyOD's detectors (``pip install 'flexserv-anomaly[pyod]'``).
PYOD_EXTRA = "flexserv-anomaly[pyod]"


class DetectorError(ValueError):
    """A request's detector or parameter is wrong; ``param`` names the field."""

    def __init__(self, message: str, param: str, code: str = "invalid_parameter") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class Detector(Protocol):
    #: Whether a large request may be scored in row chunks in parallel threads: a row's
    #: score depends on that row alone (not on the rows scored with it), and scoring
    #: costs enough and releases the GIL long enough for threads to gain.
    parallel_scoring: bool

    def fit(self, x: np.ndarray) -> None: ...

    def raw_scores(self, x: np.ndarray) -> np.ndarray: ...

    def training_raw_scores(self) -> np.ndarray | None:
        """Raw scores of every training row that the fit computed anyway, or ``None``
        (then the training rows are scored again for the score statistics)."""
        ...

    def statistics_raw_scores(self, x: np.ndarray) -> np.ndarray | None:
        """The raw scores of ``x`` (training rows sampled for the score statistics)
        computed faster than :meth:`raw_scores` and equal to them within float
        rounding, or ``None`` (then :meth:`raw_scores` computes them)."""
        ...


@dataclass(frozen=True)
class Param:
    """One tunable parameter: its type, default and bounds (checked on every fit)."""

    type: str  # "int", "float", "bool", "choice", "float_or_choice", "int_or_float_or_choice"
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    low_open: bool = False

    def check(self, name: str, value: Any) -> Any:
        where = f"parameters.{name}"
        if value is None:
            return self.default
        if self.choices and isinstance(value, str):
            if value in self.choices:
                return value
            raise DetectorError(f"'{where}' must be one of {', '.join(self.choices)}; got {value!r}.", where)
        if self.type == "choice":
            raise DetectorError(f"'{where}' must be one of {', '.join(self.choices)}.", where)
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            raise DetectorError(f"'{where}' must be true or false.", where)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DetectorError(f"'{where}' must be a number.", where)
        if self.type == "int" and not isinstance(value, int):
            raise DetectorError(f"'{where}' must be an integer.", where)
        if isinstance(value, float) and not math.isfinite(value):
            raise DetectorError(f"'{where}' must be finite.", where)
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        if too_low or (self.high is not None and value > self.high):
            interval = f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
            raise DetectorError(f"'{where}' must be in {interval}; got {value!r}.", where)
        return value


@dataclass(frozen=True)
class DetectorInfo:
    """What ``GET /v1/anomaly/backends`` says about a detector, and how to build it."""

    name: str
    title: str
    description: str
    category: str
    speed: str
    memory: str
    best_for: str
    params: Mapping[str, Param]
    build: Callable[[dict[str, Any], float], Detector]
    requires: str | None = None  # a module that must be importable
    aliases: tuple[str, ...] = field(default=())

    def available(self) -> bool:
        if self.requires is None:
            return True
        import importlib.util

        return importlib.util.find_spec(self.requires) is not None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "name": self.title,
            "description": self.description,
            "category": self.category,
            "speed": self.speed,
            "memory": self.memory,
            "parameters": {
                k: {"type": p.type, "default": p.default, "description": p.description}
                | ({"choices": list(p.choices)} if p.choices else {})
                for k, p in self.params.items()
            },
            "best_for": self.best_for,
            "is_legacy": False,
            "available": self.available(),
            "requires": PYOD_EXTRA if self.requires else None,
        }


class _Negated:
    """A scikit-learn novelty detector whose ``score_samples`` is higher for normal rows."""

    parallel_scoring = True  # trees, neighbour searches and libsvm score row by row

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator

    def fit(self, x: np.ndarray) -> None:
        self.estimator.fit(x)

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        return -np.asarray(self.estimator.score_samples(x), dtype=np.float64)

    def training_raw_scores(self) -> np.ndarray | None:
        # LOF's fit computes every training row's factor among the other training rows;
        # scoring those rows again as new ones would count each row as its own neighbour.
        factors = getattr(self.estimator, "negative_outlier_factor_", None)
        return None if factors is None else -np.asarray(factors, dtype=np.float64)

    def statistics_raw_scores(self, x: np.ndarray) -> np.ndarray | None:
        return None


class _IsolationForest(_Negated):
    """scikit-learn's isolation forest, fitted by :mod:`flexserv_anomaly.forest_fit` (the same
    forest as ``fit``'s, without its per-tree bookkeeping) and scored by the same per-tree computation as its
    ``score_samples`` without joblib's dispatch of one task per tree (~30 us a tree:
    3 ms of every call with 100 trees, 10-30% of scoring 2,000-10,000 rows).

    The loop mirrors ``IsolationForest._compute_score_samples`` (scikit-learn 1.4-1.9)
    through its private attributes, and is used only once this process has seen it give
    ``score_samples``' values bit for bit (checked on the first call of each kind: all
    features or a feature subsample); otherwise, or if the attributes are gone, scoring
    is ``score_samples`` itself."""

    def __init__(self, estimator: Any) -> None:
        super().__init__(estimator)
        self._node_depths: list[np.ndarray] | None = None

    def fit(self, x: np.ndarray) -> None:
        self._node_depths = None
        if forest_fit.applies(self.estimator, x):
            forest_fit.fit_isolation_forest(self.estimator, x)
        else:
            super().fit(x)

    def __getstate__(self) -> dict[str, Any]:
        # Derived from the fitted trees: rebuilt on first use rather than pickled with the model.
        return {**self.__dict__, "_node_depths": None}

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        subsample = _forest_subsamples(self.estimator, x)
        verified = _FOREST_LOOP.get(subsample)
        if verified is False:
            return super().raw_scores(x)
        try:
            if self._node_depths is None:
                self._node_depths = _node_depths(self.estimator)
            fast = _forest_raw_scores(self.estimator, x, subsample, self._node_depths)
        except (AttributeError, TypeError, ValueError, IndexError):
            _FOREST_LOOP[subsample] = False
            return super().raw_scores(x)
        if verified is None:
            library = super().raw_scores(x)
            _FOREST_LOOP[subsample] = bool(np.array_equal(fast, library))
            if not _FOREST_LOOP[subsample]:
                import logging

                logging.getLogger(__name__).warning(
                    "the isolation forest's scoring loop differs from scikit-learn's score_samples here: not used"
                )
            return library
        return fast


#: Whether :func:`_forest_raw_scores` gave ``score_samples``' values in this process, by
#: whether the forest subsamples features (None: not checked yet).
_FOREST_LOOP: dict[bool, bool] = {}


def _forest_subsamples(forest: Any, x: np.ndarray) -> bool:
    return bool(getattr(forest, "_max_features", x.shape[1]) != x.shape[1])


def _node_depths(forest: Any) -> list[np.ndarray]:
    """Per tree, what ``score_samples`` adds for a row that ends in each node:
    ``path_lengths[leaf] + average_lengths[leaf] - 1.0``, computed once per node instead of
    once per row and call (the same float operations in the same order: the same values)."""
    return [
        path_lengths + average_lengths - 1.0
        for path_lengths, average_lengths in zip(
            forest._decision_path_lengths, forest._average_path_length_per_tree, strict=True
        )
    ]


def _forest_raw_scores(forest: Any, x: np.ndarray, subsample: bool, node_depths: list[np.ndarray]) -> np.ndarray:
    from sklearn.ensemble._iforest import _average_path_length

    rows = np.asarray(x, dtype=np.float32, order="C")  # score_samples' validation: float32, C order
    depths: np.ndarray = np.zeros(int(rows.shape[0]), order="F")
    for tree, features, node_depth in zip(forest.estimators_, forest.estimators_features_, node_depths, strict=True):
        leaves = tree.tree_.apply(rows[:, features] if subsample else rows)
        depths += node_depth.take(leaves)
    denominator = len(forest.estimators_) * _average_path_length([forest._max_samples])
    scores: np.ndarray = 2 ** (-np.divide(depths, denominator, out=np.ones_like(depths), where=denominator != 0))
    return scores  # score_samples is -scores; the raw score, higher for anomalies, is scores


class _OneClassSVM(_Negated):
    """scikit-learn's One-Class SVM. Its ``score_samples`` is the kernel expansion
    ``sum_i dual_coef_i * K(sv_i, x)``; libsvm evaluates it one row and one support
    vector at a time, numpy as one matrix product per block of rows, ~10x faster for
    the statistics' 2,048 rows (equal within float rounding: see the tests). Scoring
    requests still go through libsvm."""

    #: Kernel values computed at once by :meth:`statistics_raw_scores` (512 kB of float64:
    #: small blocks stay in the CPU cache and reuse freed memory).
    BLOCK_VALUES = 2**16

    def statistics_raw_scores(self, x: np.ndarray) -> np.ndarray | None:
        svm = self.estimator
        vectors = np.asarray(svm.support_vectors_, dtype=np.float64)
        coef = np.asarray(svm.dual_coef_, dtype=np.float64).ravel()
        if svm.kernel not in ("rbf", "linear", "poly", "sigmoid") or len(vectors) == 0:
            return None
        gamma = float(svm._gamma)
        vector_norms = np.einsum("ij,ij->i", vectors, vectors)
        out = np.empty(len(x))
        step = max(1, self.BLOCK_VALUES // len(vectors))
        # One BLAS thread: these products are small, and OpenBLAS's idle threads spin for a
        # while after each one, taking a core from the fit that follows (measured: the next
        # libsvm fit used 1.6x its CPU time on the shared 2-core machine).
        # threadpoolctl's limit is process-wide and restores what it found on exit: two
        # overlapping limits (refits on load run in the server process) would leave one thread
        with _BLAS_LIMIT, _blas().limit(limits=1, user_api="blas"):
            self._expand(x, vectors, vector_norms, coef, gamma, step, out)
        return -out

    def _expand(
        self,
        x: np.ndarray,
        vectors: np.ndarray,
        vector_norms: np.ndarray,
        coef: np.ndarray,
        gamma: float,
        step: int,
        out: np.ndarray,
    ) -> None:
        svm = self.estimator
        for start in range(0, len(x), step):
            rows = x[start : start + step]
            dot = rows @ vectors.T
            if svm.kernel == "rbf":
                # libsvm's own form: |x|^2 + |v|^2 - 2 x.v
                row_norms = np.einsum("ij,ij->i", rows, rows)
                kernel = np.exp(-gamma * (row_norms[:, None] + vector_norms[None, :] - 2 * dot))
            elif svm.kernel == "linear":
                kernel = dot
            elif svm.kernel == "poly":
                kernel = (gamma * dot + svm.coef0) ** svm.degree
            else:
                kernel = np.tanh(gamma * dot + svm.coef0)
            out[start : start + step] = kernel @ coef


_BLAS: Any = None
_BLAS_LIMIT = threading.Lock()


def _blas() -> Any:
    """threadpoolctl's view of the loaded BLAS (inspected once: ~0.4 ms a time)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

        _BLAS = ThreadpoolController()
    return _BLAS


class RobustZScore:
    """Per feature, ``|x - median| / (1.4826 * MAD)`` (a z-score that outliers in the
    training rows do not inflate); a row's raw score is its largest one. A feature
    whose MAD is 0 falls back to its standard deviation, then to 1."""

    parallel_scoring = False  # ~0.1 us a row: threads would cost more than they save

    def __init__(self, params: dict[str, Any]) -> None:
        self.combine = params["combine"]
        self.median = np.zeros(0)
        self.scale = np.ones(0)

    def fit(self, x: np.ndarray) -> None:
        self.median = np.median(x, axis=0)
        mad = 1.4826 * np.median(np.abs(x - self.median), axis=0)
        std = x.std(axis=0)
        self.scale = np.where(mad > 0, mad, np.where(std > 0, std, 1.0))

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        z = np.abs(x - self.median) / self.scale
        out: np.ndarray = z.max(axis=1) if self.combine == "max" else np.sqrt((z * z).mean(axis=1))
        return out

    def training_raw_scores(self) -> np.ndarray | None:
        return None

    def statistics_raw_scores(self, x: np.ndarray) -> np.ndarray | None:
        return None


class _PyOD:
    """ECOD or COPOD from PyOD: ``decision_function`` is already higher for outliers."""

    parallel_scoring = False  # PyOD's scoring may look at all the rows of a call together

    def __init__(self, name: str, contamination: float) -> None:
        if name == "ecod":
            from pyod.models.ecod import ECOD as Model
        else:
            from pyod.models.copod import COPOD as Model
        self.model = Model(contamination=contamination)

    def fit(self, x: np.ndarray) -> None:
        self.model.fit(x)

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.decision_function(x), dtype=np.float64)

    def training_raw_scores(self) -> np.ndarray | None:
        return None  # PyOD's own training scores are in-sample ones, unlike the scores of new rows

    def statistics_raw_scores(self, x: np.ndarray) -> np.ndarray | None:
        return None


def _isolation_forest(params: dict[str, Any], contamination: float) -> Detector:
    from sklearn.ensemble import IsolationForest

    max_samples = params["max_samples"]
    return _IsolationForest(
        IsolationForest(
            n_estimators=params["n_estimators"],
            max_samples=max_samples,
            max_features=params["max_features"],
            bootstrap=params["bootstrap"],
            # "auto": with a fraction the fit scores every training row once more only to set
            # offset_, which nothing here reads (the threshold comes from our own statistics).
            contamination="auto",
            random_state=params["random_state"],
        )
    )


def _lof(params: dict[str, Any], contamination: float) -> Detector:
    from sklearn.neighbors import LocalOutlierFactor

    return _Negated(
        LocalOutlierFactor(
            n_neighbors=params["n_neighbors"],
            metric=params["metric"],
            leaf_size=params["leaf_size"],
            novelty=True,
            contamination=contamination,
        )
    )


def _ocsvm(params: dict[str, Any], contamination: float) -> Detector:
    from sklearn.svm import OneClassSVM

    nu = params["nu"] if params["nu"] is not None else contamination
    return _OneClassSVM(
        OneClassSVM(
            kernel=params["kernel"],
            gamma=params["gamma"],
            nu=nu,
            degree=params["degree"],
            coef0=params["coef0"],
            tol=params["tol"],
        )
    )


_SEED = Param(
    "int", 42, "Seed of the random tree construction (fixed so that a refit reproduces the model).", 0, 2**31 - 1
)

DETECTORS: dict[str, DetectorInfo] = {
    d.name: d
    for d in [
        DetectorInfo(
            name="isolation_forest",
            title="Isolation Forest",
            description="Random trees isolate anomalies in fewer splits than normal points (scikit-learn).",
            category="ensemble",
            speed="fast",
            memory="low",
            best_for="General purpose, many rows, mixed scales",
            params={
                "n_estimators": Param("int", 100, "Number of trees.", 1, 2000),
                "max_samples": Param(
                    "int_or_float_or_choice",
                    "auto",
                    "Rows per tree: 'auto' (min(256, n)), a count, or a fraction in (0, 1].",
                    0,
                    1e9,
                    ("auto",),
                    low_open=True,
                ),
                "max_features": Param("float", 1.0, "Fraction of features each tree draws.", 0, 1, low_open=True),
                "bootstrap": Param("bool", False, "Draw rows with replacement."),
                "random_state": _SEED,
            },
            build=_isolation_forest,
        ),
        DetectorInfo(
            name="local_outlier_factor",
            title="Local Outlier Factor (novelty mode)",
            description="Local density compared with the neighbours' (scikit-learn, novelty=True: scores new rows).",
            category="proximity",
            speed="medium",
            memory="high (keeps the training rows)",
            best_for="Clusters of different densities, up to tens of thousands of rows",
            params={
                "n_neighbors": Param("int", 20, "Neighbours compared.", 1, 10_000),
                "metric": Param(
                    "choice", "minkowski", "Distance.", choices=("minkowski", "euclidean", "manhattan", "chebyshev")
                ),
                "leaf_size": Param("int", 30, "Tree leaf size (speed only).", 1, 10_000),
            },
            build=_lof,
            aliases=("lof",),
        ),
        DetectorInfo(
            name="one_class_svm",
            title="One-Class SVM",
            description="A kernel boundary around the training rows (scikit-learn; libsvm).",
            category="boundary",
            speed="slow (quadratic in rows)",
            memory="medium",
            best_for="Few thousand rows, smooth boundaries",
            params={
                "kernel": Param("choice", "rbf", "Kernel.", choices=("rbf", "linear", "poly", "sigmoid")),
                "gamma": Param(
                    "float_or_choice",
                    "scale",
                    "Kernel width: 'scale', 'auto' or a number.",
                    0,
                    1e6,
                    ("scale", "auto"),
                    low_open=True,
                ),
                "nu": Param(
                    "float",
                    None,
                    "Upper bound on the training outlier fraction (default: contamination).",
                    0,
                    1,
                    low_open=True,
                ),
                "degree": Param("int", 3, "Degree of the poly kernel.", 1, 10),
                "coef0": Param("float", 0.0, "Independent term of the poly and sigmoid kernels.", -1e6, 1e6),
                "tol": Param("float", 1e-3, "Stopping tolerance.", 0, 1, low_open=True),
            },
            build=_ocsvm,
            aliases=("ocsvm",),
        ),
        DetectorInfo(
            name="robust_zscore",
            title="Robust z-score (median / MAD)",
            description="Per-feature distance from the median in MAD units; the largest feature's is the row's (numpy).",
            category="statistical",
            speed="very fast",
            memory="tiny",
            best_for="Univariate or independent features, spikes in series",
            params={
                "combine": Param("choice", "max", "How feature z-scores combine: max or rms.", choices=("max", "rms"))
            },
            build=lambda params, contamination: RobustZScore(params),
            aliases=("mad", "zscore"),
        ),
        DetectorInfo(
            name="ecod",
            title="ECOD",
            description="Empirical-CDF tail probabilities per feature (PyOD).",
            category="probabilistic",
            speed="fast",
            memory="medium (keeps the training rows)",
            best_for="Parameter-free baseline, many features",
            params={},
            build=lambda params, contamination: _PyOD("ecod", contamination),
            requires="pyod",
        ),
        DetectorInfo(
            name="copod",
            title="COPOD",
            description="Copula-based tail probabilities (PyOD).",
            category="probabilistic",
            speed="fast",
            memory="medium (keeps the training rows)",
            best_for="Parameter-free baseline, many features",
            params={},
            build=lambda params, contamination: _PyOD("copod", contamination),
            requires="pyod",
        ),
    ]
}

_ALIASES = {alias: d.name for d in DETECTORS.values() for alias in d.aliases}


def lookup(backend: str) -> DetectorInfo:
    """The detector ``backend`` names (an alias such as ``lof`` included); a 400 naming
    the extra when it needs one that is not installed."""
    info = DETECTORS.get(_ALIASES.get(backend, backend))
    if info is None:
        raise DetectorError(
            f"Unknown anomaly backend {backend!r}; this server has: {', '.join(DETECTORS)}.",
            "backend",
            "unknown_backend",
        )
    if not info.available():
        raise DetectorError(
            f"The anomaly backend {info.name!r} needs PyOD, which is not installed: pip install '{PYOD_EXTRA}'.",
            "backend",
            "backend_not_installed",
        )
    return info


def check_params(info: DetectorInfo, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter of ``info`` with its checked value; an unknown one is a 400 naming it."""
    for name in given:
        if name not in info.params:
            known = ", ".join(info.params) or "none"
            raise DetectorError(
                f"'{name}' is not a parameter of {info.name} (its parameters: {known}).",
                f"parameters.{name}",
                "unsupported_parameter",
            )
    return {name: p.check(name, given.get(name)) for name, p in info.params.items()}


def build(backend: str, params: dict[str, Any], contamination: float) -> Detector:
    return DETECTORS[backend].build(params, contamination)
