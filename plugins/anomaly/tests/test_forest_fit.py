"""The isolation forest's direct fit builds ``IsolationForest.fit``'s forest, and is used
only where this process has seen it do so."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from flexserv_anomaly import forest_fit
from flexserv_anomaly.detectors import DETECTORS, build, check_params
from sklearn.base import clone
from sklearn.ensemble import IsolationForest

ROWS = np.random.default_rng(11).normal(size=(3000, 7))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"bootstrap": True},
        {"max_features": 0.5},
        {"max_features": 3, "bootstrap": True, "n_estimators": 30},
        {"max_samples": 0.2},
        {"max_samples": 500},
        {"max_samples": 10_000},  # more than the rows: scikit-learn takes them all
        {"n_estimators": 1, "random_state": 2**31 - 1},
    ],
    ids=repr,
)
@pytest.mark.filterwarnings("ignore:max_samples")  # scikit-learn's, for 10,000 of 3,000 rows
def test_the_direct_fit_builds_the_librarys_forest(params: dict[str, Any]) -> None:
    library = IsolationForest(contamination="auto", **{"random_state": 42, **params})
    direct = clone(library)
    library.fit(ROWS)
    forest_fit.fit_isolation_forest(direct, ROWS)
    assert forest_fit.same_fitted(vars(library), vars(direct))
    assert np.array_equal(library.score_samples(ROWS), direct.score_samples(ROWS))


def test_the_comparison_sees_a_different_forest() -> None:
    one = IsolationForest(contamination="auto", random_state=1, n_estimators=5).fit(ROWS)
    other = IsolationForest(contamination="auto", random_state=2, n_estimators=5).fit(ROWS)
    assert forest_fit.same_fitted(vars(one), vars(clone(one).fit(ROWS)))
    assert not forest_fit.same_fitted(vars(one), vars(other))
    # one node's threshold moved is enough
    moved = clone(one).fit(ROWS)
    state = moved.estimators_[3].tree_.__getstate__()
    state["nodes"]["threshold"][0] += 1e-6
    moved.estimators_[3].tree_.__setstate__(state)
    assert not forest_fit.same_fitted(vars(one), vars(moved))


def test_the_detector_fits_directly_once_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = forest_fit.fit_isolation_forest

    def counting(forest: Any, x: np.ndarray) -> None:
        calls.append(len(x))
        real(forest, x)

    monkeypatch.setattr(forest_fit, "_VERIFIED", {})
    monkeypatch.setattr(forest_fit, "fit_isolation_forest", counting)
    detector = build("isolation_forest", check_params(DETECTORS["isolation_forest"], {}), 0.05)
    detector.fit(ROWS)
    assert calls == [600, len(ROWS)]  # the check on its own seeded rows, then the fit itself
    reference = IsolationForest(contamination="auto", random_state=42).fit(ROWS)
    assert np.array_equal(detector.raw_scores(ROWS), -reference.score_samples(ROWS))


def test_a_direct_fit_that_differs_is_never_used(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    real = forest_fit.fit_isolation_forest
    used: list[int] = []

    def off_by_a_tree(forest: Any, x: np.ndarray) -> None:
        used.append(len(x))
        real(forest, x)
        forest.estimators_.pop()

    monkeypatch.setattr(forest_fit, "_VERIFIED", {})
    monkeypatch.setattr(forest_fit, "fit_isolation_forest", off_by_a_tree)
    detector = build("isolation_forest", check_params(DETECTORS["isolation_forest"], {}), 0.05)
    detector.fit(ROWS)
    assert used == [600]  # the check ran, and the fit was scikit-learn's
    assert "differs from scikit-learn's" in caplog.text
    reference = IsolationForest(contamination="auto", random_state=42).fit(ROWS)
    assert np.array_equal(detector.raw_scores(ROWS), -reference.score_samples(ROWS))


def test_random_parameter_sets_give_the_librarys_forest() -> None:
    """Twenty seeded draws of shapes and parameters, beyond the hand-picked ones above."""
    draw = np.random.default_rng(2026)
    for _ in range(20):
        n_rows, n_features = int(draw.integers(2, 700)), int(draw.integers(1, 9))
        rows = draw.normal(size=(n_rows, n_features)) * draw.uniform(0.1, 100, size=n_features)
        params: dict[str, Any] = {
            "n_estimators": int(draw.integers(1, 25)),
            "bootstrap": bool(draw.integers(2)),
            "random_state": int(draw.integers(0, 2**31 - 1)),
            "max_samples": ["auto", int(draw.integers(1, 2 * n_rows)), float(draw.uniform(0.05, 1.0))][
                int(draw.integers(3))
            ],
            "max_features": [float(draw.uniform(0.05, 1.0)), int(draw.integers(1, n_features + 1))][
                int(draw.integers(2))
            ],
        }
        library = IsolationForest(contamination="auto", **params)
        direct = clone(library)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # max_samples above the row count
            library.fit(rows)
        forest_fit.fit_isolation_forest(direct, rows)
        assert forest_fit.same_fitted(vars(library), vars(direct)), params
        assert np.array_equal(library.score_samples(rows), direct.score_samples(rows)), params
